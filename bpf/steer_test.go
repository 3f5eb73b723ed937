package bpf_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/bpf"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// Frame builder: just enough of each header for the steering program, which
// reads ethertypes, IPv4 IHL/protocol/fragment offset, IPv6 next header, the
// UDP destination port and the BTH TVer and DestQP. Checksums stay zero.

const (
	tpidQ   = 0x8100
	tpidAD  = 0x88A8
	etIPv4  = 0x0800
	etIPv6  = 0x86DD
	etARP   = 0x0806
	rocePrt = 4791
)

func be16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }

func ether(etherType uint16, tpids ...uint16) []byte {
	b := []byte{0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01}
	for _, tpid := range tpids {
		b = be16(b, tpid)
		b = be16(b, 100) // VID 100, PCP 0
	}
	return be16(b, etherType)
}

// ipv4 builds a header with optWords 32-bit option words and the given
// flags+fragment-offset field, followed by payload.
func ipv4(proto byte, optWords int, fragField uint16, payload []byte) []byte {
	hlen := 20 + 4*optWords
	b := []byte{0x40 | byte(hlen/4), 0}
	b = be16(b, uint16(hlen+len(payload)))
	b = be16(b, 0x1234)
	b = be16(b, fragField)
	b = append(b, 64, proto, 0, 0)
	b = append(b, 198, 18, 0, 1, 198, 18, 0, 2)
	b = append(b, make([]byte, 4*optWords)...) // NOP-free zero options: only the length matters here
	return append(b, payload...)
}

func ipv6(next byte, payload []byte) []byte {
	b := []byte{0x60, 0, 0, 0}
	b = be16(b, uint16(len(payload)))
	b = append(b, next, 64)
	b = append(b, 0x20, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1) // 2001:200::1
	b = append(b, 0x20, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2)
	return append(b, payload...)
}

func udp(dport uint16, payload []byte) []byte {
	b := be16(nil, 49152)
	b = be16(b, dport)
	b = be16(b, uint16(8+len(payload)))
	b = be16(b, 0)
	return append(b, payload...)
}

// roce builds a BTH (RC SEND ONLY, P_Key 0xFFFF) with payload bytes of
// payload and a zero ICRC.
func roce(tver byte, qpn uint32, payload int) []byte {
	b := []byte{0x04, tver & 0x0F, 0xFF, 0xFF, 0}
	b = append(b, byte(qpn>>16), byte(qpn>>8), byte(qpn))
	b = append(b, 0x80, 0, 0, 1)
	b = append(b, make([]byte, payload)...)
	return append(b, 0, 0, 0, 0)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// QPs in the steering map for every test.
const (
	qpLocal   = 0x000011 // owned by queue 0, the queue test frames arrive on
	qpForeign = 0x000022 // owned by queue 1
	qpUnknown = 0xABCDEF
	qpGSI     = 1
)

type objects struct {
	bpf.SteerPrograms
	bpf.SteerMaps
}

func load(t testing.TB) *objects {
	t.Helper()
	testenv.RequireRoot(t)
	spec, err := bpf.LoadSteer()
	if err != nil {
		t.Fatal(err)
	}
	var objs objects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			t.Fatalf("load: %+v", verr)
		}
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() {
		objs.SteerPrograms.Close()
		objs.SteerMaps.Close()
	})
	for qpn, queue := range map[uint32]uint32{qpLocal: 0, qpForeign: 1, qpGSI: 0} {
		if err := objs.QpOwner.Put(qpn, queue); err != nil {
			t.Fatalf("qp_owner[%#x] = %d: %v", qpn, queue, err)
		}
	}
	return &objs
}

// counters sums the per-CPU counters by reason.
func counters(t *testing.T, m *ebpf.Map) [bpf.SteerReasonREASON_MAX]uint64 {
	t.Helper()
	var sums [bpf.SteerReasonREASON_MAX]uint64
	var perCPU []uint64
	for r := range sums {
		if err := m.Lookup(uint32(r), &perCPU); err != nil {
			t.Fatalf("counters[%d]: %v", r, err)
		}
		for _, n := range perCPU {
			sums[r] += n
		}
	}
	return sums
}

// xdpMD mirrors struct xdp_md (include/uapi/linux/bpf.h) for test runs that
// set the linear data size.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

type verdictCase struct {
	name   string
	frame  []byte
	want   uint32
	reason bpf.SteerReason
}

