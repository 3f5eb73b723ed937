package shm

import (
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// MaxFDs bounds the descriptors one message may carry, both ways. A
// connection's handshake needs a segment and a few eventfds; the kernel's
// own bound (SCM_MAX_FD) is 253.
const MaxFDs = 16

// SendFDs writes msg with fds attached as SCM_RIGHTS. msg must not be
// empty: on a stream socket a message without data may not carry its
// descriptors. The descriptors stay open in the sender. Use a
// SOCK_SEQPACKET connection ("unixpacket") to keep message boundaries.
func SendFDs(c *net.UnixConn, msg []byte, fds ...int) error {
	if len(msg) == 0 {
		return errors.New("shm: send descriptors: message must carry at least one byte")
	}
	if len(fds) > MaxFDs {
		return fmt.Errorf("shm: send %d descriptors: at most %d per message", len(fds), MaxFDs)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	switch {
	case err != nil:
		return fmt.Errorf("shm: send %d bytes and %d descriptors: %w", len(msg), len(fds), err)
	case n != len(msg) || oobn != len(oob):
		return fmt.Errorf("shm: send %d bytes and %d descriptors: short write (%d bytes, %d control bytes)", len(msg), len(fds), n, oobn)
	}
	return nil
}

// RecvFDs reads one message into buf and the descriptors attached to it,
// at most max of them (1 to MaxFDs). It returns the message's length and
// the descriptors, which the caller owns. A message that brings more
// descriptors than max, or more bytes than buf holds (on a packet socket),
// is an error, and every descriptor it brought is closed, as are
// descriptors from any failed read. A closed connection is io.EOF.
func RecvFDs(c *net.UnixConn, buf []byte, max int) (int, []int, error) {
	if max < 1 || max > MaxFDs {
		return 0, nil, fmt.Errorf("shm: receive up to %d descriptors: must be 1 to %d", max, MaxFDs)
	}
	oob := make([]byte, unix.CmsgSpace(max*4))
	n, oobn, flags, _, rerr := c.ReadMsgUnix(buf, oob)
	fds, perr := parseRights(oob[:oobn])
	var err error
	switch {
	case rerr != nil:
		err = fmt.Errorf("shm: receive descriptors: %w", rerr)
	case perr != nil:
		err = perr
	case flags&unix.MSG_CTRUNC != 0 || len(fds) > max:
		err = fmt.Errorf("shm: receive descriptors: the peer sent more than %d: refused", max)
	case flags&unix.MSG_TRUNC != 0:
		err = fmt.Errorf("shm: receive descriptors: message longer than %d bytes: refused", len(buf))
	case n == 0 && oobn == 0:
		err = io.EOF
	}
	if err != nil {
		closeAll(fds)
		return 0, nil, err
	}
	return n, fds, nil
}

// parseRights returns every descriptor in the SCM_RIGHTS messages of oob,
// ignoring other control messages (such as credentials). On a malformed
// buffer it returns what it parsed so far, for the caller to close.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("shm: receive descriptors: parse control messages: %w", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		fds = append(fds, got...)
		if err != nil {
			return fds, fmt.Errorf("shm: receive descriptors: parse rights: %w", err)
		}
	}
	return fds, nil
}

// closeAll closes descriptors a failed receive brought, or a caller that
// gives up on a handshake holds.
func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
