package inproc

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// management is a provider's connection management: the IB CM (package
// cm) and its wire, QP1. The management queue's engine hands each GSI
// datagram to onGSI, which copies the MAD into a bounded queue and
// returns; one goroutine feeds the queue to the CM, so that neither the
// data path nor the CM's timers ever wait for each other. The CM's MADs
// go out through SendMAD: framed here, transmitted by the management
// queue's engine ahead of its data (rc.Engine.TransmitGSI). Routes and
// neighbours are route.go's.
type management struct {
	p      *Provider
	m      *cm.Manager
	eng    *rc.Engine // the management queue's engine (queue 0)
	framer cm.GSIFramer

	in   chan gsiEvent
	stop chan struct{}
	done chan struct{}

	// ns is the adapter's network namespace, where routes and neighbours
	// are looked up whatever thread calls Connect; nsOK is false for a
	// provider without one (over an in-memory port).
	ns   netns.NsHandle
	nsOK bool
	nl   *netlink.Handle
	// resolve replaces the kernel's tables (tests over a port).
	resolve func(src, dst netip.Addr) (cm.PathInfo, error)
	faults  atomic.Pointer[MADFaults]

	queueDrops atomic.Uint64 // MADs lost to a full receive queue or madRate
	rate       madRateTable  // the management engine's goroutine only
	sendDrops  atomic.Uint64 // MADs lost to a full transmit queue
	delayed    sync.WaitGroup
	stopped    atomic.Bool // the engines are stopping: MADs are dropped

	mu    sync.Mutex
	addrs map[netip.Addr]bool // the interface's addresses, refreshed on a miss and on a change
	// addrFile is watchAddrs' subscription, which closing ends; addrDone
	// closes when its goroutine returned.
	addrFile *os.File
	addrDone chan struct{}
}

// MADFaults decides the fate of a connection-management datagram (a
// 256-byte IB CM MAD) the provider sends: how many copies leave (0 drops
// it, 2 duplicates it) and after what delay. It may be called from
// several goroutines.
type MADFaults func(mad []byte) (copies int, delay time.Duration)

// SetMADFaults makes f decide the fate of every MAD the provider sends
// from now on (nil: every MAD leaves once, at once). It exists to test
// connection setup on a lossy network (test/cm).
func (p *Provider) SetMADFaults(f MADFaults) {
	if p.mgmt == nil {
		return
	}
	if f == nil {
		p.mgmt.faults.Store(nil)
		return
	}
	p.mgmt.faults.Store(&f)
}

// gsiQueue bounds the MADs waiting for the CM goroutine. A full queue
// drops (and counts) the MAD: the sender's CM retransmits it.
const gsiQueue = 512

type gsiEvent struct {
	path    cm.PathInfo
	srcQP   uint32
	commEst uint32 // not 0: the QP with this number received its first packet
	failed  uint32 // not 0: the QP with this number failed (status in wc)
	wc      uint32
	mad     [rocev2.MADLen]byte
}

func newManagement(p *Provider) *management {
	return &management{
		p:     p,
		in:    make(chan gsiEvent, gsiQueue),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		addrs: map[netip.Addr]bool{},
	}
}

// start creates the CM once the engines run and starts feeding it.
func (g *management) start(params cm.Params) error {
	if len(g.p.engines) == 0 {
		return errors.New("connection management needs an engine")
	}
	g.eng = g.p.engines[0]
	m, err := cm.New(cm.Config{Transport: g, CAGUID: rocev2.EUI64(g.p.link.MAC), Params: params, IsLocalAddr: g.isLocal})
	if err != nil {
		return err
	}
	g.m = m
	go g.serve()
	return nil
}

// onGSI runs on the management queue's engine for every UD datagram to
// QP1. It does not block and does not allocate.
func (g *management) onGSI(p *rocev2.Packet) {
	reply, srcQP, mad, err := cm.CheckGSI(p)
	if err != nil {
		return
	}
	cost := madCost
	if rocev2.AttributeID(binary.BigEndian.Uint16(mad[16:18])) == rocev2.AttrREQ {
		cost = reqCost // the MAD header's AttributeID (IBTA 13.4.2)
	}
	if !g.rate.allow(reply.RemoteIP, cost) {
		g.queueDrops.Add(1)
		return
	}
	ev := gsiEvent{path: reply, srcQP: srcQP}
	// The reply leaves through our interface: its MTU bounds the path MTU
	// the passive side accepts.
	ev.path.MTU, ev.path.Ifindex = g.p.link.MTU, g.p.link.Ifindex
	copy(ev.mad[:], mad)
	select {
	case g.in <- ev:
	default:
		g.queueDrops.Add(1)
	}
}

// onFirstPacket runs on any engine when a connected QP receives its first
// packet: a passive side still waiting for RTU counts as established.
func (g *management) onFirstPacket(qpn uint32) {
	select {
	case g.in <- gsiEvent{commEst: qpn}:
	default:
		// The REP retransmission still brings the RTU.
		g.queueDrops.Add(1)
	}
}

// onQPFailed runs on any engine when a connected QP fails on its own:
// the CM aborts its connection (cm.Manager.TransportFailed). Unlike a
// lost first-packet note, a lost failure would leave the connection up
// with a dead QP, so a full queue hands the event to a goroutine that
// waits for room; failures are rare, and that is off the data path.
func (g *management) onQPFailed(qpn, wcStatus uint32) {
	ev := gsiEvent{failed: qpn, wc: wcStatus}
	select {
	case g.in <- ev:
	default:
		go func() {
			select {
			case g.in <- ev:
			case <-g.stop:
			}
		}()
	}
}

func (g *management) serve() {
	defer close(g.done)
	for {
		select {
		case <-g.stop:
			return
		case ev := <-g.in:
			switch {
			case ev.commEst != 0:
				g.m.CommEstablished(ev.commEst)
			case ev.failed != 0:
				g.m.TransportFailed(ev.failed, ev.wc)
			default:
				g.m.HandleMAD(ev.path, ev.srcQP, ev.mad[:])
			}
		}
	}
}

// SendMAD implements cm.Transport.
func (g *management) SendMAD(dst cm.PathInfo, mad *[rocev2.MADLen]byte) error {
	copies, delay := 1, time.Duration(0)
	if f := g.faults.Load(); f != nil {
		copies, delay = (*f)(mad[:])
	}
	for range copies {
		frame := make([]byte, cm.GSIFrameLen6)
		n, err := g.framer.Build(frame, &dst, mad)
		if err != nil {
			return err
		}
		if delay <= 0 {
			if err := g.transmit(frame[:n]); err != nil {
				return err
			}
			continue
		}
		g.delayed.Add(1)
		time.AfterFunc(delay, func() {
			defer g.delayed.Done()
			_ = g.transmit(frame[:n])
		})
	}
	return nil
}

func (g *management) transmit(frame []byte) error {
	if g.stopped.Load() {
		return errors.New("adapter closed")
	}
	if err := g.eng.TransmitGSI(frame); err != nil {
		g.sendDrops.Add(1)
		return err
	}
	return nil
}

// close stops the CM; the consumer's connectors and listeners are closed
// already, their REJ or DREQ sent while the engines still run.
func (g *management) close() {
	if g.m != nil {
		g.m.Close()
		close(g.stop)
		<-g.done
		g.delayed.Wait()
	}
	// Nothing may reach the engines once they stop.
	g.stopped.Store(true)
	if g.addrFile != nil {
		g.addrFile.Close()
		<-g.addrDone
	}
	if g.nl != nil {
		g.nl.Close()
	}
	if g.nsOK {
		g.ns.Close()
	}
}