// run runs the program on c.frame and checks the verdict and that exactly one
// counter, the case's reason, went up by one.
func run(t *testing.T, objs *objects, c verdictCase, opts *ebpf.RunOptions) {
	t.Helper()
	before := counters(t, objs.Counters)
	if opts == nil {
		opts = &ebpf.RunOptions{}
	}
	opts.Data = c.frame
	got, err := objs.Steer.Run(opts)
	if err != nil {
		t.Fatalf("run %d-byte frame: %v", len(c.frame), err)
	}
	if got != c.want {
		t.Errorf("verdict = %s, want %s", action(got), action(c.want))
	}
	after := counters(t, objs.Counters)
	for r := range after {
		want := before[r]
		if bpf.SteerReason(r) == c.reason {
			want++
		}
		if after[r] != want {
			t.Errorf("counter %d = %d, want %d (expected reason %d)", r, after[r], want, c.reason)
		}
	}
}

func action(a uint32) string {
	switch a {
	case 1:
		return "XDP_DROP"
	case 2:
		return "XDP_PASS"
	case 4:
		return "XDP_REDIRECT"
	}
	return fmt.Sprintf("action %d", a)
}

const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4
)

// verdictCases covers every reason except the two that need a socket in
// xsks (see TestSteerRedirect).
func verdictCases() []verdictCase {
	rc := roce(0, qpUnknown, 32)
	v4 := func(p []byte) []byte { return cat(ether(etIPv4), ipv4(17, 0, 0x4000, p)) }
	return []verdictCase{
		{"arp", cat(ether(etARP), make([]byte, 28)), xdpPass, bpf.SteerReasonREASON_PASS_NOT_IP},
		{"lldp", cat(ether(0x88CC), make([]byte, 46)), xdpPass, bpf.SteerReasonREASON_PASS_NOT_IP},
		{"two vlan tags", cat(ether(etIPv4, tpidAD, tpidQ), ipv4(17, 0, 0, udp(rocePrt, rc))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_IP},
		{"ipv4 tcp", cat(ether(etIPv4), ipv4(6, 0, 0x4000, make([]byte, 40))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_UDP},
		{"ipv4 icmp", cat(ether(etIPv4), ipv4(1, 0, 0, make([]byte, 16))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_UDP},
		{"ipv6 tcp", cat(ether(etIPv6), ipv6(6, make([]byte, 40))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_UDP},
		{"ipv6 hop-by-hop before udp", cat(ether(etIPv6), ipv6(0, append([]byte{17, 0, 1, 4, 0, 0, 0, 0}, udp(rocePrt, rc)...))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_UDP},
		{"ipv4 udp dns", v4(udp(53, make([]byte, 32))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_ROCE},
		{"ipv6 udp dns", cat(ether(etIPv6), ipv6(17, udp(53, make([]byte, 32)))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_ROCE},
		{"vlan udp dns", cat(ether(etIPv4, tpidQ), ipv4(17, 0, 0, udp(53, nil))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_ROCE},
		{"udp source port 4791", cat(ether(etIPv4), ipv4(17, 0, 0, func() []byte { u := udp(5000, nil); binary.BigEndian.PutUint16(u, rocePrt); return u }())), xdpPass, bpf.SteerReasonREASON_PASS_NOT_ROCE},
		// Offset 185 (1480 bytes): what sits where a UDP header would be is
		// payload of the datagram, here made to look like RoCE.
		{"ipv4 non-first fragment", cat(ether(etIPv4), ipv4(17, 0, 185, udp(rocePrt, rc))), xdpPass, bpf.SteerReasonREASON_PASS_IP_FRAGMENT},
		{"ipv4 last fragment", cat(ether(etIPv4), ipv4(17, 0, 370, udp(rocePrt, rc))), xdpPass, bpf.SteerReasonREASON_PASS_IP_FRAGMENT},
		{"ipv4 first fragment rocev2 unknown qp", cat(ether(etIPv4), ipv4(17, 0, 0x2000, udp(rocePrt, rc))), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"vlan tag cut short", ether(tpidQ)[:14], xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L2},
		{"vlan tag half there", cat(ether(tpidQ), []byte{0, 100}), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L2},
		{"ipv4 header cut short", cat(ether(etIPv4), ipv4(17, 0, 0, nil)[:19]), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L3},
		{"ipv4 ihl below 5", cat(ether(etIPv4), func() []byte { h := ipv4(17, 0, 0, udp(rocePrt, rc)); h[0] = 0x44; return h }()), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L3},
		{"ipv6 header cut short", cat(ether(etIPv6), ipv6(17, nil)[:39]), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L3},
		{"vlan ipv4 header cut short", cat(ether(etIPv4, tpidQ), ipv4(17, 0, 0, nil)[:12]), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L3},
		{"ipv4 udp header cut short", cat(ether(etIPv4), ipv4(17, 0, 0, udp(rocePrt, nil))[:27]), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L4},
		{"ipv4 options run past the end", cat(ether(etIPv4), ipv4(17, 10, 0, nil)[:40]), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L4},
		{"ipv6 udp header cut short", cat(ether(etIPv6), ipv6(17, udp(rocePrt, nil))[:44]), xdpPass, bpf.SteerReasonREASON_PASS_TRUNCATED_L4},
		{"ipv4 rocev2 bth cut short", v4(udp(rocePrt, rc[:11])), xdpDrop, bpf.SteerReasonREASON_DROP_TRUNCATED_BTH},
		{"ipv6 rocev2 no bth", cat(ether(etIPv6), ipv6(17, udp(rocePrt, nil))), xdpDrop, bpf.SteerReasonREASON_DROP_TRUNCATED_BTH},
		{"ipv4 rocev2 tver 1", v4(udp(rocePrt, roce(1, qpLocal, 0))), xdpDrop, bpf.SteerReasonREASON_DROP_BAD_VERSION},
		{"ipv4 rocev2 unknown qp", v4(udp(rocePrt, rc)), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"ipv4 with options rocev2 unknown qp", cat(ether(etIPv4), ipv4(17, 3, 0x4000, udp(rocePrt, rc))), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"ipv6 rocev2 unknown qp", cat(ether(etIPv6), ipv6(17, udp(rocePrt, rc))), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"802.1q rocev2 unknown qp", cat(ether(etIPv4, tpidQ), ipv4(17, 0, 0x4000, udp(rocePrt, rc))), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"802.1ad ipv6 rocev2 unknown qp", cat(ether(etIPv6, tpidAD), ipv6(17, udp(rocePrt, rc))), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"ipv4 rocev2 known qp no socket", v4(udp(rocePrt, roce(0, qpLocal, 64))), xdpDrop, bpf.SteerReasonREASON_DROP_NO_SOCKET},
		{"ipv6 rocev2 qp1 no socket", cat(ether(etIPv6), ipv6(17, udp(rocePrt, roce(0, qpGSI, 256)))), xdpDrop, bpf.SteerReasonREASON_DROP_NO_SOCKET},
		{"vlan rocev2 foreign qp no socket", cat(ether(etIPv4, tpidQ), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpForeign, 0)))), xdpDrop, bpf.SteerReasonREASON_DROP_NO_SOCKET},
	}
}

func TestSteerVerdicts(t *testing.T) {
	objs := load(t)
	seen := map[bpf.SteerReason]bool{}
	for _, c := range verdictCases() {
		seen[c.reason] = true
		t.Run(c.name, func(t *testing.T) { run(t, objs, c, nil) })
	}
	for r := range bpf.SteerReasonREASON_MAX {
		switch r {
		case bpf.SteerReasonREASON_REDIRECT, bpf.SteerReasonREASON_REDIRECT_FOREIGN_QUEUE:
			continue // TestSteerRedirect
		case bpf.SteerReasonREASON_DROP_WRONG_DST_MAC, bpf.SteerReasonREASON_DROP_WRONG_DST_IP:
			continue // TestSteerDestination
		}
		if !seen[r] {
			t.Errorf("reason %d has no test case", r)
		}
	}
}

// xsk opens an AF_XDP socket. The XSKMAP takes any AF_XDP socket
// (net/xdp/xskmap.c, xsk_map_update_elem), and BPF_PROG_TEST_RUN only reports
// the XDP_REDIRECT verdict without delivering the frame, so the socket need
// not be bound here; delivery into a bound socket is tested in ../loader.
func xsk(t *testing.T) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket(AF_XDP): %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestSteerRedirect(t *testing.T) {
	objs := load(t)
	if err := objs.Xsks.Put(uint32(0), uint32(xsk(t))); err != nil {
		t.Fatalf("xsks[0]: %v", err)
	}
	v4 := func(qpn uint32) []byte {
		return cat(ether(etIPv4), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpn, 64))))
	}
	for _, c := range []verdictCase{
		{"ipv4 local qp", v4(qpLocal), xdpRedirect, bpf.SteerReasonREASON_REDIRECT},
		{"ipv6 qp1", cat(ether(etIPv6), ipv6(17, udp(rocePrt, roce(0, qpGSI, 256)))), xdpRedirect, bpf.SteerReasonREASON_REDIRECT},
		{"vlan local qp", cat(ether(etIPv4, tpidQ), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpLocal, 0)))), xdpRedirect, bpf.SteerReasonREASON_REDIRECT},
		{"ipv4 foreign qp", v4(qpForeign), xdpRedirect, bpf.SteerReasonREASON_REDIRECT_FOREIGN_QUEUE},
		{"ipv6 foreign qp", cat(ether(etIPv6), ipv6(17, udp(rocePrt, roce(0, qpForeign, 0)))), xdpRedirect, bpf.SteerReasonREASON_REDIRECT_FOREIGN_QUEUE},
		// A socket does not make unknown QPs or other traffic ours.
		{"ipv4 unknown qp", v4(qpUnknown), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"ipv4 udp dns", cat(ether(etIPv4), ipv4(17, 0, 0, udp(53, nil))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_ROCE},
	} {
		t.Run(c.name, func(t *testing.T) { run(t, objs, c, nil) })
	}

	// Removing the socket turns the same frame into a counted drop.
	if err := objs.Xsks.Delete(uint32(0)); err != nil {
		t.Fatalf("delete xsks[0]: %v", err)
	}
	run(t, objs, verdictCase{"after socket removed", v4(qpLocal), xdpDrop, bpf.SteerReasonREASON_DROP_NO_SOCKET}, nil)
}

