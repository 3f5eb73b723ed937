package demo

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestDemoSendKeepsReceivesAhead runs the demo's SEND phase against a
// receiver that keeps falling behind: the sender waits for posted
// receives instead of overrunning them, so B never answers RNR and no
// SEND waits out the RNR timer.
func TestDemoSendKeepsReceivesAhead(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{})
	a, b := testHost(t, p.A), testHost(t, p.B)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := ListenCM(ctx, b, netip.AddrPortFrom(p.B.IPv4, Port))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.l.Close()
	cn, err := ConnectCM(ctx, a, b, srv)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.close()
	s := newSendStream(a, b, cn.qa, cn.qb, 8000, 64)
	s.pause = 500 * time.Microsecond
	r, err := s.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var st ndk.EngineStats
	for _, e := range a.Adapter.Stats() {
		st.Add(e)
	}
	if st.RNRReceived != 0 || st.Retransmits != 0 {
		t.Errorf("SEND phase with a slow receiver: %d RNR NAKs, %d retransmission rounds; want none", st.RNRReceived, st.Retransmits)
	}
	t.Logf("%s (A: %d RNR NAKs)", r.line("SEND", 64), st.RNRReceived)
}

// testHost opens the demo's host on h, closed when the test ends.
func testHost(t *testing.T, h *harness.Host) *Host {
	t.Helper()
	a, err := OpenAdapterOn(h, ndk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	x, err := NewHost(h.Name, a)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestReportNamesRecoveries: a phase with RNR NAKs or retransmissions
// gets them named beside its figures; a clean phase gets no note.
func TestReportNamesRecoveries(t *testing.T) {
	if n := (transportCounts{sleeps: 5}).note(); n != "" {
		t.Errorf("clean phase noted %q", n)
	}
	if n := (transportCounts{sleeps: 5, slowYields: 2}).waitsNote(); !strings.Contains(n, "slept 5 times") || !strings.Contains(n, "lost 2 time slices") {
		t.Errorf("waits noted as %q", n)
	}
	before := transportCounts{rnr: 3, retransmits: 1}
	n := transportCounts{rnr: 16, retransmits: 3, timeouts: 1}.since(before).note()
	for _, want := range []string{"13 RNR NAKs", "2 retransmission rounds", "1 ACK timeouts", "during this phase"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
}
