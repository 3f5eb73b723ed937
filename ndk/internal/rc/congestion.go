package rc

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Congestion control (doc.go, "Congestion control"): the traffic class a
// QP's frames carry, the notification point (CE in, CNP out), and the
// DCQCN reaction point with its pacer (CNP in, rate down, timers and the
// byte counter bring it back up).

// TrafficClass is what a QP's frames carry for the network's queues: the
// DSCP and ECN codepoint of the IP header and, with VLAN, an 802.1Q tag
// whose PCP selects the priority (PFC) class. The zero value is DSCP 0,
// not ECN-capable, untagged: what ndkxdp always sent before.
type TrafficClass struct {
	DSCP uint8      // 0-63
	ECN  rocev2.ECN // NotECT, ECT0 or ECT1; CE is the switch's to set
	VLAN bool       // tag frames with VLANID and PCP
	// VLANID is the tag's VLAN (0-4094; 0 tags the priority only, as
	// 802.1p priority tagging does).
	VLANID uint16
	PCP    uint8 // 0-7
}

// Validate reports a field out of range.
func (c TrafficClass) Validate() error {
	switch {
	case c.DSCP > 63:
		return fmt.Errorf("%w: DSCP %d outside 0-63", ErrBadConfig, c.DSCP)
	case c.ECN > rocev2.ECT0:
		return fmt.Errorf("%w: ECN %v: a sender marks Not-ECT, ECT(0) or ECT(1)", ErrBadConfig, c.ECN)
	case c.VLANID > 4094:
		return fmt.Errorf("%w: VLAN %d outside 0-4094", ErrBadConfig, c.VLANID)
	case c.PCP > 7:
		return fmt.Errorf("%w: PCP %d outside 0-7", ErrBadConfig, c.PCP)
	case !c.VLAN && (c.VLANID != 0 || c.PCP != 0):
		return fmt.Errorf("%w: VLAN ID or PCP without VLAN", ErrBadConfig)
	}
	return nil
}

// tci is the tag's TCI: PCP(15:13) DEI(12)=0 VID(11:0).
func (c TrafficClass) tci() uint16 { return uint16(c.PCP)<<13 | c.VLANID }

// CCMode says which halves of DCQCN an engine runs.
type CCMode uint8

const (
	// CCOff sends no CNP and ignores those received (counted only).
	CCOff CCMode = iota
	// CCNotify is the notification point alone: CE-marked frames are
	// answered with CNPs, received CNPs are counted and ignored.
	CCNotify
	// CCOn runs both: CNPs out for CE in, and the reaction point's rate
	// control for CNPs in.
	CCOn
)

func (m CCMode) String() string {
	switch m {
	case CCOff:
		return "off"
	case CCNotify:
		return "notify"
	case CCOn:
		return "on"
	}
	return fmt.Sprintf("CCMode(%d)", uint8(m))
}

// CNP marking (DCQCN.md CNP_DSCP, CNP_802P_PRIO): CNPs travel in their
// own class so that they are not queued behind the congestion they report.
const (
	CNPDSCP = 48
	CNPPCP  = 6
)

// CCConfig is an engine's congestion control. The zero value is CCOff
// with the defaults below for when a mode turns it on. Rates are in Mb/s.
// Names follow the hardware's (mlxconfig), defaults the ConnectX values
// in DCQCN.md except where doc.go says why not.
type CCConfig struct {
	Mode CCMode
	// CNPInterval is MIN_TIME_BETWEEN_CNPS: at most one CNP per QP per
	// interval (default 50µs, the paper's N; ConnectX's 2µs is a rate
	// a software engine would spend its time on).
	CNPInterval time.Duration
	// LineRate is the rate a QP starts at and returns to (RPG_MAX_RATE 0
	// means line rate; the engine cannot ask the NIC, so it is given:
	// default 10,000).
	LineRate float64
	// RPGTimeReset is the rate-increase timer (default 300µs).
	RPGTimeReset time.Duration
	// RPGByteReset is the byte counter, in bytes (default 32767 units of
	// 64 B, about 2 MiB: doc.go).
	RPGByteReset uint64
	// RPGThreshold is F: increase events in fast recovery after a cut
	// before the additive stage (default 1).
	RPGThreshold int
	// RPGAIRate and RPGHAIRate are the additive and hyper increase steps
	// (defaults 5 and 50).
	RPGAIRate, RPGHAIRate float64
	// RPGMinDecFac bounds a single cut, in percent of the rate (default
	// 50: never below half).
	RPGMinDecFac int
	// RPGMinRate is the floor (default 1).
	RPGMinRate float64
	// RateToSetOnFirstCNP is the rate the first CNP sets (0: cut from
	// LineRate as any other CNP).
	RateToSetOnFirstCNP float64
	// DCETCPG is 1-g in 1024ths, the weight alpha keeps per update
	// (default 1019: g = 5/1024, near the paper's 1/256).
	DCETCPG int
	// DCETCPRTT is the alpha update period (default 55µs, the paper's:
	// the hardware's unit for its 1 is not public).
	DCETCPRTT time.Duration
	// RateReduceMonitorPeriod is the least time between two cuts
	// (default 4µs).
	RateReduceMonitorPeriod time.Duration
	// InitialAlphaValue is alpha on the first CNP, in 1023rds (default
	// 1023: 1.0).
	InitialAlphaValue int
	// ClampTgtRate is CLAMP_TGT_RATE: every cut sets the target rate to
	// the current rate first (Rt = Rc), as the paper's Algorithm 1 does.
	// Off (the hardware's default, 0), a cut does so only if an increase
	// event, of the timer or the byte counter, came since the last cut
	// (CLAMP_TGT_RATE_AFTER_TIME_INC, whose default 1 this engine
	// keeps): the CNPs of one congestion episode lower Rc, not the rate
	// recovery returns to.
	ClampTgtRate bool
}

