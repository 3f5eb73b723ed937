package daemon

import (
	"net"
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Allow is the daemon's allow list: the users and groups (numeric ids)
// whose processes may use it. A peer is admitted if its uid is listed, or
// its primary group or one of its supplementary groups (SO_PEERGROUPS, as
// the peer held them when it connected) is. An empty list admits every
// peer that can open the socket.
type Allow struct {
	UIDs, GIDs []uint32
}

func (a *Allow) empty() bool { return len(a.UIDs) == 0 && len(a.GIDs) == 0 }

func (a *Allow) admits(cred *unix.Ucred, c *net.UnixConn) bool {
	if a.empty() || cred.Uid == 0 || cred.Uid == uint32(os.Geteuid()) || slices.Contains(a.UIDs, cred.Uid) {
		return true
	}
	if slices.Contains(a.GIDs, cred.Gid) {
		return true
	}
	for _, g := range peerGroups(c) {
		if slices.Contains(a.GIDs, g) {
			return true
		}
	}
	return false
}

// peerGroups returns the peer's supplementary groups (SO_PEERGROUPS,
// Linux 4.13), nil if they cannot be read: the peer is then judged on its
// uid and primary group.
func peerGroups(c *net.UnixConn) []uint32 {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var out []uint32
	_ = raw.Control(func(fd uintptr) {
		buf := make([]uint32, 64)
		for range 2 {
			n := uint32(len(buf) * 4)
			_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_PEERGROUPS,
				uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(unsafe.Pointer(&n)), 0)
			switch errno {
			case 0:
				out = buf[:n/4]
				return
			case unix.ERANGE:
				buf = make([]uint32, n/4+1) // n is the length needed
			default:
				return
			}
		}
	})
	return out
}
