package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/rawxdp"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

const testQPN = 0x000123

var modes = []struct {
	name string
	mode loader.AttachMode
}{
	{"driver", loader.AttachDriver},
	{"generic", loader.AttachGeneric},
}

// roceFrame builds a valid RC SEND_ONLY frame from a to b carrying payload.
func roceFrame(t *testing.T, a, b *harness.Host, qpn uint32, psn rocev2.PSN, payload []byte) []byte {
	t.Helper()
	h := rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: rocev2.MAC(b.MAC), Src: rocev2.MAC(a.MAC)},
		IP:  rocev2.NewIPFields(a.IPv4, b.IPv4),
		UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, 0x11, qpn)},
		BTH: rocev2.BTHFields{Opcode: rocev2.RCSendOnly, PKey: rocev2.DefaultPKey, DestQP: qpn, AckReq: true, PSN: psn},
	}
	buf := make([]byte, h.FrameLen(len(payload)))
	n, err := h.Encode(buf, payload)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf[:n]
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func openPair(t *testing.T, p *harness.Pair, mode loader.AttachMode, multiBuffer bool) (a, b *rawxdp.Endpoint) {
	t.Helper()
	var err error
	if a, err = rawxdp.Open(p.A, rawxdp.Config{Attach: mode, MultiBuffer: multiBuffer}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = rawxdp.Open(p.B, rawxdp.Config{Attach: mode, MultiBuffer: multiBuffer}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if a.XDP.Mode() != mode || b.XDP.Mode() != mode {
		t.Fatalf("attached in %v/%v, want %v", a.XDP.Mode(), b.XDP.Mode(), mode)
	}
	if err := b.XDP.AddQP(testQPN, 0); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestFramesCrossByteForByte sends RoCEv2 frames through AF_XDP TX in A and
// checks each arrives in B's RX ring unchanged, with a valid ICRC.
func TestFramesCrossByteForByte(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := harness.New(t, harness.Config{})
			a, b := openPair(t, p, m.mode, false)
			for i, size := range []int{0, 1, 2, 3, 4, 64, 1023, 1024, 1442} {
				want := roceFrame(t, p.A, p.B, testQPN, rocev2.PSN(i), pattern(size, byte(i)))
				if err := a.Send(want); err != nil {
					t.Fatalf("send %d-byte payload: %v", size, err)
				}
				got, descs, err := b.Receive(2 * time.Second)
				if err != nil {
					t.Fatalf("payload %d: %v", size, err)
				}
				// Ethernet pads short frames to 60 bytes; the IP length
				// says where the RoCEv2 packet ends.
				if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) || len(got) > max(len(want), 60) {
					t.Fatalf("payload %d: frame differs\n got %x\nwant %x", size, got, want)
				}
				if descs != 1 {
					t.Errorf("payload %d: %d descriptors, want 1", size, descs)
				}
				var pkt rocev2.Packet
				if err := rocev2.Parse(got, &pkt); err != nil {
					t.Fatalf("payload %d: received frame does not parse: %v", size, err)
				}
			}
			c, err := b.XDP.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if c[loader.ReasonRedirect] != 9 {
				t.Errorf("redirect counter %d, want 9\n%s", c[loader.ReasonRedirect], c.String())
			}
		})
	}
}

// TestJumboFramesCrossAsChains sends 9000-byte-MTU frames, larger than one
// 4096-byte UMEM frame, as descriptor chains and receives them as chains.
func TestJumboFramesCrossAsChains(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := harness.New(t, harness.Config{MTU: 9000})
			a, b := openPair(t, p, m.mode, true)
			// The largest RoCEv2 payload in a 9000-byte IP datagram.
			maxPayload := 9000 - 20 - 8 - rocev2.BTHLen - 4
			for _, size := range []int{4096, 4097, 8192, maxPayload} {
				want := roceFrame(t, p.A, p.B, testQPN, 7, pattern(size, 3))
				if err := a.Send(want); err != nil {
					t.Fatalf("send %d: %v", size, err)
				}
				got, descs, err := b.Receive(2 * time.Second)
				if err != nil {
					t.Fatalf("payload %d: %v", size, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("payload %d: %d-byte frame differs from the %d bytes sent", size, len(got), len(want))
				}
				if descs < 2 {
					t.Errorf("payload %d (%d-byte frame) arrived in %d descriptor(s), want a chain", size, len(want), descs)
				}
			}
		})
	}
}

