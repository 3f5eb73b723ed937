package rdma

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestOpen_InfoFilled checks that an opened adapter reports every
// NDK_ADAPTER_INFO field with a real limit.
func TestOpen_InfoFilled(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, _ := newHosts(t, s)
		i := a.Adapter.Info()
		if i.RDMATechnology != ndk.RDMARoCEv2 {
			t.Errorf("RDMATechnology %v", i.RDMATechnology)
		}
		want := ndk.AdapterFlagInOrderDMASupported | ndk.AdapterFlagRDMAReadSinkNotRequired
		if i.AdapterFlags&want != want {
			t.Errorf("AdapterFlags %v lack %v", i.AdapterFlags, want)
		}
		for name, v := range map[string]uint64{
			"MaxRegistrationSize": i.MaxRegistrationSize, "MaxWindowSize": i.MaxWindowSize,
			"FRMRPageCount": uint64(i.FRMRPageCount), "MaxInitiatorRequestSGE": uint64(i.MaxInitiatorRequestSGE),
			"MaxReceiveRequestSGE": uint64(i.MaxReceiveRequestSGE), "MaxReadRequestSGE": uint64(i.MaxReadRequestSGE),
			"MaxTransferLength": uint64(i.MaxTransferLength), "MaxInlineDataSize": uint64(i.MaxInlineDataSize),
			"MaxInboundReadLimit": uint64(i.MaxInboundReadLimit), "MaxOutboundReadLimit": uint64(i.MaxOutboundReadLimit),
			"MaxReceiveQueueDepth": uint64(i.MaxReceiveQueueDepth), "MaxInitiatorQueueDepth": uint64(i.MaxInitiatorQueueDepth),
			"MaxCQDepth": uint64(i.MaxCQDepth), "LargeRequestThreshold": uint64(i.LargeRequestThreshold),
			"MaxCallerData": uint64(i.MaxCallerData), "MaxCalleeData": uint64(i.MaxCalleeData),
		} {
			// SRQ, windows and fast registration run in process only
			// (ndk's lam.go): a daemon-backed adapter reports 0 for them.
			if v == 0 && !(s.daemon && (name == "MaxWindowSize" || name == "FRMRPageCount")) {
				t.Errorf("%s is 0", name)
			}
		}
		if i.Version != (ndk.Version{Major: 2, Minor: 1}) {
			t.Errorf("version %v", i.Version)
		}
		// Limits are enforced: a QP over them is refused.
		c := defaultQP
		c.ReceiveCQ, c.InitiatorCQ, c.InlineDataSize = a.RCQ, a.ICQ, int(i.MaxInlineDataSize)+1
		if _, err := a.PD.CreateQP(c); !errors.Is(err, ndk.ErrInvalidParameter) {
			t.Errorf("inline size over the limit: %v", err)
		}
	})
}

// TestOpen_Options opens both ends with each XDP mode, polling mode and
// two queues, and runs traffic on QPs spread over the queues.
func TestOpen_Options(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		for _, c := range []struct {
			name string
			opts ndk.Options
		}{
			{"Generic", ndk.Options{XDPMode: ndk.XDPGeneric}},
			{"Driver", ndk.Options{XDPMode: ndk.XDPDriver}},
			{"BusyPoll", ndk.Options{Polling: ndk.PollBusy}},
			{"Progress", ndk.Options{Polling: ndk.PollProgress}},
			{"TwoQueues", ndk.Options{Queues: 2}},
			{"LockedThreads", ndk.Options{ThreadLocking: ndk.LockAlways}},
			{"UnlockedThreads", ndk.Options{ThreadLocking: ndk.LockNever}},
			{"PinnedEngines", ndk.Options{Queues: 2, EngineCPUs: testenv.AllowedCPUs(t)}},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := harness.New(t, harness.Config{Queues: max(c.opts.Queues, 1), StaticNeighbours: true})
				s.opts = c.opts
				a, b := openHost(t, p.A, s, nil), openHost(t, p.B, s, nil)
				if n := len(a.Adapter.Stats()); n != max(c.opts.Queues, 1) {
					t.Fatalf("%d engines", n)
				}
				// QPs are assigned round-robin in the same order on both
				// hosts, so each pair shares a queue number, and the veth
				// delivers on the queue the sender used.
				for i := 0; i < 4; i++ {
					qa, qb := a.pairWith(b, ndk.ConnectOptions{})
					if qa.Queue() != qb.Queue() {
						t.Fatalf("pair %d on queues %d/%d", i, qa.Queue(), qb.Queue())
					}
					src := a.region(5000, 0)
					fill(src.b, uint64(i))
					dst := b.region(5000, ndk.MRFlagAllowLocalWrite)
					must(t, qb.Receive(i, dst.sgl(0, 5000)))
					must(t, qa.Send(i, src.sgl(0, 5000), 0))
					expect(t, wait(t, b.RCQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpReceive, i)
					expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpSend, i)
					same(t, fmt.Sprintf("pair %d", i), dst.b, src.b)
				}
			})
		}
	})
}

