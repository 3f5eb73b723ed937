package rc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// ceRecorder keeps a copy of every frame on the pipe, and can set CE on the
// frames A sends, as a congested switch would.
type ceRecorder struct {
	mu     sync.Mutex
	frames [][]byte
	dirs   []porttest.Direction
	markCE func(n int) bool // which of A's frames (0, 1, ...) get CE
	sentA  int
}

func (r *ceRecorder) filter(dir porttest.Direction, frame []byte) porttest.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	if dir == porttest.AtoB && r.markCE != nil {
		if r.markCE(r.sentA) {
			setCE(frame)
		}
		r.sentA++
	}
	r.frames = append(r.frames, append([]byte(nil), frame...))
	r.dirs = append(r.dirs, dir)
	return porttest.Pass
}

func (r *ceRecorder) snapshot() ([][]byte, []porttest.Direction) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.frames...), append([]porttest.Direction(nil), r.dirs...)
}

// setCE marks an IPv4 or IPv6 frame Congestion Experienced in place,
// fixing the IPv4 checksum (RFC 1624); the ICRC masks the field.
func setCE(f []byte) {
	l3 := rocev2.EthernetLen
	if binary.BigEndian.Uint16(f[12:]) == rocev2.EtherTypeVLAN {
		l3 += rocev2.VLANTagLen
	}
	if f[l3]>>4 == 6 {
		f[l3+1] |= 0x30 // traffic class bits 1:0 sit at bits 5:4 of byte 1
		return
	}
	old := binary.BigEndian.Uint16(f[l3:])
	f[l3+1] |= 3
	sum := uint32(^binary.BigEndian.Uint16(f[l3+10:])) + uint32(^old) + uint32(binary.BigEndian.Uint16(f[l3:]))
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	binary.BigEndian.PutUint16(f[l3+10:], ^uint16(sum))
}

// TestTrafficClass_FramesCarryItAndVerify: every frame of a connection
// (requests, READ responses, ACKs) carries the connection's DSCP and ECN,
// and its 802.1Q tag and PCP when asked, from ConnParams on one side and
// the engine's default on the other; every frame's ICRC verifies, and
// tshark decodes the same fields without a malformed flag.
func TestTrafficClass_FramesCarryItAndVerify(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v6     bool
		own    TrafficClass // A's, through ConnParams
		engine TrafficClass // B's, the engine default
	}{
		{"ipv4", false, TrafficClass{DSCP: 26, ECN: rocev2.ECT0}, TrafficClass{DSCP: 10, ECN: rocev2.ECT1}},
		{"ipv4-vlan", false, TrafficClass{DSCP: 46, ECN: rocev2.ECT0, VLAN: true, VLANID: 100, PCP: 3},
			TrafficClass{DSCP: 0, ECN: rocev2.NotECT, VLAN: true, VLANID: 0, PCP: 5}},
		{"ipv6-vlan", true, TrafficClass{DSCP: 34, ECN: rocev2.ECT1, VLAN: true, VLANID: 4094, PCP: 7},
			TrafficClass{DSCP: 63, ECN: rocev2.ECT0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &ceRecorder{}
			own := tc.own
			a, b := newPair(t, pairOptions{v6: tc.v6, traffic: tc.engine, pipe: porttest.PipeConfig{Filter: rec.filter},
				params:  func(p *ConnParams) { p.Traffic = &own },
				paramsB: func(p *ConnParams) { p.Traffic = nil }})
			const n = 5000
			src := a.buffer(n, memreg.AccessLocalWrite, false)
			dst := b.buffer(n, memreg.AccessLocalWrite|memreg.AccessRemoteWrite|memreg.AccessRemoteRead, false)
			fill(src.b, 7)
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, n)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: []SGE{src.sge(0, n)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
			waitCQ(t, a.scq, 2, 5*time.Second)
			frames, dirs := rec.snapshot()
			ops := map[rocev2.Opcode]int{}
			for i, f := range frames {
				want := tc.own
				if dirs[i] == porttest.BtoA {
					want = tc.engine
				}
				var p rocev2.Packet
				if err := rocev2.Parse(f, &p); err != nil {
					t.Fatalf("frame %d (%v): %v", i, dirs[i], err)
				}
				ops[p.BTH.Opcode]++
				if p.IP.TOS != rocev2.TOS(want.DSCP, want.ECN) || p.Eth.HasVLAN != want.VLAN ||
					(want.VLAN && p.Eth.VLANTCI != uint16(want.PCP)<<13|want.VLANID) {
					t.Fatalf("frame %d (%v) %v: TOS %#x VLAN %v TCI %#x, want %+v", i, dirs[i], p.BTH.Opcode, p.IP.TOS, p.Eth.HasVLAN, p.Eth.VLANTCI, want)
				}
			}
			if ops[rocev2.RCWriteFirst] == 0 || ops[rocev2.RCReadResponseFirst] == 0 || ops[rocev2.RCAck] == 0 {
				t.Fatalf("opcodes on the wire %v: want WRITEs, READ responses and ACKs", ops)
			}
			tsharkTrafficClass(t, frames, dirs, tc.v6, tc.own, tc.engine)
		})
	}
}

