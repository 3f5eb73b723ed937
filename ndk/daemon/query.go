package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// An operator's side of the admin requests (admin.go): the ndkxdp
// commands status, info, stats, qp and dump call these.

// SocketPath is where a daemon for ifname listens by default.
func SocketPath(ifname string) string { return "/run/ndkxdp/" + ifname + ".sock" }

// Query asks the daemon at socket (a path or unix://path) for op, one of
// the OpAdmin* requests that answer with a report, and decodes the
// answer into out.
func Query(ctx context.Context, socket, op string, out any) error {
	c, err := adminDial(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := adminCall(ctx, c, &proto.Request{ID: 1, Op: op}, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(m.Raw, out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", op, err)
	}
	return nil
}

// Dump streams the daemon's live capture: each frame the daemon's
// engines move, received and sent, keeping the first snap bytes of each
// (0: DefaultSnap), to frame, with the capture's counts so far, until ctx
// ends (then it returns nil) or frame returns an error. It fails with
// STATUS_SHARING_VIOLATION while another capture runs.
func Dump(ctx context.Context, socket string, snap int, frame func(DumpFrame, DumpCounts) error) (DumpCounts, error) {
	var last DumpCounts
	c, err := adminDial(ctx, socket)
	if err != nil {
		return last, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	var ferr error
	_, err = adminCall(ctx, c, &proto.Request{ID: 1, Op: OpAdminDump, Len: uint64(snap)}, func(m *proto.Message) bool {
		return m.Ev == EvFrames && onFrames(m, &last, frame, &ferr)
	})
	if err != nil {
		return last, err
	}
	buf := make([]byte, proto.MaxMessage)
	for ferr == nil {
		n, err := readMessage(c, buf)
		if err != nil {
			if ctx.Err() != nil {
				return last, nil
			}
			return last, fmt.Errorf("dump: %w", err)
		}
		var m proto.Message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			return last, fmt.Errorf("dump: %w", err)
		}
		if m.Ev == EvFrames {
			onFrames(&m, &last, frame, &ferr)
		}
	}
	return last, ferr
}

func onFrames(m *proto.Message, last *DumpCounts, frame func(DumpFrame, DumpCounts) error, ferr *error) bool {
	var fs []DumpFrame
	if json.Unmarshal(m.Raw, &fs) != nil || json.Unmarshal(m.Raw2, last) != nil {
		*ferr = errors.New("dump: malformed frames event")
		return true
	}
	for _, f := range fs {
		if *ferr == nil {
			*ferr = frame(f, *last)
		}
	}
	return true
}

func adminDial(ctx context.Context, socket string) (*net.UnixConn, error) {
	socket = strings.TrimPrefix(socket, "unix://")
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		return nil, fmt.Errorf("no daemon answers at %s: %w", socket, err)
	}
	return c.(*net.UnixConn), nil
}

// adminCall sends req and waits for its answer; events before it go to
// ev (if it returns false, or ev is nil, they are ignored).
func adminCall(ctx context.Context, c *net.UnixConn, req *proto.Request, ev func(*proto.Message) bool) (*proto.Message, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
		defer c.SetDeadline(time.Time{})
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(b); err != nil {
		return nil, fmt.Errorf("%s: %w", req.Op, err)
	}
	buf := make([]byte, proto.MaxMessage)
	for range 1 << 20 {
		n, err := readMessage(c, buf)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", req.Op, err)
		}
		var m proto.Message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			return nil, fmt.Errorf("%s: %w", req.Op, err)
		}
		if m.ID != req.ID {
			if ev != nil {
				ev(&m)
			}
			continue
		}
		if m.Status != 0 {
			return nil, &ndk.Error{Status: ndk.Status(m.Status), Op: req.Op, Detail: m.Msg}
		}
		return &m, nil
	}
	return nil, fmt.Errorf("%s: no answer", req.Op)
}

// readMessage reads one datagram, refusing one cut short by buf.
func readMessage(c *net.UnixConn, buf []byte) (int, error) {
	n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
	if err == nil && flags&unix.MSG_TRUNC != 0 {
		err = fmt.Errorf("message over %d bytes", len(buf))
	}
	return n, err
}
