package cm_test

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// repTap is a transport that passes MADs on and keeps the REPs.
type repTap struct {
	cm.Transport
	mu   sync.Mutex
	reps []rocev2.CMRep
}

func (r *repTap) SendMAD(dst cm.PathInfo, mad *[rocev2.MADLen]byte) error {
	if d, err := rocev2.DecodeMAD(mad[:]); err == nil {
		if rep, ok := d.Message.(*rocev2.CMRep); ok {
			r.mu.Lock()
			r.reps = append(r.reps, *rep)
			r.mu.Unlock()
		}
	}
	return r.Transport.SendMAD(dst, mad)
}

func (r *repTap) take() []rocev2.CMRep {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reps
	r.reps = nil
	return out
}

func rawREJ(rep rocev2.CMRep) []byte {
	rej := &rocev2.CMRej{LocalCommID: rep.RemoteCommID, RemoteCommID: rep.LocalCommID,
		MessageRejected: rocev2.CMKindREP, Reason: rocev2.RejConsumerDefined}
	mad := rocev2.NewCMMAD(uint64(rep.RemoteCommID)<<8|2, rej)
	b := make([]byte, rocev2.MADLen)
	if err := mad.Encode(b); err != nil {
		panic(err)
	}
	return b
}

// TestREJForEveryREPBoundsTimeWait: a peer sends REQs to a listener whose
// consumer accepts all of them, and answers every REP with a REJ. Each
// connection leaves the listen backlog for time-wait (16 s with the
// default path), so without a bound the peer holds every connection it
// made in the last 16 s: 160,000 at the 10,000 REQs a second the adapter
// lets one source send. With MaxTimeWait the manager holds at most that
// many in time-wait, evicting the oldest and counting it, and no timer of
// an evicted connection is left to keep it in memory. The control runs
// the same flood with a bound above it: every connection stays in
// time-wait, so the bound is what stops the growth.
func TestREJForEveryREPBoundsTimeWait(t *testing.T) {
	const backlog = 16
	for _, c := range []struct {
		name        string
		flood       int
		maxTimeWait int
		bounded     bool
	}{
		{"bounded", 3000, 64, true},
		{"default bound", 5000, 0, true},
		{"control: bound above the flood", 3000, 1 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := cmtest.NewClock()
			link := cmtest.NewLink(clk, cmtest.Faults{})
			tap := &repTap{Transport: link.B}
			params := cm.DefaultParams()
			params.ListenBacklog = backlog
			params.MaxTimeWait = c.maxTimeWait
			m, err := cm.New(cm.Config{Transport: tap, Clock: clk, CAGUID: link.B.GUID(), Params: params, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			bound := m.Params().MaxTimeWait
			if c.maxTimeWait == 0 && bound != 4096 {
				t.Fatalf("default MaxTimeWait %d, want 4096", bound)
			}
			addr := netip.AddrPortFrom(ipB, 8500)
			var qpn atomic.Uint32
			ls := listen(t, m, addr)
			ls.mu.Lock()
			ls.onConnect = func(c *cm.Connector) {
				_ = c.Accept(cmtest.NewQP(300000+qpn.Add(1), 0), cm.AcceptParams{}, nil, func(error) {})
			}
			ls.mu.Unlock()
			from := link.B.PathTo(ipB, ipA)
			src := netip.AddrPortFrom(ipA, 40000)
			flood := c.flood
			maxConns, maxTW, maxTimers := 0, 0, 0
			for i := range flood {
				m.HandleMAD(from, rocev2.GSIQP, rawREQ(0x0200_00ff_fe00_0077, uint32(0x6000_0000+i), uint32(0x400000+i), src, addr))
				for _, rep := range tap.take() {
					m.HandleMAD(from, rocev2.GSIQP, rawREJ(rep))
				}
				s := m.Stats()
				maxConns, maxTW, maxTimers = max(maxConns, s.Connections), max(maxTW, s.TimeWait), max(maxTimers, cm.Timers(m))
				if i%100 == 0 {
					clk.Advance(time.Millisecond) // far less than the time-wait: nothing ends on its own
				}
			}
			s := m.Stats()
			t.Logf("%d REQs, each REP answered with a REJ: at most %d connections, %d in time-wait, %d timers; %d evicted",
				flood, maxConns, maxTW, maxTimers, s.TimeWaitEvictions)
			if s.Received[rocev2.AttrREJ] < uint64(flood-backlog) {
				t.Fatalf("%d REJs handled for %d REQs: the flood did not run as meant", s.Received[rocev2.AttrREJ], flood)
			}
			if !c.bounded {
				if maxTW < flood-backlog || s.TimeWaitEvictions != 0 {
					t.Fatalf("without a binding bound: at most %d in time-wait, %d evicted; want the whole flood held", maxTW, s.TimeWaitEvictions)
				}
				return
			}
			if maxTW > bound || maxConns > bound+backlog+1 || maxTimers > maxConns {
				t.Fatalf("%d in time-wait, %d connections, %d timers held; bound %d, backlog %d", maxTW, maxConns, maxTimers, bound, backlog)
			}
			if want := uint64(max(0, flood-bound-backlog)); s.TimeWaitEvictions < want {
				t.Fatalf("%d evictions counted, want at least %d", s.TimeWaitEvictions, want)
			}
			// What is left ends with its time-wait.
			if !clk.RunUntil(func() bool { s := m.Stats(); return s.Connections == 0 && s.TimeWait == 0 }, time.Minute) {
				s := m.Stats()
				t.Fatalf("a minute after the flood: %d connections, %d in time-wait", s.Connections, s.TimeWait)
			}
			if n := cm.Timers(m); n != 0 {
				t.Fatalf("%d timers left with no connection", n)
			}
		})
	}
}