func (c *CCConfig) withDefaults() (CCConfig, error) {
	d := *c
	if d.Mode > CCOn {
		return d, fmt.Errorf("%w: congestion mode %v", ErrBadConfig, d.Mode)
	}
	def := func(v *time.Duration, x time.Duration) {
		if *v == 0 {
			*v = x
		}
	}
	deff := func(v *float64, x float64) {
		if *v == 0 {
			*v = x
		}
	}
	defi := func(v *int, x int) {
		if *v == 0 {
			*v = x
		}
	}
	def(&d.CNPInterval, 50*time.Microsecond)
	def(&d.RPGTimeReset, 300*time.Microsecond)
	def(&d.DCETCPRTT, 55*time.Microsecond)
	def(&d.RateReduceMonitorPeriod, 4*time.Microsecond)
	deff(&d.LineRate, 10000)
	deff(&d.RPGAIRate, 5)
	deff(&d.RPGHAIRate, 50)
	deff(&d.RPGMinRate, 1)
	defi(&d.RPGThreshold, 1)
	defi(&d.RPGMinDecFac, 50)
	defi(&d.DCETCPG, 1019)
	defi(&d.InitialAlphaValue, 1023)
	if d.RPGByteReset == 0 {
		d.RPGByteReset = 32767 * 64
	}
	switch {
	case d.CNPInterval < 0 || d.RPGTimeReset < 0 || d.DCETCPRTT < 0 || d.RateReduceMonitorPeriod < 0:
		return d, fmt.Errorf("%w: negative congestion control period", ErrBadConfig)
	case d.LineRate < 0 || d.RPGMinRate < 0 || d.RPGMinRate > d.LineRate || d.RPGAIRate < 0 || d.RPGHAIRate < 0:
		return d, fmt.Errorf("%w: congestion control rates (line %v, min %v Mb/s)", ErrBadConfig, d.LineRate, d.RPGMinRate)
	case d.RateToSetOnFirstCNP < 0 || d.RateToSetOnFirstCNP > d.LineRate:
		return d, fmt.Errorf("%w: rate on first CNP %v Mb/s", ErrBadConfig, d.RateToSetOnFirstCNP)
	case d.RPGMinDecFac < 0 || d.RPGMinDecFac > 100 || d.DCETCPG < 0 || d.DCETCPG > 1024 ||
		d.InitialAlphaValue < 0 || d.InitialAlphaValue > 1023 || d.RPGThreshold < 0:
		return d, fmt.Errorf("%w: congestion control factors out of range", ErrBadConfig)
	}
	return d, nil
}