// TestSteerMultiBuffer runs frames larger than a page, which BPF_PROG_TEST_RUN
// splits into a linear part and fragments for an xdp.frags program (Linux
// 5.18, net/bpf/test_run.c), and then frames whose linear part ends inside
// the headers, which makes the program read them with bpf_xdp_load_bytes.
func TestSteerMultiBuffer(t *testing.T) {
	objs := load(t)
	const size = 9000 // jumbo: a page of linear data plus fragments
	pad := func(f []byte) []byte { return append(f, make([]byte, size-len(f))...) }
	cases := []verdictCase{
		{"ipv4 rocev2 known qp", pad(cat(ether(etIPv4), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpLocal, 0))))), xdpDrop, bpf.SteerReasonREASON_DROP_NO_SOCKET},
		{"ipv6 rocev2 unknown qp", pad(cat(ether(etIPv6), ipv6(17, udp(rocePrt, roce(0, qpUnknown, 0))))), xdpDrop, bpf.SteerReasonREASON_DROP_UNKNOWN_QP},
		{"vlan ipv4 with options rocev2 tver 1", pad(cat(ether(etIPv4, tpidQ), ipv4(17, 10, 0, udp(rocePrt, roce(1, qpLocal, 0))))), xdpDrop, bpf.SteerReasonREASON_DROP_BAD_VERSION},
		{"ipv4 udp dns", pad(cat(ether(etIPv4), ipv4(17, 0, 0, udp(53, nil)))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_ROCE},
		{"ipv6 tcp", pad(cat(ether(etIPv6), ipv6(6, nil))), xdpPass, bpf.SteerReasonREASON_PASS_NOT_UDP},
	}
	for _, c := range cases {
		t.Run("jumbo "+c.name, func(t *testing.T) { run(t, objs, c, nil) })
	}

	// Linear part cut at every byte from the end of the Ethernet header
	// (the kernel's minimum) to past the BTH: the verdict must not change.
	if _, err := objs.Steer.Run(&ebpf.RunOptions{Data: cases[0].frame, Context: xdpMD{DataEnd: 14}}); errors.Is(err, unix.EINVAL) {
		testenv.Unavailable(t, "kernel rejects a BPF_PROG_TEST_RUN linear size below the data size (needs Linux 6.18): %v", err)
	}
	for _, c := range cases {
		for linear := uint32(14); linear <= 14+4+60+8+12+1; linear++ {
			opts := &ebpf.RunOptions{Context: xdpMD{DataEnd: linear}}
			t.Run(fmt.Sprintf("linear %d %s", linear, c.name), func(t *testing.T) { run(t, objs, c, opts) })
		}
	}
}

