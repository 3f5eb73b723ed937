package ndk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// TestDialVersionMismatch: a client and a daemon of different protocol
// versions fail Dial with STATUS_NDIS_BAD_VERSION and one error naming
// both versions, whether the daemon refuses the hello or answers it with
// its own version.
func TestDialVersionMismatch(t *testing.T) {
	const other = proto.Version + 1
	for _, tc := range []struct {
		name   string
		answer func(req *proto.Request) *proto.Message
	}{
		{"daemon refuses", func(req *proto.Request) *proto.Message {
			return &proto.Message{ID: req.ID, Status: uint32(StatusNDISBadVersion), Msg: proto.VersionMismatch(req.Version, other)}
		}},
		{"daemon answers with its version", func(req *proto.Request) *proto.Message {
			return &proto.Message{ID: req.ID, Version: other}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeDaemon(t, tc.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a, err := Dial(ctx, sock)
			if err == nil {
				a.Close()
				t.Fatal("Dial succeeded against a daemon of another protocol version")
			}
			want := fmt.Sprintf("client speaks protocol version %d, daemon %d", proto.Version, other)
			if !errors.Is(err, ErrNDISBadVersion) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), sock) {
				t.Fatalf("Dial: %v; want STATUS_NDIS_BAD_VERSION naming %q and the socket", err, want)
			}
		})
	}
}

// fakeDaemon listens on a socket of its own and answers the first request
// of one client with answer.
func fakeDaemon(t *testing.T, answer func(*proto.Request) *proto.Message) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, proto.MaxMessage)
		n, fds, err := shm.RecvFDs(c, buf, shm.MaxFDs)
		closeFDs(fds)
		if err != nil {
			return
		}
		req, err := proto.Decode(buf[:n])
		if err != nil {
			return
		}
		b, _ := json.Marshal(answer(req))
		_ = shm.SendFDs(c, b)
		// Hold the connection until the client hangs up.
		_, _, _ = shm.RecvFDs(c, buf, shm.MaxFDs)
	}()
	return sock
}
