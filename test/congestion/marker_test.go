package congestion

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// marker is the bottleneck's AQM: RED with ecn as DCQCN's switches run it
// (marking probability 0 up to Kmin bytes of queue, rising to Pmax at
// Kmax, 1 beyond; ECN-capable frames are marked CE, the others dropped),
// over a phantom queue that drains at the shaper's rate. The kernels this
// runs on may lack sch_red, sch_fq_codel and every other marking qdisc
// (CONFIG_NET_SCH_RED is not set in the 6.18 kernel these tests ran on), so it is a tc program on
// the port's egress, ahead of the htb class that shapes it, built here
// instruction by instruction (no compiler needed). Arrivals and rate are
// the htb's, so the phantom queue is the real one but for what the htb's
// own queue drops.
type marker struct {
	state *ebpf.Map
	prog  *ebpf.Program
	link  link.Link
}

// markerState is the map's one value: the phantom queue in bytes, when it
// was last drained (ns), and the frames marked and dropped.
const (
	offQueue   = 0
	offLast    = 8
	offMarked  = 16
	offDropped = 24
	stateSize  = 32
)

// newMarker loads the program for a rate of rateBytes a second and RED's
// thresholds, and attaches it to the egress of ifindex in the calling
// thread's namespace.
func newMarker(ifindex int, rateBytes, kmin, kmax int, pmax float64) (*marker, error) {
	m := &marker{}
	var err error
	m.state, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: stateSize, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("marker state map: %w", err)
	}
	p16 := int32(pmax * 65536)
	const (
		skb, val, now, q = asm.R6, asm.R7, asm.R8, asm.R9
		tcOK, tcShot     = 0, 2
		ethPIPBE         = 0x0008 // htons(ETH_P_IP), as __sk_buff.protocol holds it
	)
	insns := asm.Instructions{
		asm.Mov.Reg(skb, asm.R1),
		// IPv4 only: the bed's RoCE frames.
		asm.LoadMem(asm.R2, skb, 16, asm.Word), // __sk_buff.protocol
		asm.JNE.Imm(asm.R2, ethPIPBE, "pass"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.state.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(val, asm.R0),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(now, asm.R0),
		// Drain: q -= min(now-last, 1s) * rate / 1s, not below 0.
		asm.LoadMem(asm.R1, val, offLast, asm.DWord),
		asm.StoreMem(val, offLast, now, asm.DWord),
		asm.Mov.Reg(asm.R2, now),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.JLE.Imm(asm.R2, 1e9, "capped"),
		asm.Mov.Imm(asm.R2, 1e9),
		asm.Mul.Imm(asm.R2, int32(rateBytes)).WithSymbol("capped"),
		asm.Div.Imm(asm.R2, 1e9),
		asm.LoadMem(q, val, offQueue, asm.DWord),
		asm.JGT.Reg(q, asm.R2, "drain"),
		asm.Mov.Imm(q, 0),
		asm.Ja.Label("arrive"),
		asm.Sub.Reg(q, asm.R2).WithSymbol("drain"),
		asm.LoadMem(asm.R1, skb, 0, asm.Word).WithSymbol("arrive"), // __sk_buff.len
		asm.Add.Reg(q, asm.R1),
		asm.StoreMem(val, offQueue, q, asm.DWord),
		// RED on the instantaneous queue.
		asm.JLE.Imm(q, int32(kmin), "pass"),
		asm.JGT.Imm(q, int32(kmax), "congested"),
		asm.Mov.Reg(now, q),
		asm.Sub.Imm(now, int32(kmin)),
		asm.Mul.Imm(now, p16),
		asm.Div.Imm(now, int32(kmax-kmin)),
		asm.FnGetPrandomU32.Call(),
		asm.And.Imm(asm.R0, 0xffff),
		asm.JGE.Reg(asm.R0, now, "pass"),
		// Congested: mark an ECN-capable frame, drop another.
		asm.StoreImm(asm.RFP, -8, 0, asm.Word).WithSymbol("congested"),
		asm.Mov.Reg(asm.R1, skb),
		asm.Mov.Imm(asm.R2, 15), // the IPv4 TOS byte after 14 of Ethernet
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 1),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.Byte),
		asm.And.Imm(asm.R1, 3),
		asm.JEq.Imm(asm.R1, 0, "drop"),
		asm.Mov.Reg(asm.R1, skb),
		asm.FnSkbEcnSetCe.Call(),
		asm.Mov.Reg(asm.R2, val),
		asm.Add.Imm(asm.R2, offMarked),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R2, asm.R1, asm.DWord),
		asm.Ja.Label("pass"),
		// A dropped frame never joins the queue.
		asm.LoadMem(asm.R1, skb, 0, asm.Word).WithSymbol("drop"),
		asm.Sub.Reg(q, asm.R1),
		asm.StoreMem(val, offQueue, q, asm.DWord),
		asm.Mov.Reg(asm.R2, val),
		asm.Add.Imm(asm.R2, offDropped),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R2, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, tcShot),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcOK).WithSymbol("pass"),
		asm.Return(),
	}
	m.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: insns})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("load the marker: %w", err)
	}
	m.link, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: m.prog, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("attach the marker to ifindex %d's egress: %w", ifindex, err)
	}
	return m, nil
}

// counts returns the frames marked and dropped so far.
func (m *marker) counts() (marked, dropped uint64, err error) {
	v := make([]byte, stateSize)
	if err := m.state.Lookup(uint32(0), &v); err != nil {
		return 0, 0, fmt.Errorf("read the marker's counts: %w", err)
	}
	return binary.NativeEndian.Uint64(v[offMarked:]), binary.NativeEndian.Uint64(v[offDropped:]), nil
}

func (m *marker) close() {
	if m.link != nil {
		m.link.Close()
	}
	if m.prog != nil {
		m.prog.Close()
	}
	if m.state != nil {
		m.state.Close()
	}
}