// tsharkTrafficClass decodes frames with tshark and checks the DSCP, ECN,
// PCP and VLAN it reads against each direction's class.
func tsharkTrafficClass(t *testing.T, frames [][]byte, dirs []porttest.Direction, v6 bool, a, b TrafficClass) {
	t.Helper()
	path := writePcap(t, frames)
	tshark := testenv.RequireTool(t, "tshark")
	dscp, ecn := "ip.dsfield.dscp", "ip.dsfield.ecn"
	if v6 {
		dscp, ecn = "ipv6.tclass.dscp", "ipv6.tclass.ecn"
	}
	out, err := exec.Command(tshark, "-r", path, "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "frame.protocols", "-e", "_ws.malformed", "-e", dscp, "-e", ecn, "-e", "vlan.priority", "-e", "vlan.id").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark decoded %d frames of %d", len(lines), len(frames))
	}
	for i, line := range lines {
		f := strings.Split(line, "\t")
		for len(f) < 6 {
			f = append(f, "")
		}
		want := a
		if dirs[i] == porttest.BtoA {
			want = b
		}
		wantVLAN := []string{"", ""}
		if want.VLAN {
			wantVLAN = []string{itoa(int(want.PCP)), itoa(int(want.VLANID))}
		}
		if !strings.Contains(f[0], "udp:infiniband") || f[1] != "" || f[2] != itoa(int(want.DSCP)) ||
			f[3] != itoa(int(want.ECN)) || f[4] != wantVLAN[0] || f[5] != wantVLAN[1] {
			t.Fatalf("tshark frame %d: %q, want DSCP %d ECN %d VLAN %v", i+1, f, want.DSCP, want.ECN, wantVLAN)
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func writePcap(t *testing.T, frames [][]byte) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapfile.NewWriter(&buf, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1_700_000_000, 0)
	for i, f := range frames {
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Microsecond), f); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "frames.pcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTrafficClass_OutOfRangeIsRefused(t *testing.T) {
	for _, tc := range []TrafficClass{
		{DSCP: 64},
		{ECN: rocev2.CE},
		{VLAN: true, VLANID: 4095},
		{VLAN: true, PCP: 8},
		{PCP: 3},
	} {
		a, b := newPair(t, pairOptions{noConnect: true})
		p := defaultParams(rocev2.MTU1024)
		p.Local = Endpoint{IP: a.ip, MAC: a.mac, QPN: a.qps[0].QPN()}
		p.Remote = Endpoint{IP: b.ip, MAC: b.mac, QPN: b.qps[0].QPN()}
		bad := tc
		p.Traffic = &bad
		if err := a.qps[0].Connect(p); !errors.Is(err, ErrBadConfig) {
			t.Errorf("connect with %+v: %v, want ErrBadConfig", tc, err)
		}
		if _, err := NewEngine(Config{Port: a.port, Regions: a.regions, Traffic: tc}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("engine with %+v: %v, want ErrBadConfig", tc, err)
		}
	}
}

// cnpsOnWire returns the CNPs B sent to A, checking each is the frame
// real NICs send (ROCEV2.md 1.7).
func cnpsOnWire(t *testing.T, rec *ceRecorder, destQP uint32, traffic TrafficClass) int {
	t.Helper()
	frames, dirs := rec.snapshot()
	n := 0
	for i, f := range frames {
		var p rocev2.Packet
		if err := rocev2.Parse(f, &p); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if p.BTH.Opcode != rocev2.CNP {
			continue
		}
		n++
		wantTCI := uint16(CNPPCP)<<13 | traffic.VLANID
		if dirs[i] != porttest.BtoA || p.BTH.DestQP != destQP || !p.BTH.BECN || p.BTH.FECN || p.BTH.AckReq ||
			p.BTH.PSN != 0 || p.BTH.PKey != rocev2.DefaultPKey || !bytes.Equal(p.Payload, make([]byte, 16)) ||
			p.IP.TOS != rocev2.TOS(CNPDSCP, rocev2.ECT0) || p.Eth.HasVLAN != traffic.VLAN || (traffic.VLAN && p.Eth.VLANTCI != wantTCI) {
			t.Fatalf("CNP %d is not the hardware's format: %+v %+v %+v payload %x", i, p.Eth, p.IP, p.BTH, p.Payload)
		}
	}
	return n
}

// tsharkCNP decodes the CNPs on the wire with tshark: opcode 0x81, DSCP
// 48, ECN ECT(0), PCP 6, nothing malformed (tshark does not show BECN;
// cnpsOnWire checks it).
func tsharkCNP(t *testing.T, rec *ceRecorder) {
	t.Helper()
	frames, _ := rec.snapshot()
	var cnps [][]byte
	for _, f := range frames {
		var p rocev2.Packet
		if rocev2.Parse(f, &p) == nil && p.BTH.Opcode == rocev2.CNP {
			cnps = append(cnps, f)
		}
	}
	if len(cnps) == 0 {
		t.Fatal("no CNP on the wire")
	}
	tshark := testenv.RequireTool(t, "tshark")
	out, err := exec.Command(tshark, "-r", writePcap(t, cnps), "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "_ws.malformed", "-e", "infiniband.bth.opcode", "-e", "frame.protocols", "-e", "ip.dsfield.dscp",
		"-e", "ip.dsfield.ecn", "-e", "vlan.priority").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if f := strings.Split(line, "\t"); len(f) != 6 || f[0] != "" || f[1] != "129" || !strings.Contains(f[2], "udp:infiniband") ||
			f[3] != "48" || f[4] != "2" || f[5] != "6" {
			t.Fatalf("tshark reads a CNP as %q: want opcode 129, DSCP 48, ECT(0), PCP 6", f)
		}
	}
}

