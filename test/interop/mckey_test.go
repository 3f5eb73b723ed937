package interop

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/mckey"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// mckeyGroup is the group the mckey cases join.
var mckeyGroup = netip.MustParseAddr("239.18.1.7")

// testMckey runs rdma-core's mckey (UD multicast through rdma_cm's
// rdma_join_multicast) against ndkxdp's, each side as receiver and as
// sender, receivers first, as mckey wants. Pinned rxe behaviours: rxe's
// datagrams to the group come as UD SEND_ONLY with immediate to QPN
// 0xFFFFFF, the group's MAC and address, with Q_Key RDMA_UDP_QKEY, which
// our members take; and rxe's members take ours (its receiver counts all
// -C of them, or it would wait for ever).
func testMckey(t *testing.T, p *peer) {
	const count, size = 10, 100
	t.Run("rxe_receiver", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		proc, err := p.vm.Start(ctx, fmt.Sprintf("exec mckey -m %v -b %v -C %d -S %d", mckeyGroup, GuestIPv4, count, size))
		if err != nil {
			t.Fatal(err)
		}
		defer proc.Kill()
		// rxe's receiver joins in well under its own 3-second pause; ours
		// sends after the same pause.
		time.Sleep(2 * time.Second)
		var ours bytes.Buffer
		var st mckey.Stats
		if err := p.vm.Host.Do(func() (err error) {
			st, err = mckey.Run(ctx, p.dev.Adapter, mckey.Config{Group: mckeyGroup, Sender: true, Count: count, Size: size}, &ours)
			return err
		}); err != nil {
			t.Fatalf("ndkxdp's sender: %v\n%s", err, ours.String())
		}
		out, errOut, code, err := proc.Wait(ctx)
		t.Logf("rxe's mckey receiver:\n%s%sndkxdp's sender:\n%s", out, errOut, ours.String())
		if err != nil || code != 0 || !strings.Contains(out, "data transfers complete") {
			t.Fatalf("rxe's receiver: exit %d (%v), want all %d datagrams", code, err, count)
		}
		if st.Sent != count {
			t.Fatalf("ndkxdp's sender: %+v", st)
		}
	})
	t.Run("rxe_sender", func(t *testing.T) {
		p.capture(t)
		before := len(p.framesNow(t))
		ctx := ctxFor(t, 2*time.Minute)
		var ours bytes.Buffer
		var st mckey.Stats
		joined := make(chan struct{})
		done := make(chan error, 1)
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			done <- p.vm.Host.Do(func() (err error) {
				st, err = mckey.Run(rctx, p.dev.Adapter, mckey.Config{Group: mckeyGroup, Count: count, Size: size, Pause: time.Millisecond,
					Joined: func() { close(joined) }}, &ours)
				return err
			})
		}()
		select {
		case <-joined:
		case err := <-done:
			t.Fatalf("ndkxdp's receiver: %v\n%s", err, ours.String())
		}
		sentBefore := rxeSentPkts(t, p)
		out, errOut, code, err := p.vm.Run(ctx, fmt.Sprintf("mckey -m %v -b %v -s -C %d -S %d", mckeyGroup, GuestIPv4, count, size))
		sent := rxeSentPkts(t, p) - sentBefore
		if err != nil || code != 0 {
			t.Fatalf("rxe's sender: exit %d (%v)\n%s%s", code, err, out, errOut)
		}
		wait := 30 * time.Second
		some := factsOf(t, p.vm).mckeySendsSome
		if some {
			wait = 3 * time.Second
		}
		var rerr error
		select {
		case rerr = <-done:
		case <-time.After(wait):
			stop()
			rerr = <-done
		}
		t.Logf("rxe's mckey sender (rxe's sent_pkts grew by %d):\n%s%sndkxdp's receiver: %v\n%s", sent, out, errOut, rerr, ours.String())
		switch {
		case some && st.Received != sent:
			// Pinned (peerFacts.mckeySendsSome): every datagram rxe sent
			// is taken.
			t.Fatalf("ndkxdp's receiver took %d datagrams, rxe sent %d", st.Received, sent)
		case !some && (rerr != nil || st.Received != count):
			t.Fatalf("ndkxdp's receiver: %+v, %v; want %d datagrams", st, rerr, count)
		case st.Received > 0 && st.From != GuestIPv4:
			t.Fatalf("ndkxdp's receiver: datagrams from %v, want %v", st.From, GuestIPv4)
		}
		mac, _ := rocev2.MulticastMAC(mckeyGroup)
		theirs := 0
		for _, f := range p.framesNow(t)[before:] {
			var pkt rocev2.Packet
			if f.Outgoing || rocev2.Parse(f.Data, &pkt) != nil || pkt.BTH.DestQP != rocev2.MulticastQPN {
				continue
			}
			theirs++
			if pkt.BTH.Opcode != rocev2.UDSendOnlyImm || pkt.Eth.Dst != mac || pkt.IP.Dst.Unmap() != mckeyGroup || pkt.DETH.QKey != 0x01234567 {
				t.Errorf("rxe's datagram %v to %v %v with Q_Key %#x", pkt.BTH.Opcode, pkt.Eth.Dst, pkt.IP.Dst, pkt.DETH.QKey)
			}
		}
		if theirs != st.Received {
			t.Errorf("the capture holds %d of rxe's datagrams to the group, the receiver took %d", theirs, st.Received)
		}
	})
}

// rxeSentPkts reads rxe0's sent_pkts counter in the guest.
func rxeSentPkts(t *testing.T, p *peer) int {
	t.Helper()
	out, errOut, code, err := p.vm.Run(ctxFor(t, time.Minute), "cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts")
	n, perr := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || code != 0 || perr != nil {
		t.Fatalf("rxe0's sent_pkts: exit %d, %v, %v %s", code, err, perr, errOut)
	}
	return n
}