// BenchmarkSteer reports the program's cost per frame as measured by
// BPF_PROG_TEST_RUN (kernel-side loop, no syscall per frame), next to a
// program that only returns XDP_PASS, which measures the test-run harness
// itself: the difference is what steering costs.
func BenchmarkSteer(b *testing.B) {
	objs := load(b)
	baseline, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
		License:      "MIT",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer baseline.Close()
	tcp := cat(ether(etIPv4), ipv4(6, 0, 0x4000, make([]byte, 40)))
	b.Run("baseline_return_pass", func(b *testing.B) { benchRun(b, baseline, tcp) })
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"pass_ipv4_tcp", cat(ether(etIPv4), ipv4(6, 0, 0x4000, make([]byte, 40)))},
		{"pass_ipv4_udp_other", cat(ether(etIPv4), ipv4(17, 0, 0x4000, udp(53, make([]byte, 32))))},
		{"drop_unknown_qp", cat(ether(etIPv4), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpUnknown, 64))))},
		{"drop_no_socket_ipv6_vlan", cat(ether(etIPv6, tpidQ), ipv6(17, udp(rocePrt, roce(0, qpLocal, 1024))))},
	} {
		b.Run(c.name, func(b *testing.B) { benchRun(b, objs.Steer, c.frame) })
	}
}

func benchRun(b *testing.B, prog *ebpf.Program, frame []byte) {
	const repeat = 1 << 16
	var total time.Duration
	for b.Loop() {
		_, per, err := prog.Benchmark(frame, repeat, nil)
		if err != nil {
			b.Fatal(err)
		}
		total += per
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/frame")
}