// TestCNP_OnePerIntervalForCEMarkedFrames: every frame A sends arrives
// with CE; B answers with CNPs to A's QP, one per CNPInterval however
// many marked frames arrive; both engines count them; with CCOff nothing
// is sent.
func TestCNP_OnePerIntervalForCEMarkedFrames(t *testing.T) {
	tc := TrafficClass{ECN: rocev2.ECT0, VLAN: true, VLANID: 7, PCP: 2}
	run := func(t *testing.T, mode CCMode, interval time.Duration, rounds int, gap time.Duration) (*host, *host, *ceRecorder) {
		rec := &ceRecorder{markCE: func(int) bool { return true }}
		a, b := newPair(t, pairOptions{cc: CCConfig{Mode: mode, CNPInterval: interval}, traffic: tc,
			pipe: porttest.PipeConfig{Filter: rec.filter}})
		src := a.buffer(64<<10, 0, false)
		dst := b.buffer(64<<10, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
		for i := 0; i < rounds; i++ {
			if i > 0 {
				time.Sleep(gap)
			}
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 64<<10)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
			waitCQ(t, a.scq, 1, 5*time.Second)
		}
		return a, b, rec
	}
	t.Run("one-per-interval", func(t *testing.T) {
		// 5 WRITEs of 64 packets, all marked, well inside one interval.
		a, b, rec := run(t, CCNotify, time.Hour, 5, 0)
		if n := cnpsOnWire(t, rec, a.qps[0].QPN(), tc); n != 1 {
			t.Fatalf("%d CNPs for 320 marked frames in one interval, want 1", n)
		}
		if s, r := b.eng.Stats().CNPsSent, a.eng.Stats().CNPs; s != 1 || r != 1 {
			t.Fatalf("CNPs sent %d (B), received %d (A), want 1 and 1", s, r)
		}
		tsharkCNP(t, rec)
	})
	t.Run("next-interval", func(t *testing.T) {
		const interval = 20 * time.Millisecond
		start := time.Now()
		a, b, rec := run(t, CCNotify, interval, 3, interval+5*time.Millisecond)
		elapsed := time.Since(start)
		n := cnpsOnWire(t, rec, a.qps[0].QPN(), tc)
		// Each round starts an interval after the last CNP: at least one
		// CNP per round; never more than one per interval elapsed.
		if limit := 1 + int(elapsed/interval); n < 3 || n > limit {
			t.Fatalf("%d CNPs in %v at one per %v, want 3..%d", n, elapsed, interval, limit)
		}
		if s := b.eng.Stats().CNPsSent; s != uint64(n) {
			t.Fatalf("B counts %d CNPs sent, %d on the wire", s, n)
		}
	})
	t.Run("off", func(t *testing.T) {
		a, b, rec := run(t, CCOff, 0, 2, 0)
		if n := cnpsOnWire(t, rec, a.qps[0].QPN(), tc); n != 0 || b.eng.Stats().CNPsSent != 0 {
			t.Fatalf("%d CNPs with congestion control off", n)
		}
	})
}

