package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/client"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// An operator's side of the admin requests (admin.go): the ndkxdp
// commands status, info, stats, qp and dump call these.

// SocketPath is where a daemon for ifname listens by default.
func SocketPath(ifname string) string { return "/run/ndkxdp/" + ifname + ".sock" }

// reports are the typed requests of the operator's reports.
var reports = map[string]proto.Call[proto.Report]{
	OpAdminStatus: &proto.AdminStatus{},
	OpAdminInfo:   &proto.AdminInfo{},
	OpAdminStats:  &proto.AdminStats{},
	OpAdminQPs:    &proto.AdminQPs{},
}

// Query asks the daemon at socket (a path or unix://path) for op, one of
// the OpAdmin* requests that answer with a report, and decodes the
// answer into out.
func Query(ctx context.Context, socket, op string, out any) error {
	req := reports[op]
	if req == nil {
		return fmt.Errorf("%q is not an operator's report (%s, %s, %s or %s)", op, OpAdminStatus, OpAdminInfo, OpAdminStats, OpAdminQPs)
	}
	c, err := adminDial(ctx, socket, func(*proto.Message) {})
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := adminCall(ctx, c, req)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(r.Raw, out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", op, err)
	}
	return nil
}

// Dump streams the daemon's live capture: each frame the daemon's
// engines move, received and sent, keeping the first snap bytes of each
// (0: DefaultSnap), to frame, with the capture's counts so far, until ctx
// ends (then it returns nil) or frame returns an error. frame runs on a
// goroutine of Dump's, one call at a time. It fails with
// STATUS_SHARING_VIOLATION while another capture runs.
func Dump(ctx context.Context, socket string, snap int, frame func(DumpFrame, DumpCounts) error) (DumpCounts, error) {
	// The frames events are handled on the connection's reader, one at a
	// time as they come: a slow frame holds the socket, and the daemon's
	// capture ring drops and counts what does not fit, never waits.
	var (
		mu    sync.Mutex
		last  DumpCounts
		ferr  error
		ended = make(chan struct{})
	)
	onEvent := func(m *proto.Message) {
		mu.Lock()
		defer mu.Unlock()
		if m.Ev != EvFrames || ferr != nil {
			return
		}
		if onFrames(m, &last, frame, &ferr); ferr != nil {
			close(ended)
		}
	}
	counts := func() (DumpCounts, error) {
		mu.Lock()
		defer mu.Unlock()
		return last, ferr
	}
	c, err := adminDial(ctx, socket, onEvent)
	if err != nil {
		return last, err
	}
	defer c.Close()
	if _, err := adminCall(ctx, c, &proto.AdminDump{Len: uint64(snap)}); err != nil {
		last, _ := counts()
		return last, err
	}
	select {
	case <-ctx.Done():
		last, _ := counts()
		return last, nil
	case <-ended:
		return counts()
	case <-c.Done():
		last, _ := counts()
		return last, fmt.Errorf("dump: %w", c.Err())
	}
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

func adminDial(ctx context.Context, socket string, onEvent func(*proto.Message)) (*client.Conn, error) {
	socket = strings.TrimPrefix(socket, "unix://")
	c, err := client.Dial(ctx, socket, onEvent)
	if err != nil {
		return nil, fmt.Errorf("no daemon answers at %s: %w", socket, err)
	}
	return c, nil
}

// adminCall sends an operator's request and waits for its answer, or for
// ctx to end (then the connection closes: an operator does not wait on a
// daemon that does not answer).
func adminCall[P any](ctx context.Context, c *client.Conn, req proto.Call[P]) (*P, error) {
	stop := context.AfterFunc(ctx, c.Close)
	defer stop()
	p, fds, err := client.Do(ctx, c, req)
	closeFDs(fds)
	if refused := (*client.Refused)(nil); errors.As(err, &refused) {
		return nil, &ndk.Error{Status: ndk.Status(refused.Reply.Status), Op: req.Op(), Detail: refused.Reply.Msg}
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("%s: %w", req.Op(), err)
	}
	return p, nil
}
