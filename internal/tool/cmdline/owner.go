package cmdline

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// OwnerName is the abstract socket (Go's leading '@') of ifname's daemon:
// the daemon holds it while it serves ifname (cmd/ndkxdp's
// claimInterface), and the kernel frees it when the daemon exits, so it
// never goes stale. A tool that would attach to ifname in process asks
// its holder who it is first.
func OwnerName(ifname string) string { return "@ndkxdp/daemon/" + ifname }

// Owner is what the daemon serving an interface says of itself.
type Owner struct {
	PID    int    `json:"pid"`
	Socket string `json:"socket"`
}

// ServingDaemon asks the daemon serving ifname in this network namespace
// who it is; ok is false when none does. The PID is the kernel's
// (SO_PEERCRED), not the daemon's word.
func ServingDaemon(ifname string) (o Owner, ok bool) {
	c, err := net.DialTimeout("unix", OwnerName(ifname), time.Second)
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

// ServedByDaemon refuses to attach to dev in process where a daemon
// serves it: the kernel allows one XDP program and one socket per queue,
// and the daemon holds them.
func ServedByDaemon(dev string) error {
	if o, ok := ServingDaemon(dev); ok {
		return fmt.Errorf("%s is served by ndkxdp daemon pid %d (EBUSY): run through it with -daemon %s instead of -dev %s", dev, o.PID, o.Socket, dev)
	}
	return nil
}