// ccState reads q's reaction point on its engine goroutine.
func ccState(t *testing.T, q *QP) dcqcn {
	t.Helper()
	var d dcqcn
	if err := q.eng.do(func() { d = q.t.cc }); err != nil {
		t.Fatal(err)
	}
	return d
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestDCQCN_CutFollowsThePublishedFormula drives one reaction point by
// hand: each CNP sets Rt = Rc, Rc = Rc(1 - alpha/2) and alpha =
// (1-g)alpha + g; a CNP within RateReduceMonitorPeriod of a cut changes
// nothing; alpha decays by 1-g each period without CNP.
func TestDCQCN_CutFollowsThePublishedFormula(t *testing.T) {
	c, err := (&CCConfig{Mode: CCOn, LineRate: 10000}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	g := 1 - 1019.0/1024
	var d dcqcn
	now := int64(1_000_000)
	d.onCNP(&c, now)
	alpha := (1-g)*1 + g
	if !d.limited || !near(d.rc, 5000) || !near(d.rt, 10000) || !near(d.alpha, alpha) {
		t.Fatalf("first CNP: rc %v rt %v alpha %v, want 5000 10000 %v", d.rc, d.rt, d.alpha, alpha)
	}
	d.onCNP(&c, now+int64(c.RateReduceMonitorPeriod)-1)
	if !near(d.rc, 5000) {
		t.Fatalf("a CNP inside the monitor period cut again: rc %v", d.rc)
	}
	// The alpha timer passes once without a CNP: alpha decays.
	now += int64(c.DCETCPRTT)
	d.tick(&c, now) // the first CNP's period: it saw a CNP, no decay
	now += int64(c.DCETCPRTT)
	d.tick(&c, now)
	alpha *= 1019.0 / 1024
	if !near(d.alpha, alpha) {
		t.Fatalf("alpha after a quiet period %v, want %v", d.alpha, alpha)
	}
	now += int64(c.RateReduceMonitorPeriod)
	rc := d.rc
	d.onCNP(&c, now)
	wantRC := rc * (1 - alpha/2)
	alpha = (1-g)*alpha + g
	// No increase event since the first cut: the target stays
	// (CLAMP_TGT_RATE 0, TestDCQCN_TargetClampedOnlyAfterAnIncrease).
	if !near(d.rc, wantRC) || !near(d.rt, 10000) || !near(d.alpha, alpha) {
		t.Fatalf("second cut: rc %v rt %v alpha %v, want %v %v %v", d.rc, d.rt, d.alpha, wantRC, 10000.0, alpha)
	}
	// The floor and the largest single cut.
	c.RPGMinRate, c.RPGMinDecFac = 2000, 10
	now += int64(c.RateReduceMonitorPeriod)
	rc = d.rc
	d.onCNP(&c, now)
	if want := max(rc*0.9, 2000); !near(d.rc, want) {
		t.Fatalf("cut with RPGMinDecFac 10%% and a 2000 floor: rc %v, want %v", d.rc, want)
	}
}

// TestDCQCN_TargetClampedOnlyAfterAnIncrease: with the hardware's
// default (CLAMP_TGT_RATE 0, CLAMP_TGT_RATE_AFTER_TIME_INC 1) a cut sets
// Rt = Rc only if a timer or byte counter increase came since the last
// cut, so the CNPs of one episode lower Rc and recovery aims at the rate
// before it; with ClampTgtRate, every cut sets Rt = Rc (the paper's
// Algorithm 1).
func TestDCQCN_TargetClampedOnlyAfterAnIncrease(t *testing.T) {
	for _, clamp := range []bool{false, true} {
		c, err := (&CCConfig{Mode: CCOn, LineRate: 1000, RPGByteReset: 1 << 40, ClampTgtRate: clamp}).withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		var d dcqcn
		now := int64(1_000_000)
		d.onCNP(&c, now) // 1000 -> 500, Rt 1000
		for range 3 {
			now += int64(c.RateReduceMonitorPeriod)
			d.onCNP(&c, now)
		}
		wantRT := 1000.0
		if clamp {
			wantRT = d.rt // the rate before the last cut
			if d.rt >= 500 {
				t.Fatalf("ClampTgtRate: rt %v after four cuts, want the rate before the last", d.rt)
			}
		}
		if !near(d.rt, wantRT) || d.rc >= 500 {
			t.Fatalf("clamp %v: four cuts without an increase: rc %v rt %v, want rc < 500, rt %v", clamp, d.rc, d.rt, wantRT)
		}
		// One timer event (fast recovery), then a cut: now Rt = Rc.
		now += int64(c.RPGTimeReset)
		d.tick(&c, now)
		rc := d.rc
		now += int64(c.RateReduceMonitorPeriod)
		d.onCNP(&c, now)
		if !near(d.rt, rc) {
			t.Fatalf("clamp %v: cut after an increase event: rt %v, want the rate before it %v", clamp, d.rt, rc)
		}
	}
}

// TestDCQCN_RateChangeRechargesTheLastGap: the pacer's wait for the
// next frame follows the rate: a frame charged at 1 Mb/s holds the QP
// for its gap at that rate only until the rate rises, then for its gap
// at the new one (the HPCC simulator's ChangeRate).
func TestDCQCN_RateChangeRechargesTheLastGap(t *testing.T) {
	c, err := (&CCConfig{Mode: CCOn, LineRate: 1000, RPGMinRate: 1, RPGByteReset: 1 << 40}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var d dcqcn
	now := int64(1_000_000)
	d.onCNP(&c, now)
	d.setRate(1)
	const n = 4096
	d.sent(&c, n, now)
	if want := now + n*8000; d.paceAt != want {
		t.Fatalf("after a frame at 1 Mb/s the next may leave at %d, want %d", d.paceAt, want)
	}
	d.setRate(100)
	if want := now + n*80; d.paceAt != want {
		t.Fatalf("after the rate rose to 100 Mb/s the next may leave at %d, want %d", d.paceAt, want)
	}
	// A late pass is made up to one frame's gap: the next frame is
	// charged from its due time, not from when it left.
	late := d.paceAt + n*80/2
	d.sent(&c, n, late)
	if want := now + 2*n*80; d.paceAt != want {
		t.Fatalf("a frame sent half a gap late: next at %d, want %d", d.paceAt, want)
	}
}

// TestDCQCN_IncreaseStages: after a cut, timer events run fast recovery
// (F of them), then additive increase; once the byte counter has fired
// more than F times too, hyper increase; at the line rate the QP is no
// longer limited.
func TestDCQCN_IncreaseStages(t *testing.T) {
	// ClampTgtRate: the second cut sets Rt below the line rate, so that
	// additive and hyper steps show.
	c, err := (&CCConfig{Mode: CCOn, LineRate: 10000, RPGThreshold: 2, RPGByteReset: 1000, ClampTgtRate: true}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var d dcqcn
	now := int64(0)
	d.onCNP(&c, now)
	d.onCNP(&c, now+int64(c.RateReduceMonitorPeriod)) // rt 5000, rc 2500
	now += int64(c.RateReduceMonitorPeriod)
	rt, rc := d.rt, d.rc
	step := func(kind string, wantRT float64) {
		t.Helper()
		now = d.riseAt
		d.tick(&c, now)
		rc = (wantRT + rc) / 2
		if !near(d.rt, wantRT) || !near(d.rc, rc) {
			t.Fatalf("%s: rt %v rc %v, want %v %v (T %d BC %d)", kind, d.rt, d.rc, wantRT, rc, d.t, d.bc)
		}
	}
	step("fast recovery 1", rt)
	step("fast recovery 2", rt)
	rt += c.RPGAIRate
	step("additive", rt)
	// Three byte-counter events: BC 3 > F, T 3 > F.
	for i := 0; i < 3; i++ {
		d.sent(&c, int(c.RPGByteReset), now)
	}
	rt, rc = d.rt, d.rc
	rt += float64(min(d.t+1, d.bc)-c.RPGThreshold) * c.RPGHAIRate
	step("hyper", rt)
	for i := 0; i < 1000 && d.limited; i++ {
		now = d.riseAt
		d.tick(&c, now)
	}
	if d.limited || d.rc != c.LineRate {
		t.Fatalf("timers did not bring the rate back to the line rate: rc %v limited %v", d.rc, d.limited)
	}
}

// TestDCQCN_PacerHoldsTheCutRate: a CNP cuts A to half of a 200 Mb/s
// line rate, and with the increase timer and byte counter out of reach
// the WRITE that follows cannot leave faster than 100 Mb/s.
func TestDCQCN_PacerHoldsTheCutRate(t *testing.T) {
	rec := &ceRecorder{markCE: func(n int) bool { return n == 0 }}
	cc := CCConfig{Mode: CCOn, LineRate: 200, RPGTimeReset: time.Hour, RPGByteReset: 1 << 40, CNPInterval: time.Hour}
	a, b := newPair(t, pairOptions{cc: cc, pipe: porttest.PipeConfig{Filter: rec.filter}})
	src := a.buffer(256<<10, 0, false)
	dst := b.buffer(256<<10, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	write := func(n int) {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, n)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
		waitCQ(t, a.scq, 1, 10*time.Second)
	}
	write(16) // marked: B sends the CNP
	deadline := time.Now().Add(5 * time.Second)
	for !ccState(t, a.qps[0]).limited {
		if time.Now().After(deadline) {
			t.Fatalf("no rate cut: A stats %+v", a.eng.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if d := ccState(t, a.qps[0]); !near(d.rc, 100) {
		t.Fatalf("rate after one CNP %v Mb/s, want 100", d.rc)
	}
	const n = 256 << 10
	start := time.Now()
	write(n)
	elapsed := time.Since(start)
	frames := (n + 1023) / 1024
	bits := float64(8 * (n + frames*frameOverhead))
	// The pacer forgives a late pass up to one frame's gap (sent).
	minTime := time.Duration(bits/100e6*1e9) - time.Duration(max(paceBurst, int64((1024+frameOverhead)*8000/100)))
	if elapsed < minTime {
		t.Fatalf("%d bytes left in %v, faster than 100 Mb/s allows (%v)", n, elapsed, minTime)
	}
}

// TestDCQCN_TimersRaiseTheRateBack: after a CNP, the increase timer
// alone brings A back to the line rate and the pacer lets go.
func TestDCQCN_TimersRaiseTheRateBack(t *testing.T) {
	rec := &ceRecorder{markCE: func(n int) bool { return n == 0 }}
	a, b := newPair(t, pairOptions{cc: CCConfig{Mode: CCOn}, pipe: porttest.PipeConfig{Filter: rec.filter}})
	src := a.buffer(16, 0, false)
	dst := b.buffer(16, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 16)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	waitCQ(t, a.scq, 1, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	cut := false
	for {
		d := ccState(t, a.qps[0])
		if d.limited {
			cut = true
		}
		if cut && !d.limited {
			if d.rc != 10000 {
				t.Fatalf("released at %v Mb/s, want the line rate", d.rc)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cut %v, state %+v after 5s", cut, d)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if a.eng.Stats().CNPs != 1 {
		t.Fatalf("A received %d CNPs, want 1", a.eng.Stats().CNPs)
	}
}

// TestDCQCN_NotifyOnlyIgnoresCNPs: with CCNotify the engine answers CE
// but does not slow down for CNPs it receives.
func TestDCQCN_NotifyOnlyIgnoresCNPs(t *testing.T) {
	rec := &ceRecorder{markCE: func(int) bool { return true }}
	a, b := newPair(t, pairOptions{cc: CCConfig{Mode: CCNotify}, pipe: porttest.PipeConfig{Filter: rec.filter}})
	src := a.buffer(16, 0, false)
	dst := b.buffer(16, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 16)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	waitCQ(t, a.scq, 1, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for a.eng.Stats().CNPs == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no CNP arrived")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if d := ccState(t, a.qps[0]); d.limited {
		t.Fatalf("notify-only QP cut its rate: %+v", d)
	}
}

// TestCongestionControlAllocatesNothing: round trips with every frame
// marked CE, CNPs flowing back and the pacer limiting A, allocate
// nothing.
func TestCongestionControlAllocatesNothing(t *testing.T) {
	rec := &allocFreeMarker{}
	a, b := newPair(t, pairOptions{cc: CCConfig{Mode: CCOn, CNPInterval: time.Microsecond, RPGMinRate: 5000},
		pipe: porttest.PipeConfig{Filter: rec.filter}})
	src := a.buffer(3000, memreg.AccessLocalWrite, false)
	dst := b.buffer(3000, memreg.AccessLocalWrite|memreg.AccessRemoteWrite|memreg.AccessRemoteRead, false)
	write := SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 3000)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}
	read := SendWR{Op: OpRead, SGL: []SGE{src.sge(0, 3000)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}
	var e cq.Entry
	wait := func(c *cq.CQ) {
		for !c.Pop(&e) {
			runtime.Gosched()
		}
		if e.Status != ndkpi.StatusSuccess {
			t.Fatalf("completion %+v", e)
		}
	}
	round := func() {
		mustPost(t, a.qps[0].PostSend(&write))
		mustPost(t, a.qps[0].PostSend(&read))
		wait(a.scq)
		wait(a.scq)
	}
	for i := 0; i < 50; i++ {
		round()
	}
	if !ccState(t, a.qps[0]).limited && a.eng.Stats().CNPs == 0 {
		t.Fatal("congestion control never engaged")
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per round trip with CNPs and pacing, want 0", n)
	}
	if a.eng.Stats().CNPs < 2 || b.eng.Stats().CNPsSent < 2 {
		t.Fatalf("CNPs sent %d received %d: the path under test did not run", b.eng.Stats().CNPsSent, a.eng.Stats().CNPs)
	}
}

// allocFreeMarker marks every frame either side sends CE without
// keeping anything.
type allocFreeMarker struct{}

func (allocFreeMarker) filter(dir porttest.Direction, frame []byte) porttest.Verdict {
	// Untagged IPv4: the BTH opcode follows the 14+20+8 bytes of headers.
	if rocev2.Opcode(frame[rocev2.EthernetLen+rocev2.IPv4Len+rocev2.UDPLen]) != rocev2.CNP {
		setCE(frame)
	}
	return porttest.Pass
}

// slowReceiver drops the frames sent in direction dir beyond what a receiver taking one
// frame per interval with a ring of ring frames keeps: an overrun
// requester.
type slowReceiver struct {
	dir      porttest.Direction // the frames it receives
	mu       sync.Mutex
	interval time.Duration
	ring     float64
	level    float64
	last     time.Time
	dropped  int
}

func (s *slowReceiver) filter(dir porttest.Direction, frame []byte) porttest.Verdict {
	if dir != s.dir {
		return porttest.Pass
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if !s.last.IsZero() {
		s.level = max(0, s.level-float64(now.Sub(s.last))/float64(s.interval))
	}
	s.last = now
	if s.level+1 > s.ring {
		s.dropped++
		return porttest.Drop
	}
	s.level++
	return porttest.Pass
}

// TestLossPacing_ReadResponsesBackOff: an 8 MiB READ from a responder
// that can send far faster than the requester takes (slowReceiver): the
// first duplicate READ paces the responder at about the rate the
// requester took, so the READ completes in a few rounds with a fraction
// of it resent, where unpaced each loss resends the rest of the READ.
func TestLossPacing_ReadResponsesBackOff(t *testing.T) {
	slow := &slowReceiver{dir: porttest.BtoA, interval: 4 * time.Microsecond * timeScale * timeScale, ring: 512}
	a, b := newPair(t, pairOptions{pipe: porttest.PipeConfig{Filter: slow.filter, Depth: 1 << 14},
		params: func(p *ConnParams) { p.AckTimeout = 50 * time.Millisecond }})
	const n = 8 << 20
	src := b.buffer(n, memreg.AccessRemoteRead, false)
	dst := a.buffer(n, memreg.AccessLocalWrite, false)
	fill(src.b, 11)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: []SGE{dst.sge(0, n)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, 30*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpRead, nil)
	sameBytes(t, "READ", dst.b, src.b)
	frames := uint64(n / 1024)
	sent := b.eng.Stats().FramesOut
	resent := float64(sent-frames) / float64(frames)
	rounds := a.eng.Stats().Retransmits
	t.Logf("%d frames for %d, %.3f resent, %d rounds, %d dropped by the receiver", sent, frames, resent, rounds, slow.dropped)
	if slow.dropped == 0 {
		t.Fatal("the receiver never overflowed: the test did not test")
	}
	// Unpaced, this run resent 34 times the READ in 346 rounds; paced,
	// 0.1-2.6 times in 2-31 (the receiver drains in wall-clock time,
	// whether or not the engines get a core).
	if resent > 8 {
		t.Fatalf("%.3f of the READ resent in %d rounds: the responder did not back off", resent, rounds)
	}
}

// TestLossPacing_WritesBackOff: an 8 MiB WRITE to a responder that takes
// less than the requester sends: sequence NAKs and timeouts pace the
// requester, which completes the WRITE in a few rounds.
func TestLossPacing_WritesBackOff(t *testing.T) {
	slow := &slowReceiver{dir: porttest.AtoB, interval: 4 * time.Microsecond * timeScale * timeScale, ring: 256}
	a, b := newPair(t, pairOptions{pipe: porttest.PipeConfig{Filter: slow.filter, Depth: 1 << 14},
		params: func(p *ConnParams) { p.AckTimeout = 20 * time.Millisecond }})
	const n = 8 << 20
	src := a.buffer(n, 0, false)
	dst := b.buffer(n, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	fill(src.b, 12)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, n)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, 30*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, nil)
	sameBytes(t, "WRITE", dst.b, src.b)
	rounds := a.eng.Stats().Retransmits
	t.Logf("%d rounds, %d frames dropped by the receiver", rounds, slow.dropped)
	if slow.dropped == 0 {
		t.Fatal("the receiver never overflowed: the test did not test")
	}
	if d := ccState(t, a.qps[0]); d.lastCut == 0 {
		t.Fatalf("requester never paced: %+v", d)
	}
	// Unpaced, 1,700-1,800 rounds; paced, 4-15, and 76 under the race
	// detector.
	if rounds > 300 {
		t.Fatalf("%d go-back-N rounds: the requester did not back off", rounds)
	}
}

// TestLossPacing_CutAndRise: a loss halves the rate, or sets the rate the
// peer took if that is lower, at most once per lossCutGap, never below
// 1/100 of the line rate and never up; the rate a loss set rises by 1/32 of itself per
// increase event, where DCQCN's hyper increase would add more.
func TestLossPacing_CutAndRise(t *testing.T) {
	c, err := (&CCConfig{LineRate: 10000, RPGByteReset: 1000}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var d dcqcn
	now := int64(0)
	d.onLoss(&c, now, 0)
	if !d.limited || !d.loss || !near(d.rc, 5000) || !near(d.rt, 5000) {
		t.Fatalf("first loss: %+v, want rc = rt = 5000", d)
	}
	d.onLoss(&c, now+lossCutGap-1, 0)
	if !near(d.rc, 5000) {
		t.Fatalf("a second loss within lossCutGap cut again: rc %v", d.rc)
	}
	now += lossCutGap
	d.onLoss(&c, now, 1200)
	if !near(d.rc, 1200) || !near(d.rt, 1200) {
		t.Fatalf("loss with the peer seen taking 1200: rc %v rt %v", d.rc, d.rt)
	}
	for range 20 {
		now += lossCutGap
		d.onLoss(&c, now, 0)
	}
	if !near(d.rc, 100) {
		t.Fatalf("rate after many losses %v, want the floor 100", d.rc)
	}
	// A loss never raises a rate: DCQCN's cut below the floor stays.
	var e dcqcn
	e.onCNP(&c, 0)
	e.setRate(20)
	e.onLoss(&c, lossCutGap, 0)
	if !near(e.rc, 20) {
		t.Fatalf("loss at 20 Mb/s set rc %v, want 20", e.rc)
	}
	// F (1) fast recovery events, then growth by rt/32 per event, even
	// with both counters past F.
	now = d.riseAt
	d.tick(&c, now)
	for range 3 {
		d.sent(&c, int(c.RPGByteReset), now)
	}
	rt := d.rt
	now = d.riseAt
	d.tick(&c, now)
	if want := rt + max(c.RPGAIRate, rt/lossProbe); !near(d.rt, want) {
		t.Fatalf("loss-set rate rose to rt %v, want %v", d.rt, want)
	}
	// A CNP hands the QP back to DCQCN's stages.
	now += int64(c.RateReduceMonitorPeriod)
	d.onCNP(&c, now)
	if d.loss {
		t.Fatal("a CNP left the QP in loss mode")
	}
}

// TestReadGap_AskedAgainBeforeTheAckTimeout: the answer to a re-ask for
// a lost READ response is lost too (its first packet); with the gap
// still open an eighth of the ACK timeout later, the requester asks
// again, without spending a retry, instead of waiting for the timeout.
func TestReadGap_AskedAgainBeforeTheAckTimeout(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, n int) bool {
		return dir == porttest.BtoA && ((p.BTH.Opcode == rocev2.RCReadResponseMiddle && n == 1) ||
			(p.BTH.Opcode == rocev2.RCReadResponseFirst && n == 1))
	}}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = 10 * time.Second; p.RetryCount = 1 }})
	const n = 10 * 1024
	src := b.buffer(n, memreg.AccessRemoteRead, false)
	dst := a.buffer(n, memreg.AccessLocalWrite, false)
	fill(src.b, 13)
	start := time.Now()
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: []SGE{dst.sge(0, n)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpRead, nil)
	sameBytes(t, "READ", dst.b, src.b)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("READ took %v: not asked again before the 10s ACK timeout", el)
	}
	if s := a.eng.Stats(); s.Timeouts != 0 || s.Retransmits < 2 {
		t.Fatalf("after %v: %d ACK timeouts, %d go-backs; want none and at least 2 (RetryCount 1 spent only once)", time.Since(start), s.Timeouts, s.Retransmits)
	}
}

// TestReadTail_AskedAgainBeforeTheAckTimeout: a READ's last response
// is lost, so no later response shows the gap; the requester asks again
// once no response came for an eighth of the ACK timeout, instead of
// waiting the whole timeout (what stretched one READ of an rxe peer's
// ib_read_lat by ACK timeouts of 67ms each).
func TestReadTail_AskedAgainBeforeTheAckTimeout(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, n int) bool {
		return dir == porttest.BtoA && p.BTH.Opcode == rocev2.RCReadResponseLast && n == 0
	}}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = 10 * time.Second; p.RetryCount = 1 }})
	const n = 10 * 1024
	src := b.buffer(n, memreg.AccessRemoteRead, false)
	dst := a.buffer(n, memreg.AccessLocalWrite, false)
	fill(src.b, 14)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: []SGE{dst.sge(0, n)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpRead, nil)
	sameBytes(t, "READ", dst.b, src.b)
	if s := a.eng.Stats(); s.Timeouts != 0 || s.Retransmits == 0 {
		t.Fatalf("%d ACK timeouts, %d go-backs; want none and at least one", s.Timeouts, s.Retransmits)
	}
}