// TestUnknownQPDroppedWithoutICMP sends RoCEv2 datagrams for a QP nobody
// owns from a plain UDP socket in A: B's program must drop and count them,
// and A must never see ICMP port unreachable. The same datagram to a
// non-RoCE port does draw ICMP, which shows the check can fail.
func TestUnknownQPDroppedWithoutICMP(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := harness.New(t, harness.Config{StaticNeighbours: true})
			_, b := openPair(t, p, m.mode, false)
			bth := make([]byte, rocev2.BTHLen+4)
			bth[0] = byte(rocev2.RCSendOnly)
			bth[2], bth[3] = 0xff, 0xff
			bth[5], bth[6], bth[7] = 0x00, 0x0f, 0xee // QPN 0xfee: unknown

			refused := func(port uint16) bool {
				var c *net.UDPConn
				if err := p.A.Do(func() error {
					var err error
					c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.B.IPv4, port)))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				for range 3 {
					if _, err := c.Write(bth); err != nil {
						return errors.Is(err, unix.ECONNREFUSED)
					}
					_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					var buf [64]byte
					if _, err := c.Read(buf[:]); errors.Is(err, unix.ECONNREFUSED) {
						return true
					}
				}
				return false
			}
			before, err := b.XDP.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if refused(rocev2.UDPPort) {
				t.Error("a RoCEv2 frame for an unknown QP reached B's kernel: A got ICMP port unreachable")
			}
			after, err := b.XDP.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if d := after[loader.ReasonDropUnknownQP] - before[loader.ReasonDropUnknownQP]; d < 1 {
				t.Errorf("unknown-QP drop counter rose by %d, want at least 1\n%s", d, after.String())
			}
			if !refused(rocev2.UDPPort + 1) {
				t.Error("control: a datagram to a closed non-RoCE port drew no ICMP, so the check above proves nothing")
			}
		})
	}
}

// TestPingAndTCPWithProgramAttached checks that ordinary traffic passes
// through the program on both ends.
func TestPingAndTCPWithProgramAttached(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := harness.New(t, harness.Config{})
			a, b := openPair(t, p, m.mode, false)
			for _, dst := range []netip.Addr{p.B.IPv4, p.B.IPv6} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				out, err := p.A.Command(ctx, "ping", "-c", "2", "-i", "0.2", "-W", "2", dst.String()).CombinedOutput()
				cancel()
				if err != nil {
					t.Errorf("ping %s: %v\n%s", dst, err, out)
				}
			}
			if err := tcpEcho(p, 4<<20); err != nil {
				t.Error(err)
			}
			ca, _ := a.XDP.Counters()
			cb, _ := b.XDP.Counters()
			if ca.Verdict(loader.VerdictPass) == 0 || cb.Verdict(loader.VerdictPass) == 0 {
				t.Errorf("program saw no passed frames (A %d, B %d): is it attached?", ca.Verdict(loader.VerdictPass), cb.Verdict(loader.VerdictPass))
			}
		})
	}
}

// tcpEcho streams n bytes from A to B over TCP and reads them back.
func tcpEcho(p *harness.Pair, n int) error {
	var ln net.Listener
	if err := p.B.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B.IPv4, 5001).String())
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			k, err := c.Read(buf)
			if k > 0 {
				if _, werr := c.Write(buf[:k]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var c net.Conn
	if err := p.A.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(p.B.IPv4, 5001).String(), 5*time.Second)
		return err
	}); err != nil {
		return fmt.Errorf("tcp dial: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	want := pattern(n, 9)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(want); errc <- err }()
	got := make([]byte, n)
	for off := 0; off < n; {
		k, err := c.Read(got[off:])
		if err != nil {
			return fmt.Errorf("tcp read after %d bytes: %w", off, err)
		}
		off += k
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("tcp write: %w", err)
	}
	if !bytes.Equal(got, want) {
		return errors.New("tcp echo: bytes differ")
	}
	return nil
}
