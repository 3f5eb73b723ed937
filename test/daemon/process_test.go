package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/daemonproc"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// binary is the command under test.
func binary(t *testing.T) string { return testenv.Ndkxdp(t) }

func startDaemon(t *testing.T, p *harness.Pair, sock, pinRoot string, extra ...string) *daemonproc.Daemon {
	return daemonproc.StartDaemon(t, p.A, sock, pinRoot, extra...)
}

func dialWhenUp(t *testing.T, d *daemonproc.Daemon, _ string) *ndk.Adapter { return d.Dial(t) }

func pinRoot(t *testing.T) string { return daemonproc.PinRoot(t) }

// pinDir is where a daemon on h's interface pins under root: the path
// names h's network namespace.
func pinDir(t *testing.T, h *harness.Host, root string) string {
	t.Helper()
	var dir string
	if err := h.Do(func() error { dir = loader.PinDir(h.Link, loader.Options{PinRoot: root}); return nil }); err != nil {
		t.Fatal(err)
	}
	return dir
}

// clientOf builds a client's objects on an adapter from Dial.
// fataler is what clientOf needs of a testing.T, so that a child process
// can use it too.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

func clientOf(t fataler, a *ndk.Adapter) *client { return clientNotified(t, a, nil) }

// clientNotified is clientOf whose CQs call notify when armed.
func clientNotified(t fataler, a *ndk.Adapter, notify func(ndk.Status)) *client {
	t.Helper()
	c := &client{a: a}
	var err error
	if c.pd, err = a.CreatePD(); err != nil {
		t.Fatal(err)
	}
	if c.rcq, err = a.CreateCQ(256, notify); err != nil {
		t.Fatal(err)
	}
	if c.icq, err = a.CreateCQ(256, notify); err != nil {
		t.Fatal(err)
	}
	if c.qp, err = c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 64, InitiatorQueueDepth: 64,
		MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2, InlineDataSize: 64}); err != nil {
		t.Fatal(err)
	}
	if c.mem, err = a.Memory(1 << 16); err != nil {
		t.Fatal(err)
	}
	if c.mr, err = c.pd.RegisterMR(c.mem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteRead|ndk.MRFlagAllowRemoteWrite); err != nil {
		t.Fatal(err)
	}
	return c
}

// writeOnce WRITEs 4 KiB of pattern to the peer and checks it landed.
func writeOnce(t *testing.T, c *client, pr *peer, seed byte) {
	t.Helper()
	pr.settle() // the last check's reads, before B's engine writes again
	for j := range 4096 {
		c.mem[j] = seed + byte(j)
	}
	s, _ := c.mr.SGE(0, 4096)
	if err := c.qp.Write("w", []ndk.SGE{s}, pr.mr.Addr(), pr.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c.icq, "write"); r.Status != ndk.StatusSuccess {
		t.Fatalf("write: %v", r.Status)
	}
	pr.settle()
	if !bytes.Equal(pr.mem[:4096], c.mem[:4096]) {
		t.Fatal("peer memory differs after the WRITE")
	}
}

func xdpAttached(t *testing.T, h *harness.Host) bool {
	t.Helper()
	var attached bool
	if err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Link)
		if err != nil {
			return err
		}
		attached = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return attached
}