// TestReplayBudget_OnlyWhatIsSentAgain: a duplicate READ early in an 8
// MiB READ restarts its run, but only the responses sent before are
// replays, under the replay budget; the rest go at a first run's pace.
// Counted as replays, the whole rest of the READ crawled at replayBudget
// frames a loop.
func TestReplayBudget_OnlyWhatIsSentAgain(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, n int) bool {
		return dir == porttest.BtoA && p.BTH.Opcode == rocev2.RCReadResponseMiddle && n == 3
	}}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = 10 * time.Second }})
	const n = 8 << 20
	src := b.buffer(n, memreg.AccessRemoteRead, false)
	dst := a.buffer(n, memreg.AccessLocalWrite, false)
	fill(src.b, 15)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: []SGE{dst.sge(0, n)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, 30*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpRead, nil)
	sameBytes(t, "READ", dst.b, src.b)
	s := b.eng.Stats()
	resent := s.FramesOut - n/1024
	if s.Duplicates == 0 {
		t.Fatal("no duplicate READ: the test did not test")
	}
	// Each deferral follows replayBudget replayed frames in its loop.
	if s.ReplaysDeferred*replayBudget > resent {
		t.Fatalf("%d deferrals of replays for %d frames resent: first-time responses were held as replays", s.ReplaysDeferred, resent)
	}
}

