package interop

import (
	"slices"
	"strings"
	"testing"
)

// The counters of a 7.3 guest's virtio_net (tx0_kicks) and an older
// kernel's (tx_queue_0_kicks), with the receive side's beside them.
func TestParseTxCounters(t *testing.T) {
	const out = `NIC statistics:
     rx_packets: 12
     rx0_kicks: 5
     tx0_packets: 31
     tx0_kicks: 34
     tx1_kicks: 2
     tx_queue_2_kicks: 7
     tx1_xdp_tx: 9
`
	got := parseTxCounters(out, "kicks")
	want := map[int]int64{0: 34, 1: 2, 2: 7}
	if len(got) != len(want) {
		t.Fatalf("kicks %v, want %v", got, want)
	}
	for q, v := range want {
		if got[q] != v {
			t.Fatalf("kicks %v, want %v", got, want)
		}
	}
	if got := parseTxCounters(out, "xdp_tx"); got[1] != 9 || len(got) != 1 {
		t.Fatalf("xdp_tx %v, want tx1 9 alone", got)
	}
	xps := parseXPS("xps 0 00000000,00000001\nxps 1 2\ngarbage\n")
	if xps[0] != "00000000,00000001" || xps[1] != "2" || len(xps) != 2 {
		t.Fatalf("xps %v", xps)
	}
}

// A send queue is stalled only when qemu's used index stood still while
// the guest posted to it: kicks rose, or a CPU XPS maps to it sent.
func TestSendQueueStalls(t *testing.T) {
	q := func(kind string, pair, used int) VirtqueueStatus {
		return VirtqueueStatus{Path: "/machine/peripheral-anon/device[0]/virtio-backend", Kind: kind, Pair: pair, Used: used}
	}
	before := []VirtqueueStatus{q("rx0", 0, 5), q("tx0", 0, 40), q("rx1", 1, 3), q("tx1", 1, 0), q("control", -1, 2)}
	cases := []struct {
		name   string
		after  []VirtqueueStatus
		kicks  map[int]int64
		xps    map[int]string
		stalls []int
	}{
		{"both moved", []VirtqueueStatus{q("rx0", 0, 5), q("tx0", 0, 44), q("rx1", 1, 3), q("tx1", 1, 4), q("control", -1, 2)},
			map[int]int64{0: 14, 1: 5}, map[int]string{0: "1", 1: "2"}, nil},
		{"tx1 kicked, qemu still", []VirtqueueStatus{q("rx0", 0, 5), q("tx0", 0, 44), q("rx1", 1, 3), q("tx1", 1, 0), q("control", -1, 2)},
			map[int]int64{0: 14, 1: 5}, map[int]string{}, []int{1}},
		{"tx0 mapped, no kick, qemu still", []VirtqueueStatus{q("rx0", 0, 5), q("tx0", 0, 40), q("rx1", 1, 3), q("tx1", 1, 4), q("control", -1, 2)},
			map[int]int64{0: 10, 1: 5}, map[int]string{0: "00000000,00000001", 1: "2"}, []int{0}},
		{"tx1 neither kicked nor mapped", []VirtqueueStatus{q("rx0", 0, 5), q("tx0", 0, 44), q("rx1", 1, 3), q("tx1", 1, 0), q("control", -1, 2)},
			map[int]int64{0: 14, 1: 1}, map[int]string{0: "3", 1: "00000000,00000000"}, nil},
		{"used wrapped past 65535", []VirtqueueStatus{q("rx0", 0, 5), q("tx0", 0, 3), q("rx1", 1, 3), q("tx1", 1, 4), q("control", -1, 2)},
			map[int]int64{0: 14, 1: 5}, map[int]string{0: "1", 1: "2"}, nil},
	}
	kicksBefore := map[int]int64{0: 10, 1: 1}
	for _, c := range cases {
		if got := sendQueueStalls(before, c.after, kicksBefore, c.kicks, c.xps); !slices.Equal(got, c.stalls) {
			t.Errorf("%s: stalled %v, want %v", c.name, got, c.stalls)
		}
	}
}

// TestTapFrames: the mute-link log counts what the guest wrote and names
// each of the last frames by its Ethernet header, a runt by its bytes,
// and leaves out what went to the guest.
func TestTapFrames(t *testing.T) {
	arp := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0xc6, 0x12, 2, 0x08, 0x06}, make([]byte, 28)...)
	fs := []Frame{
		{Outgoing: true, Data: arp},
		{Data: []byte{1, 2, 3}},
		{Data: arp},
	}
	got := tapFrames(fs, 5)
	for _, want := range []string{
		"the guest wrote 2 frames to its tap during the run (1 went the other way); the last 2:",
		"runt of 3 bytes: 01 02 03",
		"52:54:00:c6:12:02 -> ff:ff:ff:ff:ff:ff type 0x0806 len 42:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if got := tapFrames(fs, 1); strings.Contains(got, "runt") || !strings.Contains(got, "the last 1:") {
		t.Errorf("n=1 keeps only the last frame:\n%s", got)
	}
}