// TestDaemonLifecycle runs the real command: it serves, survives SIGKILL
// through its pinned attachment (the next start takes it over), and on
// SIGTERM disconnects every connection (the peer gets a DREQ), detaches,
// unpins and removes its socket.
func TestDaemonLifecycle(t *testing.T) {
	p := harness.New(t, harness.Config{})
	b, err := ndkhost.Open(p.B, ndkhost.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bd := &bed{pair: p, b: b}
	sock := filepath.Join(t.TempDir(), "d.sock")
	root := pinRoot(t)

	d := startDaemon(t, p, sock, root, "-log-format", "json")
	a := dialWhenUp(t, d, sock)
	c := clientOf(t, a)
	pr := bd.connect(t, c, 7101)
	writeOnce(t, c, pr, 1)
	if _, err := os.Stat(filepath.Join(pinDir(t, p.A, root), "link")); err != nil {
		t.Fatalf("daemon did not pin its attachment: %v", err)
	}
	a.Close()

	// SIGKILL: nothing runs; the pinned attachment stays.
	_ = d.Cmd.Process.Signal(syscall.SIGKILL)
	<-d.Done
	if !xdpAttached(t, p.A) {
		t.Fatal("a killed daemon's attachment is gone")
	}
	d2 := startDaemon(t, p, sock, root)
	a2 := dialWhenUp(t, d2, sock)
	c2 := clientOf(t, a2)
	pr2 := bd.connect(t, c2, 7102)
	writeOnce(t, c2, pr2, 2)

	// The peer's connector learns of the SIGTERM through a DREQ.
	disc := make(chan struct{})
	var once sync.Once
	l, err := b.Adapter.CreateListener(func(x *ndk.Connector) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q, _ := b.PD.CreateQP(ndk.QPConfig{ReceiveCQ: b.RCQ, InitiatorCQ: b.ICQ, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
		_ = x.Accept(ctx, q, 1, 1, nil, func() { once.Do(func() { close(disc) }) })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dst := netip.AddrPortFrom(p.B.IPv4, 7103)
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	x, err := a2.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	qp3, err := c2.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c2.rcq, InitiatorCQ: c2.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.Connect(ctx, qp3, netip.AddrPort{}, dst, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := x.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_ = d2.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d2.Done:
		if err != nil {
			t.Fatalf("daemon exited with %v on SIGTERM:\n%s", err, d2.Logs)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("daemon still running 15 s after SIGTERM:\n%s", d2.Logs)
	}
	t.Logf("SIGTERM to exit: %v", time.Since(start))
	select {
	case <-disc:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer saw no disconnect after the daemon's SIGTERM")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after SIGTERM: %v", err)
	}
	if _, err := os.Stat(pinDir(t, p.A, root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins left after SIGTERM: %v", err)
	}
	if xdpAttached(t, p.A) {
		t.Error("program still attached after SIGTERM")
	}
	a2.Close()
}

// TestDaemonRefusesTakenInterface: another program attached is refused
// with a message that names it.
func TestDaemonRefusesTakenInterface(t *testing.T) {
	p := harness.New(t, harness.Config{})
	var other *loader.XDP
	if err := p.A.Do(func() error {
		var err error
		other, err = loader.Attach(p.A.Link, loader.Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	d := startDaemon(t, p, filepath.Join(t.TempDir(), "d.sock"), pinRoot(t))
	select {
	case err := <-d.Done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("daemon on a taken interface: %v, want exit 1", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("daemon started on an interface with another program attached")
	}
	out := d.Logs.String()
	if !strings.Contains(out, "already has an XDP program") || !strings.Contains(out, "name ") {
		t.Fatalf("refusal does not name the attached program:\n%s", out)
	}
	if !strings.Contains(out, "-daemon SOCKET") || strings.Contains(out, "OpenPinned") {
		t.Errorf("refusal does not point an operator at -daemon (or names a Go API):\n%s", out)
	}
}

// TestClientKilledMidWrite: a client process killed with SIGKILL in the
// middle of a WRITE stream costs only its own objects. The peer gets a
// DREQ, the daemon drops the session and returns to its goroutine count,
// and another client's transfer goes on.
func TestClientKilledMidWrite(t *testing.T) {
	bd := newBed(t)
	other := dial(t, bd.sock)
	po := bd.connect(t, other, 7201)
	writeOnce(t, other, po, 3)
	time.Sleep(100 * time.Millisecond)
	baseline := runtime.NumGoroutine()

	// The victim's peer on B, which the child connects to.
	b := bd.b
	disc := make(chan struct{})
	var once sync.Once
	pmem := make([]byte, 1<<16)
	pmr, err := b.PD.RegisterMR(pmem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Adapter.CreateListener(func(x *ndk.Connector) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q, _ := b.PD.CreateQP(ndk.QPConfig{ReceiveCQ: b.RCQ, InitiatorCQ: b.ICQ, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
		_ = x.Accept(ctx, q, 4, 4, nil, func() { once.Do(func() { close(disc) }) })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dst := netip.AddrPortFrom(bd.pair.B.IPv4, 7202)
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), "NDKXDP_WRITER_CHILD="+strings.Join([]string{bd.sock, dst.String(),
		fmt.Sprint(pmr.Addr()), fmt.Sprint(pmr.RemoteToken())}, ","))
	stdout, _ := child.StdoutPipe()
	var stderr daemonproc.SyncBuffer
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	sc := bufio.NewScanner(stdout)
	got := make(chan bool, 1)
	go func() {
		for sc.Scan() {
			if sc.Text() == "writing" {
				got <- true
				io.Copy(io.Discard, stdout)
				return
			}
		}
		got <- false
	}()
	select {
	case ok := <-got:
		if !ok {
			t.Fatalf("writer child ended before writing:\n%s", stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("writer child not writing after 15 s:\n%s", stderr.String())
	}
	if bd.srv.Clients() != 2 {
		t.Fatalf("daemon counts %d clients, want 2", bd.srv.Clients())
	}
	time.Sleep(50 * time.Millisecond)
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()

	select {
	case <-disc:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed client's peer saw no disconnect")
	}
	// The other client goes on.
	for i := range 20 {
		writeOnce(t, other, po, byte(10+i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for bd.srv.Clients() != 1 || runtime.NumGoroutine() > baseline+2 {
		if time.Now().After(deadline) {
			t.Fatalf("after the kill: %d clients (want 1), %d goroutines (baseline %d)", bd.srv.Clients(), runtime.NumGoroutine(), baseline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writerChild is the process TestClientKilledMidWrite kills: it connects
// through the daemon and WRITEs until killed (at most 60 s).
func writerChild(env string) {
	t := &childT{}
	f := strings.Split(env, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := ndk.Dial(ctx, f[0])
	if err != nil {
		t.Fatal(err)
	}
	c := clientOf(t, a)
	connectTo(ctx, t, c, netip.MustParseAddrPort(f[1]))
	var va uint64
	var token uint32
	fmt.Sscan(f[2], &va)
	fmt.Sscan(f[3], &token)
	s, _ := c.mr.SGE(0, 1<<16)
	said := false
	var r [16]ndk.Result
	for ctx.Err() == nil {
		if err := c.qp.Write(nil, []ndk.SGE{s}, va, token, 0); err != nil && !errors.Is(err, ndk.ErrInsufficientResources) {
			t.Fatal(err)
		}
		if c.icq.GetResults(r[:]) > 0 && !said {
			fmt.Println("writing")
			said = true
		}
	}
}

// connectTo connects c's QP to the listener at dst over the CM.
func connectTo(ctx context.Context, t fataler, c *client, dst netip.AddrPort) *ndk.Connector {
	t.Helper()
	x, err := c.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Connect(ctx, c.qp, netip.AddrPort{}, dst, 4, 4, nil); err != nil {
		t.Fatal(err)
	}
	if err := x.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	return x
}

// childT stands in for testing.T in a child process: a failure exits 1.
type childT struct{}

func (childT) Helper() {}
func (childT) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}
func (childT) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func TestMain(m *testing.M) {
	if env := os.Getenv("NDKXDP_WRITER_CHILD"); env != "" {
		writerChild(env)
		os.Exit(0)
	}
	if env := os.Getenv("NDKXDP_SENDER_CHILD"); env != "" {
		senderChild(env)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDaemonBindModes: -zero-copy required is refused on veth, which has
// no AF_XDP zero-copy, with the reason; copy mode with busy polling
// serves.
func TestDaemonBindModes(t *testing.T) {
	p := harness.New(t, harness.Config{})
	d := startDaemon(t, p, filepath.Join(t.TempDir(), "zc.sock"), pinRoot(t), "-zero-copy", "required")
	select {
	case err := <-d.Done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("-zero-copy required on veth: %v, want exit 1\n%s", err, d.Logs)
		}
		if out := d.Logs.String(); !strings.Contains(strings.ToLower(out), "zero") {
			t.Fatalf("refusal does not say zero-copy:\n%s", out)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("-zero-copy required started on veth")
	}
	sock := filepath.Join(t.TempDir(), "copy.sock")
	d2 := startDaemon(t, p, sock, pinRoot(t), "-zero-copy", "off", "-busy-poll", "50us")
	a := dialWhenUp(t, d2, sock)
	a.Close()
	_ = d2.Cmd.Process.Signal(syscall.SIGTERM)
	if err := <-d2.Done; err != nil {
		t.Fatalf("copy-mode daemon: %v\n%s", err, d2.Logs)
	}
}
