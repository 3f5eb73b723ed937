// Package ops_test runs the operator's commands (ndkxdp status, info,
// stats, qp, dump) and the daemon's Prometheus endpoint against a real
// `ndkxdp daemon` on one end of a veth pair, with a client QP connected to
// an in-process adapter on the other end, and checks what they print
// against the engines' own counts and against a capture of the frames.
package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/daemonproc"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// binary is the ndkxdp command, built once for the package's tests.
func binary(t *testing.T) string { return testenv.Ndkxdp(t) }

// syncBuffer is daemonproc.SyncBuffer with Bytes: a capture or a
// command's output read while another goroutine writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func (s *syncBuffer) String() string { return string(s.Bytes()) }

// bed is a daemon process on A serving sock, a client of it in this
// process with one QP connected to a QP of an in-process host on B, whose
// adapter records every frame it moves (capture).
type bed struct {
	pair    *harness.Pair
	sock    string
	logs    *daemonproc.SyncBuffer // the daemon's
	pid     int                    // the daemon's
	b       *ndkhost.Host
	capture *syncBuffer
	a       *ndk.Adapter // the client's, from ndk.Dial
	pd      *ndk.PD
	icq     *ndk.CQ
	qp      *ndk.QP
	mem     []byte
	mr      *ndk.MR
	peer    *ndk.QP
	pmem    []byte
	pmr     *ndk.MR
}

func newBed(t *testing.T, daemonArgs ...string) *bed {
	t.Helper()
	bd := &bed{pair: harness.New(t, harness.Config{}), capture: &syncBuffer{}}
	p := bd.pair
	var err error
	if bd.b, err = ndkhost.Open(p.B, ndkhost.Config{Options: ndk.Options{Capture: bd.capture}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bd.b.Close)
	bd.sock = filepath.Join(t.TempDir(), "d.sock")
	d := daemonproc.StartDaemon(t, p.A, bd.sock, daemonproc.PinRoot(t), daemonArgs...)
	bd.logs, bd.pid = d.Logs, d.Cmd.Process.Pid
	bd.a = d.Dial(t)
	t.Cleanup(bd.a.Close)
	bd.connect(t)
	return bd
}

func (bd *bed) connect(t *testing.T) {
	t.Helper()
	a, b := bd.a, bd.b
	var err error
	if bd.pd, err = a.CreatePD(); err != nil {
		t.Fatal(err)
	}
	rcq, err := a.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bd.icq, err = a.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if bd.qp, err = bd.pd.CreateQP(ndk.QPConfig{ReceiveCQ: rcq, InitiatorCQ: bd.icq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}); err != nil {
		t.Fatal(err)
	}
	if bd.mem, err = a.Memory(1 << 16); err != nil {
		t.Fatal(err)
	}
	if bd.mr, err = bd.pd.RegisterMR(bd.mem, ndk.MRFlagAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	bd.pmem = make([]byte, 1<<16)
	if bd.pmr, err = b.PD.RegisterMR(bd.pmem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if bd.peer, err = b.PD.CreateQP(ndk.QPConfig{ReceiveCQ: b.RCQ, InitiatorCQ: b.ICQ, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16}); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	l, err := b.Adapter.CreateListener(func(x *ndk.Connector) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		accepted <- x.Accept(ctx, bd.peer, 4, 4, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dst := netip.AddrPortFrom(bd.pair.B.IPv4, 7301)
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	x, err := a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.Connect(ctx, bd.qp, netip.AddrPort{}, dst, 4, 4, nil); err != nil {
		t.Fatalf("connect through the daemon: %v", err)
	}
	if err := x.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
}

// writes WRITEs 4 KiB to the peer n times, one at a time.
func (bd *bed) writes(t testing.TB, n int) {
	for i := range n {
		s, _ := bd.mr.SGE(0, 4096)
		if err := bd.qp.Write(nil, []ndk.SGE{s}, bd.pmr.Addr(), bd.pmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		var r [1]ndk.ResultEx
		deadline := time.Now().Add(5 * time.Second)
		for bd.icq.GetResultsEx(r[:]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("write %d: no completion in 5 s", i)
			}
			time.Sleep(20 * time.Microsecond)
		}
		if r[0].Status != ndk.StatusSuccess {
			t.Fatalf("write %d: %v", i, r[0].Status)
		}
	}
}

// packetsPerWrite is how many packets one 4 KiB WRITE takes.
func (bd *bed) packetsPerWrite() uint64 { return uint64((4096 + bd.a.PathMTU() - 1) / bd.a.PathMTU()) }

// run runs `ndkxdp args...` and returns its standard output.
func run(t *testing.T, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ndkxdp %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// runJSON runs a listing with -j and decodes it into out.
func runJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	b := run(t, append(args, "-j")...)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("ndkxdp %s -j: %v\n%s", strings.Join(args, " "), err, b)
	}
}

// quiet waits until neither end's engines have moved a frame for a
// while (delayed ACKs, CM retransmissions), bounded.
func (bd *bed) quiet(t *testing.T) {
	t.Helper()
	var last [2]uint64
	for range 50 {
		time.Sleep(50 * time.Millisecond)
		var now [2]uint64
		for _, e := range bd.b.Adapter.Stats() {
			now[0] += e.FramesIn
			now[1] += e.FramesOut
		}
		if now == last {
			return
		}
		last = now
	}
	t.Fatal("traffic did not settle in 2.5 s")
}

// captured counts the frames in B's capture sent by A's interface and by
// B's.
func (bd *bed) captured(t *testing.T) (fromA, fromB uint64) {
	t.Helper()
	f, err := pcapfile.Decode(bd.capture.Bytes())
	if err != nil {
		t.Fatalf("B's capture: %v", err)
	}
	for _, p := range f.Packets {
		switch {
		case bytes.Equal(p.Data[6:12], bd.pair.A.MAC):
			fromA++
		case bytes.Equal(p.Data[6:12], bd.pair.B.MAC):
			fromB++
		default:
			t.Fatalf("captured frame from %x, neither A nor B", p.Data[6:12])
		}
	}
	return fromA, fromB
}
