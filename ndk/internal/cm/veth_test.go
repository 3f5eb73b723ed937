package cm_test

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// packetPort is a cm.Transport over an AF_PACKET socket on one end of a
// veth pair: real GSI frames through the kernel, with seeded loss,
// duplication and delay applied before transmission (the kernel here has
// no netem).
type packetPort struct {
	fd      int
	ifindex int
	framer  cm.GSIFramer
	mtu     int

	mu    sync.Mutex
	rng   *rand.Rand
	drop  float64
	dup   float64
	delay time.Duration
	sent  map[rocev2.AttributeID]int

	stop    chan struct{}
	wg      sync.WaitGroup
	pending sync.WaitGroup
}

func openPacketPort(t *testing.T, h *harness.Host, seed uint64, drop, dup float64, delay time.Duration) *packetPort {
	t.Helper()
	pp := &packetPort{ifindex: h.Ifindex, mtu: h.MTU, rng: rand.New(rand.NewPCG(seed, seed)), drop: drop, dup: dup, delay: delay,
		sent: map[rocev2.AttributeID]int{}, stop: make(chan struct{})}
	err := h.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: h.Ifindex}); err != nil {
			unix.Close(fd)
			return err
		}
		tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return err
		}
		pp.fd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("AF_PACKET socket in %s: %v", h.Name, err)
	}
	return pp
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (pp *packetPort) SendMAD(dst cm.PathInfo, mad *[rocev2.MADLen]byte) error {
	buf := make([]byte, cm.GSIFrameLen6)
	n, err := pp.framer.Build(buf, &dst, mad)
	if err != nil {
		return err
	}
	pp.mu.Lock()
	pp.sent[rocev2.AttributeID(uint16(mad[16])<<8|uint16(mad[17]))]++
	copies := 1
	if pp.rng.Float64() < pp.drop {
		copies = 0
	} else if pp.rng.Float64() < pp.dup {
		copies = 2
	}
	delays := make([]time.Duration, copies)
	for i := range delays {
		delays[i] = time.Duration(pp.rng.Int64N(int64(pp.delay) + 1))
	}
	pp.mu.Unlock()
	for _, d := range delays {
		pp.pending.Add(1)
		time.AfterFunc(d, func() {
			defer pp.pending.Done()
			_ = unix.Sendto(pp.fd, buf[:n], 0, &unix.SockaddrLinklayer{Ifindex: pp.ifindex})
		})
	}
	return nil
}

// serve hands received GSI frames to m until close.
func (pp *packetPort) serve(m *cm.Manager) {
	pp.wg.Add(1)
	go func() {
		defer pp.wg.Done()
		buf := make([]byte, 65536)
		var pkt rocev2.Packet
		for {
			select {
			case <-pp.stop:
				return
			default:
			}
			n, from, err := unix.Recvfrom(pp.fd, buf, 0)
			if err != nil {
				continue // timeout: look at stop again
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			reply, srcQP, mad, err := cm.ParseGSI(buf[:n], &pkt)
			if err != nil {
				continue // ARP, ICMP, neighbour discovery
			}
			reply.MTU = pp.mtu
			m.HandleMAD(reply, srcQP, mad)
		}
	}()
}

func (pp *packetPort) close() {
	close(pp.stop)
	pp.wg.Wait()
	pp.pending.Wait()
	unix.Close(pp.fd)
}

// TestVethFaults connects and disconnects over a real veth pair, with
// MADs dropped, duplicated and delayed, on the system clock and with
// timeouts shortened through Params; every connection forms exactly once.
func TestVethFaults(t *testing.T) {
	p := harness.New(t, harness.Config{StaticNeighbours: true})
	params := cm.DefaultParams()
	params.CMResponseTimeout = 14 // 64 ms
	params.PacketLifeTime = 10    // 4 ms: REQ timeout 72 ms
	params.TimeWait = time.Second
	pa := openPacketPort(t, p.A, 1, 0.25, 0.25, 15*time.Millisecond)
	pb := openPacketPort(t, p.B, 2, 0.25, 0.25, 15*time.Millisecond)
	var macA, macB rocev2.MAC
	copy(macA[:], p.A.MAC)
	copy(macB[:], p.B.MAC)
	a, err := cm.New(cm.Config{Transport: pa, CAGUID: rocev2.EUI64(macA), Params: params})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cm.New(cm.Config{Transport: pb, CAGUID: rocev2.EUI64(macB), Params: params})
	if err != nil {
		t.Fatal(err)
	}
	pa.serve(a)
	pb.serve(b)
	defer func() { a.Close(); b.Close(); pa.close(); pb.close() }()

	const n = 20
	addr := netip.AddrPortFrom(p.B.IPv4, 7174)
	var mu sync.Mutex
	events := 0
	var accepted, connected, disconnected, peerEvents counter
	l, _ := b.NewListener(func(c *cm.Connector) {
		mu.Lock()
		events++
		qpn := uint32(500 + events)
		mu.Unlock()
		if err := c.Accept(cmtest.NewQP(qpn, 0), cm.AcceptParams{InboundReadLimit: 1, OutboundReadLimit: 1}, peerEvents.inc, func(err error) {
			if err != nil {
				t.Errorf("accept: %v", err)
			}
			accepted.inc()
		}); err != nil {
			t.Errorf("accept: %v", err)
		}
	})
	if err := l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	path := cm.PathInfo{LocalIP: p.A.IPv4, RemoteIP: p.B.IPv4, LocalMAC: macA, RemoteMAC: macB, MTU: p.A.MTU}
	conns := make([]*cm.Connector, n)
	for i := range conns {
		c := a.NewConnector()
		conns[i] = c
		if err := c.Connect(cmtest.NewQP(uint32(i+1), rocev2.PSN(i)), path, netip.AddrPort{}, addr, cm.ConnectParams{InboundReadLimit: 1, OutboundReadLimit: 1}, func(err error) {
			if err == nil {
				err = c.CompleteConnect(nil)
			}
			if err != nil {
				t.Errorf("connect: %v", err)
			}
			connected.inc()
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: timed out", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("connect", func() bool { return connected.get() == n && accepted.get() == n })
	time.Sleep(200 * time.Millisecond) // late copies land
	mu.Lock()
	if events != n {
		t.Fatalf("%d connect events for %d connections", events, n)
	}
	mu.Unlock()
	for _, c := range conns {
		if err := c.Disconnect(func(err error) {
			if err != nil && !errors.Is(err, ndkpi.ErrIOTimeout) {
				t.Errorf("disconnect: %v", err)
			}
			disconnected.inc()
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("disconnect", func() bool { return disconnected.get() == n })
	waitFor("disconnect events", func() bool { return peerEvents.get() == n })
	if s := a.Stats(); s.Retransmits == 0 || b.Stats().Duplicates == 0 {
		t.Errorf("no retransmission or duplicate exercised: %+v / %+v", s, b.Stats())
	}
}