// dcqcn is one QP's reaction point (the paper's Algorithm 1, the
// hardware's parameters) and its pacer. It limits the QP only between a
// CNP or a loss and the rate's return to the line rate; outside that, a sender pays
// one comparison per packet. Times are the engine's clock in ns.
type dcqcn struct {
	limited bool
	rc, rt  float64 // current and target rate, Mb/s
	alpha   float64
	// t and bc count the timer's and the byte counter's increase events
	// since the last cut (the paper's T and BC); bytes what was sent
	// since the byte counter last fired.
	t, bc int
	bytes uint64
	// loss marks a rate set by a loss (onLoss) rather than a CNP: it
	// rises by 1/lossProbe of itself per event, not by hyper increase,
	// since the peer that lost frames takes about this rate and no more.
	loss    bool
	lastCut int64
	// busy says the QP sent since the last increase event; a loss-set
	// rate rises only while the QP uses it. idle marks a loss-set rate
	// whose timers stopped for want of traffic (tick); the next frame
	// starts them again (sent).
	busy, idle bool
	cnp        bool // a CNP arrived in this alpha period
	alphaAt    int64
	riseAt     int64
	// nsPerByte is the pacer's cost of a byte at rc; paceAt is when the
	// next frame may leave (the pacer keeps no timer per packet: a sender
	// that finds paceAt ahead stops and arms the QP's one deadline).
	nsPerByte float64
	paceAt    int64
	paceWait  bool
	// lastLen is the wire length of the last frame charged (0: none
	// since the QP was limited), whose gap setRate charges again.
	lastLen int
	// Notification point: when this QP last sent a CNP.
	cnpAt   int64
	cnpSent bool
}

// paceBurst is how far the pacer lets a QP run ahead of its rate after
// an idle spell, in ns: a loop's worth of frames leaves together instead
// of one per loop.
const paceBurst = int64(20 * time.Microsecond)

// setRate sets Rc. The last frame's gap, which paceAt holds as charged
// at the old rate, is charged again at the new one: a frame sent at the
// 1 Mb/s floor (33ms for 4 KiB) would otherwise hold the QP for that
// long after recovery had raised the rate a hundredfold (test/congestion
// measured it: the pacer, not DCQCN, halved a flow's goodput). The HPCC
// simulator's rate limiter does the same on every rate change (rdma-hw.cc
// ChangeRate: nextAvail += txTime(lastPkt, new) - txTime(lastPkt, old)).
func (d *dcqcn) setRate(r float64) {
	nsPerByte := 8000 / r
	if d.lastLen != 0 {
		d.paceAt += int64(float64(d.lastLen) * (nsPerByte - d.nsPerByte))
	}
	d.rc = r
	d.nsPerByte = nsPerByte
}

// onCNP is the reaction to a CNP at now; it reports whether it cut the
// rate.
func (d *dcqcn) onCNP(c *CCConfig, now int64) bool {
	d.cnp = true
	d.loss = false
	if !d.limited {
		d.limited = true
		d.lastLen = 0 // frames sent unpaced left no gap behind
		d.alpha = float64(c.InitialAlphaValue) / 1023
		d.rt = c.LineRate
		d.setRate(c.LineRate)
		d.alphaAt = now + int64(c.DCETCPRTT)
		d.paceAt = now
		if c.RateToSetOnFirstCNP != 0 {
			d.rt = d.rc
			d.setRate(c.RateToSetOnFirstCNP)
			d.cut(c, now, false)
			return true
		}
	} else if now-d.lastCut < int64(c.RateReduceMonitorPeriod) {
		return false
	}
	d.cut(c, now, true)
	return true
}

// cut is the paper's rate decrease: Rt = Rc, Rc = Rc(1 - alpha/2),
// alpha = (1-g)alpha + g; the increase stages start over.
func (d *dcqcn) cut(c *CCConfig, now int64, reduce bool) {
	if reduce {
		if c.ClampTgtRate || d.t > 0 || d.bc > 0 {
			d.rt = d.rc
		}
		f := max(1-d.alpha/2, 1-float64(c.RPGMinDecFac)/100)
		d.setRate(max(d.rc*f, c.RPGMinRate))
		g := 1 - float64(c.DCETCPG)/1024
		d.alpha = (1-g)*d.alpha + g
	}
	d.lastCut = now
	d.t, d.bc, d.bytes = 0, 0, 0
	d.riseAt = now + int64(c.RPGTimeReset)
}

// Loss-driven pacing: a peer that loses what a QP sends it (a duplicate
// READ asking for responses again, a sequence NAK, an ACK timeout) is
// being sent more than it takes. Halving the rate at each such loss, at
// most once per lossCutGap, and raising it slowly finds the rate the
// peer takes, as TCP's congestion window does.
const lossCutGap = int64(100 * time.Microsecond)

// retryRearm is the least time a READ's go-back waits for its gap to
// close before it asks again (completer.go reask).
const retryRearm = int64(2 * time.Millisecond)

// lossProbe sets how fast a loss-set rate rises: by 1/lossProbe of
// itself per increase event, about 10% a millisecond at the default
// RPG_TIME_RESET.
const lossProbe = 32