// TestLossWindow_CutAndOpen: a loss halves the request packets in flight
// (not below minCwnd), and acknowledgements widen the window by one per
// window's worth until it reaches the engine's window, where it lifts.
func TestLossWindow_CutAndOpen(t *testing.T) {
	e := &Engine{window: 512}
	q := &QP{}
	q.t.una, q.t.nextPSN = 0xFFFF00, rocev2.PSN(0xFFFF00).Add(300) // across the PSN wrap
	e.cutWindow(q)
	if q.t.cwnd != 150 {
		t.Fatalf("300 in flight, cut to %d, want 150", q.t.cwnd)
	}
	q.t.nextPSN = q.t.una.Add(400)
	e.cutWindow(q)
	if q.t.cwnd != 75 {
		t.Fatalf("cut of a window of 150 with 400 in flight: %d, want 75", q.t.cwnd)
	}
	for range 10 {
		e.cutWindow(q)
	}
	if q.t.cwnd != minCwnd {
		t.Fatalf("after many losses the window is %d, want %d", q.t.cwnd, minCwnd)
	}
	q.t.una = q.t.una.Add(minCwnd)
	e.openWindow(q)
	if q.t.cwnd != minCwnd+1 {
		t.Fatalf("a window's worth acknowledged: %d, want %d", q.t.cwnd, minCwnd+1)
	}
	for range 10000 {
		if q.t.cwnd == 0 {
			break
		}
		q.t.una = q.t.una.Add(16)
		e.openWindow(q)
	}
	if q.t.cwnd != 0 {
		t.Fatalf("window %d never lifted", q.t.cwnd)
	}
}

