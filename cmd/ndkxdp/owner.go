package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
)

// The daemon serving an interface holds an abstract unix socket named for
// the interface. Abstract names belong to a network namespace, and the
// kernel frees one when its process exits, however it exits: the claim
// cannot go stale and leaves nothing to clean up. A second daemon for the
// interface, or a tool that would attach to it in process, asks the
// holder who it is and changes nothing.

// claimInterface claims ifname for this daemon, serving socket, until the
// returned listener is closed or the process ends. Where another daemon
// holds it, the error names that daemon.
func claimInterface(ifname, socket string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cmdline.OwnerName(ifname), Net: "unix"})
	if errors.Is(err, unix.EADDRINUSE) {
		if o, ok := cmdline.ServingDaemon(ifname); ok {
			return nil, fmt.Errorf("daemon: %s is already served by ndkxdp daemon pid %d at %s (EBUSY), left as it was: use it (-daemon %s), or stop it first (kill %d, or systemctl stop ndkxdp@%s)",
				ifname, o.PID, o.Socket, o.Socket, o.PID, ifname)
		}
		return nil, fmt.Errorf("daemon: %s is already served by another ndkxdp daemon in this network namespace (EBUSY)", ifname)
	}
	if err != nil {
		return nil, fmt.Errorf("daemon: claim %s: %w", ifname, err)
	}
	me, _ := json.Marshal(cmdline.Owner{PID: os.Getpid(), Socket: socket})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(append(me, '\n'))
			c.Close()
		}
	}()
	return ln, nil
}
