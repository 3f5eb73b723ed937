package ndkhost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// DefaultCQDepth is the depth of both CQs when Config.CQDepth is 0.
const DefaultCQDepth = 8192

// Config says how to open a host.
type Config struct {
	// Options are the adapter's (XDP mode, polling, capture, ...); in
	// daemon mode, those of the adapter the daemon serves.
	Options ndk.Options
	// Daemon serves the adapter through ndkxdp's daemon (ndk/daemon) on a
	// unix socket in a temporary directory, and makes Host.Adapter a
	// client of it (ndk.Dial); otherwise Host.Adapter is the in-process
	// adapter itself.
	Daemon bool
	// CQDepth is the depth of the receive and the initiator CQ; 0 means
	// DefaultCQDepth.
	CQDepth int
	// ReceiveNotify, if set, is the receive CQ's notification callback
	// (see ndk.Adapter.CreateCQ); the initiator CQ has none.
	ReceiveNotify func(ndk.Status)
}

// Host is ndkxdp on one end of a veth pair.
type Host struct {
	Net     *vethpair.Host // the namespace and veth end the adapter runs on
	Adapter *ndk.Adapter   // the adapter the host's objects live on
	// Served is the adapter opened on the veth end, which runs the
	// engines and the CM: Adapter itself in process, the daemon's in
	// daemon mode. Test hooks (testhooks.SetMADFaults) act on it.
	Served *ndk.Adapter
	PD     *ndk.PD
	RCQ    *ndk.CQ // receive CQ
	ICQ    *ndk.CQ // initiator CQ

	cfg Config
	// In daemon mode: the server, its socket's directory and the end of
	// Serve.
	srv       *daemon.Server
	sockDir   string
	served    chan error
	closeOnce sync.Once
}

// Open opens the adapter on h's veth end from inside h's namespace (and in
// daemon mode serves it and dials it), then creates the PD and both CQs.
// On an error it closes what it opened.
func Open(h *vethpair.Host, cfg Config) (*Host, error) {
	if cfg.CQDepth == 0 {
		cfg.CQDepth = DefaultCQDepth
	}
	x := &Host{Net: h, cfg: cfg}
	if err := h.Do(func() error {
		var err error
		x.Served, err = ndk.Open(h.Link, cfg.Options)
		return err
	}); err != nil {
		return nil, fmt.Errorf("open ndkxdp on %s/%s: %w", h.Name, h.Link, err)
	}
	x.Adapter = x.Served
	if cfg.Daemon {
		if err := x.serve(); err != nil {
			x.Close()
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	var err error
	if x.PD, err = x.Adapter.CreatePD(); err != nil {
		x.Close()
		return nil, fmt.Errorf("%s: create PD: %w", h.Name, err)
	}
	if err := x.NewCQs(); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}

// serve starts a daemon on x.Served and makes x.Adapter its client.
func (x *Host) serve() error {
	var err error
	if x.sockDir, err = os.MkdirTemp("", "ndkhost-"+x.Net.Name+"-"); err != nil {
		return fmt.Errorf("daemon socket directory: %w", err)
	}
	sock := filepath.Join(x.sockDir, "ndkxdp.sock")
	ln, err := daemon.Listen(sock, 0o600, -1)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	x.srv = daemon.New(x.Served, daemon.Config{})
	x.served = make(chan error, 1)
	go func() { x.served <- x.srv.Serve(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := ndk.Dial(ctx, "unix://"+sock)
	if err != nil {
		return fmt.Errorf("dial the daemon: %w", err)
	}
	x.Adapter = a
	return nil
}

// NewCQs replaces RCQ and ICQ with fresh ones of the configured depth and
// closes the previous ones, whose QPs the caller has closed by then. A
// caller that runs phases one after the other uses it so that no phase
// sees another's completions, such as the cancelled receives of a closed
// QP.
func (x *Host) NewCQs() error {
	for _, c := range []*ndk.CQ{x.RCQ, x.ICQ} {
		if c != nil {
			c.Close()
		}
	}
	x.RCQ, x.ICQ = nil, nil
	var err error
	if x.RCQ, err = x.Adapter.CreateCQ(x.cfg.CQDepth, x.cfg.ReceiveNotify); err != nil {
		return fmt.Errorf("%s: create receive CQ: %w", x.Net.Name, err)
	}
	if x.ICQ, err = x.Adapter.CreateCQ(x.cfg.CQDepth, nil); err != nil {
		return fmt.Errorf("%s: create initiator CQ: %w", x.Net.Name, err)
	}
	return nil
}

// Close closes the adapter and with it the PD, the CQs and every object
// created on them; in daemon mode the client first, then the daemon, then
// the adapter it served. A second Close does nothing.
func (x *Host) Close() {
	x.closeOnce.Do(func() {
		if x.Adapter != x.Served && x.Adapter != nil {
			x.Adapter.Close()
		}
		if x.srv != nil {
			x.srv.Close()
			<-x.served
		}
		x.Served.Close()
		if x.sockDir != "" {
			os.RemoveAll(x.sockDir)
		}
	})
}
