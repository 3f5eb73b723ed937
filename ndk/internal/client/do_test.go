package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// fakeDaemon answers each request on one connection with answer(the
// request's bytes), and records what it read.
func fakeDaemon(t *testing.T, answer func(id uint64, req []byte) string) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	seen := make(chan string, 16)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, proto.MaxMessage)
		for {
			n, err := c.Read(buf)
			if err != nil || n == 0 {
				return
			}
			seen <- string(buf[:n])
			h, err := proto.DecodeHeader(buf[:n])
			if err != nil {
				return
			}
			if a := answer(h.ID, buf[:n]); a != "" {
				_, _ = c.Write([]byte(a))
			}
		}
	}()
	return path, seen
}

// TestDo: a typed request goes out as its envelope and fields, and the
// typed reply comes back; a refusal is a *Refused with the daemon's
// status and words.
func TestDo(t *testing.T) {
	path, seen := fakeDaemon(t, func(id uint64, req []byte) string {
		if strings.Contains(string(req), `"Depth":0`) || !strings.Contains(string(req), `"Depth"`) {
			return `{"id":` + itoa(id) + `,"status":3221225485,"msg":"CQ depth 0 outside [1, 4096]"}`
		}
		return `{"id":` + itoa(id) + `,"H":4,"Seg":{"size":8192,"slots":64}}`
	})
	c, err := Dial(context.Background(), path, func(*proto.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, fds, err := Do(context.Background(), c, &proto.CreateCQ{Depth: 64})
	if err != nil || len(fds) != 0 {
		t.Fatalf("Do: %v, %d descriptors", err, len(fds))
	}
	if r.H != 4 || r.Seg == nil || r.Seg.Size != 8192 || r.Seg.Slots != 64 {
		t.Errorf("reply %+v", r)
	}
	if got := <-seen; got != `{"id":1,"op":"create_cq","Depth":64}` {
		t.Errorf("sent %s", got)
	}
	_, _, err = Do(context.Background(), c, &proto.CreateCQ{})
	var refused *Refused
	if !errors.As(err, &refused) || refused.Reply.Status != 0xC000000D || !strings.Contains(err.Error(), "CQ depth 0 outside") {
		t.Errorf("refusal: %v", err)
	}
}

// TestDoDeadline: a request that may block carries its context's
// deadline; one that does not, none, and its answer is awaited past a
// cancel (the daemon answers every request).
func TestDoDeadline(t *testing.T) {
	path, seen := fakeDaemon(t, func(id uint64, req []byte) string {
		if strings.Contains(string(req), `"op":"cancel"`) {
			return ""
		}
		return `{"id":` + itoa(id) + `}`
	})
	c, err := Dial(context.Background(), path, func(*proto.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := Do(ctx, c, &proto.Disconnect{H: 3}); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; !strings.HasPrefix(got, `{"id":1,"op":"disconnect","h":3,"Timeout":`) {
		t.Errorf("blocking request sent as %s: no deadline", got)
	}
	if _, _, err := Do(ctx, c, &proto.CloseCQ{H: 3}); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != `{"id":2,"op":"close_cq","h":3}` {
		t.Errorf("sent %s", got)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
