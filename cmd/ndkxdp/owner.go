package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The daemon serving an interface holds an abstract unix socket named for
// the interface. Abstract names belong to a network namespace, and the
// kernel frees one when its process exits, however it exits: the claim
// cannot go stale and leaves nothing to clean up. A second daemon for the
// interface, or a tool that would attach to it in process, asks the
// holder who it is and changes nothing.

// ownerName is the abstract socket (Go's leading '@') of ifname's daemon.
func ownerName(ifname string) string { return "@ndkxdp/daemon/" + ifname }

// owner is what the daemon serving an interface says of itself.
type owner struct {
	PID    int    `json:"pid"`
	Socket string `json:"socket"`
}

// claimInterface claims ifname for this daemon, serving socket, until the
// returned listener is closed or the process ends. Where another daemon
// holds it, the error names that daemon.
func claimInterface(ifname, socket string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: ownerName(ifname), Net: "unix"})
	if errors.Is(err, unix.EADDRINUSE) {
		if o, ok := servingDaemon(ifname); ok {
			return nil, fmt.Errorf("daemon: %s is already served by ndkxdp daemon pid %d at %s (EBUSY), left as it was: use it (-daemon %s), or stop it first (kill %d, or systemctl stop ndkxdp@%s)",
				ifname, o.PID, o.Socket, o.Socket, o.PID, ifname)
		}
		return nil, fmt.Errorf("daemon: %s is already served by another ndkxdp daemon in this network namespace (EBUSY)", ifname)
	}
	if err != nil {
		return nil, fmt.Errorf("daemon: claim %s: %w", ifname, err)
	}
	me, _ := json.Marshal(owner{PID: os.Getpid(), Socket: socket})
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

// servingDaemon asks the daemon serving ifname in this network namespace
// who it is; ok is false when none does. The PID is the kernel's
// (SO_PEERCRED), not the daemon's word.
func servingDaemon(ifname string) (o owner, ok bool) {
	c, err := net.DialTimeout("unix", ownerName(ifname), time.Second)
	if err != nil {
		return o, false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_ = json.NewDecoder(c).Decode(&o)
	if rc, err := c.(*net.UnixConn).SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				o.PID = int(cred.Pid)
			}
		})
	}
	if o.Socket == "" {
		o.Socket = "(unknown socket)"
	}
	return o, true
}

// servedByDaemon refuses to attach to dev in process where a daemon
// serves it: the kernel allows one XDP program and one socket per queue,
// and the daemon holds them.
func servedByDaemon(dev string) error {
	if o, ok := servingDaemon(dev); ok {
		return fmt.Errorf("%s is served by ndkxdp daemon pid %d (EBUSY): run through it with -daemon %s instead of -dev %s", dev, o.PID, o.Socket, dev)
	}
	return nil
}
