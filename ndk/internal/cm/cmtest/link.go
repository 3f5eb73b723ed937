package cmtest

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Faults describes what the link does to frames. Probabilities apply to
// each frame independently, from a generator seeded with Seed.
type Faults struct {
	Drop      float64
	Duplicate float64
	// Delay is added to every copy; Jitter adds up to that much more at
	// random, which reorders frames.
	Delay, Jitter time.Duration
	Seed          uint64
	// DropIf, when set, is asked first for every frame: from is "A" or
	// "B", attr the MAD's attribute, n how many MADs of that attribute the
	// port sent before this one.
	DropIf func(from string, attr rocev2.AttributeID, n int) bool
}

// Link joins two ports, A and B. Frames travel as clock timers: with a
// fake Clock they arrive when the test steps it, with cm.SystemClock on
// timer goroutines.
type Link struct {
	Clock cm.Clock
	A, B  *Port

	mu     sync.Mutex
	faults Faults
	rng    *rand.Rand
}

// NewLink returns a link whose ports have distinct MACs and MTU 1500.
func NewLink(clk cm.Clock, f Faults) *Link {
	l := &Link{Clock: clk, faults: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed+1))}
	l.A = &Port{link: l, name: "A", MAC: rocev2.MAC{0x02, 0, 0, 0, 0, 0x0a}, MTU: 1500}
	l.B = &Port{link: l, name: "B", MAC: rocev2.MAC{0x02, 0, 0, 0, 0, 0x0b}, MTU: 1500}
	l.A.peer, l.B.peer = l.B, l.A
	return l
}

// SetFaults changes the fault model from now on.
func (l *Link) SetFaults(f Faults) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = f
	l.rng = rand.New(rand.NewPCG(f.Seed, f.Seed+1))
}

// Port is one end of a link: a cm.Transport that frames MADs with a
// cm.GSIFramer and delivers them, parsed back with cm.ParseGSI, to the
// other end's Manager.
type Port struct {
	MAC rocev2.MAC
	MTU int

	link   *Link
	name   string
	peer   *Port
	framer cm.GSIFramer

	mu     sync.Mutex
	mgr    *cm.Manager
	sent   map[rocev2.AttributeID]int
	frames [][]byte
	bad    int
}

// Attach sets the Manager that receives this port's frames.
func (p *Port) Attach(m *cm.Manager) {
	p.mu.Lock()
	p.mgr = m
	p.mu.Unlock()
}

// GUID returns the CA GUID a Linux RoCE driver derives from the port's MAC.
func (p *Port) GUID() uint64 { return rocev2.EUI64(p.MAC) }

// PathTo returns the path from this port's address local to the peer
// port's address remote.
func (p *Port) PathTo(local, remote netip.Addr) cm.PathInfo {
	return cm.PathInfo{LocalIP: local, RemoteIP: remote, LocalMAC: p.MAC, RemoteMAC: p.peer.MAC, MTU: p.MTU}
}

// Sent returns how many MADs of attr the port sent (before faults).
func (p *Port) Sent(attr rocev2.AttributeID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[attr]
}

// Frames returns copies of every frame the port sent.
func (p *Port) Frames() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.frames...)
}

// Malformed returns how many delivered frames failed ParseGSI.
func (p *Port) Malformed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bad
}

// SendMAD implements cm.Transport.
func (p *Port) SendMAD(dst cm.PathInfo, mad *[rocev2.MADLen]byte) error {
	buf := make([]byte, cm.GSIFrameLen6)
	n, err := p.framer.Build(buf, &dst, mad)
	if err != nil {
		return err
	}
	frame := buf[:n]
	attr := rocev2.AttributeID(binary.BigEndian.Uint16(mad[16:]))

	p.mu.Lock()
	if p.sent == nil {
		p.sent = map[rocev2.AttributeID]int{}
	}
	seen := p.sent[attr]
	p.sent[attr]++
	p.frames = append(p.frames, frame)
	p.mu.Unlock()

	l := p.link
	l.mu.Lock()
	f := l.faults
	copies := 1
	if f.DropIf != nil && f.DropIf(p.name, attr, seen) {
		copies = 0
	} else if f.Drop > 0 && l.rng.Float64() < f.Drop {
		copies = 0
	} else if f.Duplicate > 0 && l.rng.Float64() < f.Duplicate {
		copies = 2
	}
	delays := make([]time.Duration, copies)
	for i := range delays {
		delays[i] = f.Delay
		if f.Jitter > 0 {
			delays[i] += time.Duration(l.rng.Int64N(int64(f.Jitter)))
		}
	}
	l.mu.Unlock()
	for _, d := range delays {
		l.Clock.AfterFunc(d, func() { p.peer.deliver(frame) })
	}
	return nil
}

func (p *Port) deliver(frame []byte) {
	var pkt rocev2.Packet
	reply, srcQP, mad, err := cm.ParseGSI(frame, &pkt)
	p.mu.Lock()
	m := p.mgr
	if err != nil {
		p.bad++
	}
	p.mu.Unlock()
	if err != nil || m == nil {
		return
	}
	reply.MTU = p.MTU
	m.HandleMAD(reply, srcQP, mad)
}