// onLoss is the reaction to a loss at now: Rc = Rt = Rc/2, or the rate
// the peer was seen to take (took, Mb/s; 0: unknown) if lower, but not
// below the line rate's 1/100, and never above Rc.
func (d *dcqcn) onLoss(c *CCConfig, now int64, took float64) bool {
	if !d.limited {
		d.limited = true
		d.lastLen = 0 // frames sent unpaced left no gap behind
		d.alpha = float64(c.InitialAlphaValue) / 1023
		d.setRate(c.LineRate)
		d.alphaAt = now + int64(c.DCETCPRTT)
		d.paceAt = now
	} else if now-d.lastCut < lossCutGap {
		return false
	}
	r := d.rc / 2
	if took > 0 {
		r = min(r, took)
	}
	// Never below 1/100 of the line rate, where repeated losses would
	// stretch one READ to seconds (1 MiB at 1 Mb/s: 8s), but never above
	// Rc either: where DCQCN had cut below that floor, a loss raised the
	// rate to it (8 flows at 100 Mb/s each overfilled test/congestion's
	// 300 Mbit/s bottleneck).
	d.setRate(max(r, c.RPGMinRate, min(d.rc, c.LineRate/100)))
	d.rt = d.rc
	d.loss = true
	d.busy, d.idle = false, false
	d.cut(c, now, false)
	return true
}

// overrun paces q after a loss the peer reported (onLoss).
func (e *Engine) overrun(q *QP, took float64) {
	d := &q.t.cc
	if d.onLoss(&e.cc, e.now, took) {
		atomic.AddUint64(&e.c.LossCuts, 1)
	}
	e.setTimer(q, min(d.alphaAt, d.riseAt))
}

// increase is one increase event (timer or byte counter), counted in T
// or BC before the call: fast recovery for the first F events after the
// cut (max(T, BC) <= F), hyper increase once both counters passed F,
// additive in between (a loss-set rate: by 1/lossProbe); each moves Rc
// halfway to Rt.
// It reports whether the QP is back at the line rate (no longer limited).
func (d *dcqcn) increase(c *CCConfig) bool {
	f := c.RPGThreshold
	switch {
	case max(d.t, d.bc) <= f:
	case d.loss:
		d.rt += max(c.RPGAIRate, d.rt/lossProbe)
	case min(d.t, d.bc) > f:
		d.rt += float64(min(d.t, d.bc)-f) * c.RPGHAIRate
	default:
		d.rt += c.RPGAIRate
	}
	d.rt = min(d.rt, c.LineRate)
	d.setRate(min((d.rt+d.rc)/2, c.LineRate))
	if d.rc >= c.LineRate*0.999 {
		d.limited = false // a QP waiting for the pacer is released by ccTimers
		d.setRate(c.LineRate)
		return true
	}
	return false
}

// sent charges n bytes to the pacer and the byte counter. It reports
// whether it started the timers of an idle loss-set rate again, which the
// caller then arms.
func (d *dcqcn) sent(c *CCConfig, n int, now int64) (woke bool) {
	if !d.limited {
		return false
	}
	d.busy = true
	if d.idle {
		d.idle, woke = false, true
		d.alphaAt = now + int64(c.DCETCPRTT)
		d.riseAt = now + int64(c.RPGTimeReset)
	}
	gap := int64(float64(n) * d.nsPerByte)
	if credit := max(paceBurst, gap); d.paceAt < now-credit {
		d.paceAt = now - credit
	}
	d.paceAt += gap
	d.lastLen = n
	d.bytes += uint64(n)
	if d.bytes >= c.RPGByteReset {
		d.bytes = 0
		d.bc++
		d.increase(c)
	}
	return woke
}

// maxCatchUp bounds the increase events one late timer pass runs.
const maxCatchUp = 64

