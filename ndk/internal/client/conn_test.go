package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// TestHangup: a connection the daemon hangs up ends at once, and its
// error says whether the daemon went away (nobody listens any more) or
// ended only this session (it still listens); calls then fail with it.
// Closing the connection oneself is no GoneError.
func TestHangup(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stillThere bool // the socket still listens
		answers    bool // and a daemon behind it answers
		want       string
	}{
		{"daemon gone", false, false, "went away (its socket hung up)"},
		{"session ended", true, true, "ended this client's session and serves on"},
		// A daemon being killed holds its listener a while after the
		// session's socket: connections queue there, unanswered.
		{"daemon dying", true, false, "went away (its socket hung up)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.sock")
			ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan *net.UnixConn, 1)
			go func() {
				c, err := ln.AcceptUnix()
				if err == nil {
					accepted <- c
				}
			}()
			c, err := Dial(context.Background(), path, func(*proto.Message) {})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sc := <-accepted
			if !tc.stillThere {
				ln.Close()
			} else if tc.answers {
				// A daemon that serves on answers the probe's request.
				go func() {
					p, err := ln.AcceptUnix()
					if err != nil {
						return
					}
					defer p.Close()
					buf := make([]byte, proto.MaxMessage)
					if n, err := p.Read(buf); err == nil && n > 0 {
						_, _ = p.Write([]byte(`{"id":1}`))
					}
				}()
			}
			start := time.Now()
			sc.Close()
			select {
			case <-c.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("the hangup was not seen within 2 s")
			}
			t.Logf("seen in %v", time.Since(start))
			var gone *GoneError
			if err := c.Err(); !errors.As(err, &gone) || !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "daemon "+path+" "+tc.want) {
				t.Errorf("Err = %v, want a GoneError naming %q", err, tc.want)
			}
			if _, _, err := c.Call(context.Background(), &proto.Request{Op: proto.OpHello}); !errors.As(err, &gone) {
				t.Errorf("a later call: %v, want the GoneError", err)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Dial(context.Background(), path, func(*proto.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	var gone *GoneError
	if err := c.Err(); errors.As(err, &gone) || !errors.Is(err, ErrClosed) {
		t.Errorf("Err after Close = %v, want ErrClosed", err)
	}
}
