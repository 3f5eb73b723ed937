package rc

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestGSIWrongDestinationDropped: a QP1 datagram reaches connection
// management only when it is addressed to one of the adapter's addresses
// (Config.Addrs) and its MAC (Config.MAC); the others are dropped and
// counted. The control, the same datagram addressed to the adapter,
// reaches the GSI hook, and so does every datagram of an engine
// configured without addresses.
func TestGSIWrongDestinationDropped(t *testing.T) {
	own := rocev2.MAC{2, 0, 0, 0, 0, 2}
	addrs := []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:2::2")}
	for _, c := range []struct {
		name      string
		src, dst  string
		mac       rocev2.MAC
		unchecked bool // an engine with no Addrs and no MAC
		delivered bool
	}{
		{name: "ipv4-to-adapter", src: "198.18.0.1", dst: "198.18.0.2", mac: own, delivered: true},
		{name: "ipv6-to-adapter", src: "2001:2::1", dst: "2001:2::2", mac: own, delivered: true},
		{name: "ipv6-mapped-ipv4-of-adapter", src: "2001:2::1", dst: "::ffff:198.18.0.2", mac: own},
		{name: "ipv4-other-host", src: "198.18.0.1", dst: "198.18.0.9", mac: own},
		{name: "ipv6-other-host", src: "2001:2::1", dst: "2001:2::9", mac: own},
		{name: "ipv6-all-nodes", src: "2001:2::1", dst: "ff02::1", mac: own},
		{name: "ipv4-broadcast", src: "198.18.0.1", dst: "255.255.255.255", mac: own},
		{name: "mac-other-host", src: "198.18.0.1", dst: "198.18.0.2", mac: rocev2.MAC{2, 0, 0, 0, 0, 9}},
		{name: "mac-broadcast", src: "198.18.0.1", dst: "198.18.0.2", mac: rocev2.MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{name: "unchecked-engine", src: "198.18.0.1", dst: "198.18.0.9", mac: rocev2.MAC{2, 0, 0, 0, 0, 9}, unchecked: true, delivered: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 64})
			if err != nil {
				t.Fatal(err)
			}
			inj := &injectPort{Port: pipe.B()}
			regions, _ := memreg.New(16)
			var got atomic.Int64
			cfg := Config{Port: inj, Regions: regions, GSI: func(*rocev2.Packet) { got.Add(1) }}
			if !c.unchecked {
				cfg.Addrs, cfg.MAC = addrs, own
			}
			eng, err := NewEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(eng.Close)
			src, dst := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
			hd := rocev2.Headers{
				Eth:  rocev2.EthernetFields{Dst: c.mac, Src: rocev2.MAC{2, 0, 0, 0, 0, 1}},
				IP:   rocev2.NewIPFields(src, dst),
				UDP:  rocev2.UDPFields{SrcPort: 0xC000},
				BTH:  rocev2.BTHFields{Opcode: rocev2.UDSendOnly, PKey: rocev2.DefaultPKey, DestQP: rocev2.GSIQP},
				DETH: rocev2.DETHFields{QKey: 0x80010000, SrcQP: rocev2.GSIQP},
			}
			mad := make([]byte, rocev2.MADLen)
			f := make([]byte, hd.FrameLen(len(mad)))
			if _, err := hd.Encode(f, mad); err != nil {
				t.Fatal(err)
			}
			before := eng.Stats()
			inj.inject(f)
			deadline := time.Now().Add(2 * time.Second)
			for {
				s := eng.Stats()
				if s.FramesIn > before.FramesIn || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			after := eng.Stats()
			if after.FramesIn == before.FramesIn {
				t.Fatal("the engine did not receive the frame")
			}
			dropped := after.WrongDestination - before.WrongDestination
			if c.delivered && (got.Load() != 1 || dropped != 0) {
				t.Errorf("GSI hook called %d times, %d dropped as wrong destination; want the datagram delivered", got.Load(), dropped)
			}
			if !c.delivered && (got.Load() != 0 || dropped != 1) {
				t.Errorf("GSI hook called %d times, %d dropped as wrong destination; want it dropped and counted", got.Load(), dropped)
			}
		})
	}
}