// tick runs the alpha and rate-increase timers due at now and returns the
// QP's next congestion deadline (noDeadline: none).
func (d *dcqcn) tick(c *CCConfig, now int64) int64 {
	if !d.limited {
		return noDeadline
	}
	// A timer pass can come late (the engine's loop shares its core):
	// the periods it missed still count, as the hardware's timers would
	// have fired in them. Without this, on the 2-vCPU VM alpha decayed
	// once per 380µs instead of per 55µs (test/congestion's doc) and
	// rates recovered as much slower.
	if now >= d.alphaAt {
		p := int64(c.DCETCPRTT)
		n := (now-d.alphaAt)/p + 1
		quiet := n
		if d.cnp {
			quiet-- // the period that saw a CNP does not decay
		}
		if quiet > 0 {
			d.alpha *= math.Pow(float64(c.DCETCPG)/1024, float64(quiet))
		}
		d.cnp = false
		d.alphaAt += n * p
	}
	if now >= d.riseAt {
		if d.loss && !d.busy {
			// Nothing sent at the rate a loss set since the last event:
			// the peer has not shown it takes more (a requester that lost
			// a response waits out its own timeout before it asks again,
			// tens of milliseconds in which the rate would climb back to
			// the line rate and overrun it once more, as TCP's window
			// does not grow while unused, RFC 7661). The timers stop
			// until the QP sends again.
			d.idle = true
			return noDeadline
		}
		d.busy = false
		p := int64(c.RPGTimeReset)
		n := min((now-d.riseAt)/p+1, maxCatchUp)
		d.riseAt = now + p - (now-d.riseAt)%p
		for range n {
			d.t++
			if d.increase(c) {
				return noDeadline
			}
		}
	}
	return min(d.alphaAt, d.riseAt)
}

// paced reports whether q's pacer holds its next frame at e.now; if so it
// arms the QP's deadline for when it may go.
func (e *Engine) paced(q *QP) bool {
	d := &q.t.cc
	if !d.limited || d.paceAt <= e.now {
		return false
	}
	d.paceWait = true
	e.setTimer(q, d.paceAt)
	return true
}

// charge accounts a data frame of n payload bytes that q sent.
func (e *Engine) charge(q *QP, n int) {
	if d := &q.t.cc; d.limited && d.sent(&e.cc, n+frameOverhead, e.now) {
		e.setTimer(q, min(d.alphaAt, d.riseAt))
	}
}

// frameOverhead is what a data frame carries beside its payload on the
// wire (Ethernet, IPv4, UDP, BTH, ICRC, FCS), for the pacer.
const frameOverhead = rocev2.EthernetLen + rocev2.IPv4Len + rocev2.UDPLen + rocev2.BTHLen + rocev2.ICRCLen + 4

// ccTimers runs q's congestion deadlines due at e.now (timers) and returns
// its next one.
func (e *Engine) ccTimers(q *QP) int64 {
	d := &q.t.cc
	next := d.tick(&e.cc, e.now)
	if d.paceWait {
		if e.now >= d.paceAt || !d.limited {
			d.paceWait = false
			e.schedule(q)
		} else {
			next = min(next, d.paceAt)
		}
	}
	return next
}

// receivedCNP handles a CNP for q (the reaction point).
func (e *Engine) receivedCNP(q *QP) {
	if e.cc.Mode != CCOn {
		return
	}
	d := &q.t.cc
	if d.onCNP(&e.cc, e.now) {
		atomic.AddUint64(&e.c.RateCuts, 1)
	}
	e.setTimer(q, min(d.alphaAt, d.riseAt))
}

// congestionExperienced answers a CE-marked frame for q with a CNP to the
// peer's QP, at most one per CNPInterval (the notification point).
func (e *Engine) congestionExperienced(q *QP) {
	d := &q.t.cc
	if d.cnpSent && e.now-d.cnpAt < int64(e.cc.CNPInterval) {
		return
	}
	if e.sendCNP(q) == nil {
		d.cnpSent, d.cnpAt = true, e.now
		atomic.AddUint64(&e.c.CNPsSent, 1)
	}
}

// cnpPayload is the CNP's 16 reserved bytes.
var cnpPayload [rocev2.CNPLen]byte

// sendCNP sends the CNP the ConnectX-4 Lx sends (ROCEV2.md 1.7): opcode
// 0x81, BECN set, PSN 0, no AckReq, DSCP 48 with ECT(0), PCP 6 when the
// QP's frames are tagged.
func (e *Engine) sendCNP(q *QP) error {
	h := &q.t.hdr
	tos, tci := h.IP.TOS, h.Eth.VLANTCI
	h.BTH.Opcode = rocev2.CNP
	h.BTH.PSN, h.BTH.SE, h.BTH.AckReq, h.BTH.BECN = 0, false, false, true
	h.IP.TOS = rocev2.TOS(CNPDSCP, rocev2.ECT0)
	h.Eth.VLANTCI = tci&0x1FFF | CNPPCP<<13
	err := e.emit(q, cnpPayload[:])
	h.IP.TOS, h.Eth.VLANTCI, h.BTH.BECN = tos, tci, false
	return err
}
