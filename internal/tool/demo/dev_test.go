package demo

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestDemoDaemonOfAnotherInterface: demo -dev A -daemon SOCK whose daemon
// serves another interface is a bad command line naming both.
func TestDemoDaemonOfAnotherInterface(t *testing.T) {
	p := harness.New(t, harness.Config{})
	var a *ndk.Adapter
	if err := p.A.Do(func() (err error) { a, err = ndk.Open(p.A.Link, ndk.Options{}); return err }); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := daemon.Listen(sock, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	srv := daemon.New(a, daemon.Config{Interface: p.A.Link})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := daemonServes(ctx, sock, p.A.Link); err != nil {
		t.Errorf("the daemon's own interface: %v", err)
	}
	var ue *cmdline.UsageError
	err = daemonServes(ctx, sock, "eth7")
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "that daemon serves "+p.A.Link) {
		t.Errorf("-dev eth7 with %s's daemon: %v", p.A.Link, err)
	}
}