// TestLossPacing_NoRiseWhileUnused: a rate a loss set does not climb while
// the QP sends nothing (a requester that lost a response waits out its
// own ACK timeout, rxe's 67 ms at perftest's timeout 14, before it asks
// again: rising through the wait, the rate would be back at the line rate
// for the replay and overrun it again). Its timers stop while unused, and
// its first frame after starts them again, from where the rate was.
func TestLossPacing_NoRiseWhileUnused(t *testing.T) {
	c, err := (&CCConfig{LineRate: 10000}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var d dcqcn
	now := int64(0)
	d.onLoss(&c, now, 200)
	if !near(d.rc, 200) {
		t.Fatalf("rate after the loss %v, want 200", d.rc)
	}
	// 67 ms of the engine's timers with nothing sent.
	next := d.tick(&c, d.riseAt)
	for end := now + int64(67*time.Millisecond); next != noDeadline && next < end; {
		next = d.tick(&c, next)
	}
	if next != noDeadline {
		t.Fatalf("an unused loss-set rate keeps its timers running (next %d)", next)
	}
	if !near(d.rc, 200) || !d.limited {
		t.Fatalf("after 67 ms unused: rc %v limited %v, want 200 and still limited", d.rc, d.limited)
	}
	// The replay's first frame starts the timers again; the rate rises
	// as the QP sends.
	now = int64(67 * time.Millisecond)
	if !d.sent(&c, 1100, now) {
		t.Fatal("the first frame after the idle spell did not restart the timers")
	}
	if d.riseAt != now+int64(c.RPGTimeReset) {
		t.Fatalf("rise timer at %d, want %d", d.riseAt, now+int64(c.RPGTimeReset))
	}
	for range 20 {
		now = d.riseAt
		d.sent(&c, 1100, now-1)
		d.tick(&c, now)
	}
	if d.rc <= 200 {
		t.Fatalf("rate %v after 20 increase events while sending: did not rise", d.rc)
	}
	// A CNP-set rate is DCQCN's: its timers run whether or not the QP
	// sends, as the hardware's do.
	var e dcqcn
	e.onCNP(&c, 0)
	if n := e.tick(&c, e.riseAt); n == noDeadline || !e.limited {
		t.Fatalf("a CNP-set rate stopped its timers unused (next %d, limited %v)", n, e.limited)
	}
}

// TestDCQCN_LateTimerPassCatchesUp: a timer pass that comes several
// periods late runs the alpha decays and increase events of every period
// it missed, as the hardware's timers would have, and leaves the QP
// where passes on time would have.
func TestDCQCN_LateTimerPassCatchesUp(t *testing.T) {
	c, err := (&CCConfig{Mode: CCOn, LineRate: 10000}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	// Cut far below the line rate, so that ten events do not reach it.
	var late, onTime dcqcn
	for _, d := range []*dcqcn{&late, &onTime} {
		d.onCNP(&c, 0)
		d.rt = 200
		d.setRate(100)
	}
	const periods = 10
	end := int64(periods) * int64(c.RPGTimeReset)
	for next := onTime.tick(&c, onTime.alphaAt); next <= end; next = onTime.tick(&c, next) {
	}
	late.tick(&c, end)
	if late.t != onTime.t || late.t != periods {
		t.Fatalf("increase events: late pass %d, on time %d, want %d", late.t, onTime.t, periods)
	}
	if !near(late.rc, onTime.rc) || !near(late.rt, onTime.rt) || !near(late.alpha, onTime.alpha) {
		t.Fatalf("late pass: rc %v rt %v alpha %v; on time: %v %v %v", late.rc, late.rt, late.alpha, onTime.rc, onTime.rt, onTime.alpha)
	}
	// The first alpha period saw the CNP; every later one decays.
	k := float64(c.DCETCPG) / 1024
	quiet := end/int64(c.DCETCPRTT) - 1
	want := (float64(c.InitialAlphaValue)/1023*(1-(1-k)) + (1 - k)) * math.Pow(k, float64(quiet))
	if !near(late.alpha, want) {
		t.Fatalf("alpha after %d quiet periods %v, want %v", quiet, late.alpha, want)
	}
	if late.riseAt != end+int64(c.RPGTimeReset) || late.alphaAt <= end || late.alphaAt > end+int64(c.DCETCPRTT) {
		t.Fatalf("next deadlines: rise %d alpha %d after a pass at %d", late.riseAt, late.alphaAt, end)
	}
}