// TestOpen_UnknownInterface: an adapter that is not there fails with
// STATUS_NDIS_ADAPTER_NOT_READY: in process an interface that does not
// exist, through a daemon a socket that no daemon serves.
func TestOpen_UnknownInterface(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		p := harness.New(t, harness.Config{})
		err := p.A.Do(func() error {
			var err error
			if s.daemon {
				_, err = ndk.Dial(context.Background(), "unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"))
			} else {
				_, err = ndk.Open("no-such-if0", ndk.Options{})
			}
			return err
		})
		if !errors.Is(err, ndk.ErrNDISAdapterNotReady) {
			t.Fatalf("open of a missing interface: %v", err)
		}
	})
}

// TestAllocBuffer sends from and receives into buffers of the adapter's
// UMEM pool.
func TestAllocBuffer(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src, err := a.Adapter.AllocBuffer(a.PD, 10000, 0)
		must(t, err)
		dst, err := b.Adapter.AllocBuffer(b.PD, 10000, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite)
		must(t, err)
		fill(src.Bytes(), 1)
		ss, _ := src.SGE(0, 10000)
		ds, _ := dst.SGE(0, 10000)
		must(t, qb.Receive(nil, []ndk.SGE{ds}))
		must(t, qa.Send(nil, []ndk.SGE{ss}, 0))
		wait(t, b.RCQ, 1, 5*time.Second)
		same(t, "buffer send", dst.Bytes(), src.Bytes())
		must(t, src.Free())
		must(t, dst.Free())
		if _, err := a.Adapter.AllocBuffer(a.PD, 64<<20, 0); !errors.Is(err, ndk.ErrInsufficientResources) {
			t.Fatalf("64 MiB from the 16 MiB pool: %v", err)
		}
		// Freed memory is reusable.
		again, err := a.Adapter.AllocBuffer(a.PD, 16<<20, 0)
		must(t, err)
		must(t, again.Free())
	})
}

// TestOpen_QueuesCrossed: every QP's frames arrive on a queue other than
// the one owning it (on a NIC the RSS hash decides; on veth the sender's
// queue), so the XDP program can only put them into the arrival queue's
// socket. That engine forwards them to the owner: SEND, WRITE and READ
// work both ways, and each adapter's engines count as many frames
// forwarded in as out.
func TestOpen_QueuesCrossed(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		p := harness.New(t, harness.Config{Queues: 2, StaticNeighbours: true})
		s.opts = ndk.Options{Queues: 2}
		a, b := openHost(t, p.A, s, nil), openHost(t, p.B, s, nil)
		b.qp("skew") // B's next QPs land one queue further than A's
		for i := 0; i < 4; i++ {
			qa, qb := a.pairWith(b, ndk.ConnectOptions{})
			if qa.Queue() == qb.Queue() {
				t.Fatalf("pair %d on the same queue %d", i, qa.Queue())
			}
			const n = 9000
			src := a.region(n, ndk.MRFlagAllowRemoteRead)
			fill(src.b, uint64(i))
			dst := b.region(n, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite)
			must(t, qb.Receive(i, dst.sgl(0, n)))
			must(t, qa.Send(i, src.sgl(0, n), 0))
			expect(t, wait(t, b.RCQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpReceive, i)
			expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpSend, i)
			same(t, fmt.Sprintf("send %d", i), dst.b, src.b)
			// B writes back into A's memory, then reads A's source.
			back := a.region(n, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite)
			must(t, qb.Write("w", dst.sgl(0, n), back.mr.Addr(), back.mr.RemoteToken(), 0))
			expect(t, wait(t, b.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpWrite, "w")
			a.settle()
			same(t, fmt.Sprintf("write %d", i), back.b, src.b)
			sink := b.region(n, ndk.MRFlagAllowLocalWrite)
			must(t, qb.Read("r", sink.sgl(0, n), src.mr.Addr(), src.mr.RemoteToken(), 0))
			expect(t, wait(t, b.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpRead, "r")
			same(t, fmt.Sprintf("read %d", i), sink.b, src.b)
		}
		for _, x := range []*host{a, b} {
			var out, in, drops uint64
			for _, st := range x.Adapter.Stats() {
				out, in, drops = out+st.ForwardedOut, in+st.ForwardedIn, drops+st.ForwardDrops
			}
			t.Logf("%s: %d frames forwarded between queues, %d dropped", x.Net.Name, out, drops)
			if out == 0 || in != out {
				t.Errorf("%s: %d frames forwarded out, %d in; want the same, more than 0", x.Net.Name, out, in)
			}
		}
	})
}
