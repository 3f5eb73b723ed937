// Package congestion is a congestion test bed for ndkxdp's ECN, CNP and
// DCQCN (ndk/internal/rc's doc, "Congestion control"): four hosts in
// network namespaces of their own around a bridge in a hub namespace
// (internal/vethpair's Star), MTU 9000 (path MTU 4096). Host 0 receives;
// hosts 1 and 2 send; host 3 runs a latency probe. The hub's port toward
// host 0 is the bottleneck: an htb class at 300 Mbit/s with a 4 MB
// byte FIFO, behind a tc program on the port's egress (marker_test.go)
// that is a switch port as HULL builds it (Alizadeh et al., "Less is
// More: Trading a little Bandwidth for Ultra-Low Latency in the Data
// Center", NSDI 2012): every frame also joins a phantom queue, a counter
// draining at γ = 0.95 of the port's rate, and ECN-capable frames are
// marked CE by RED over the phantom queue with DCQCN's published switch
// settings (Zhu et al., SIGCOMM 2015: Kmin 5 KB, Kmax 200 KB, Pmax 1%;
// every frame beyond Kmax), so senders are told to slow down while the
// real queue, draining at the full rate, is still near empty. Frames
// that are not ECN-capable do not see the phantom: RED over the real
// queue drops them (probability 0 at 256 KB, 0.2 at 1 MB, every one
// beyond), as a RED switch with ecn drops what it cannot mark. The
// program stands in for sch_red, which the kernel here (6.18) lacks with
// every other marking qdisc. TestMarker_PhantomMarksBeforeTheRealQueue
// runs frames through it (BPF_PROG_RUN) and checks both laws; with γ = 1
// and the drop law for marking too (Bottleneck), it is the RED-with-ecn
// port the bed had before.
//
// Flows are RC connections from hosts 1 and 2 to host 0, each keeping
// eight 64 KiB WRITEs in flight; the probe READs 64 bytes from host 0
// every 200µs, its request queued at the bottleneck behind the flows'
// frames. Each run opens ndkxdp on every host with one of two settings:
// DCQCN on with ECT(0) frames, or off with frames not ECN-capable (the
// default; loss-driven pacing runs in both).
//
// TestBed_MarksNotifiesCuts and TestBed_OffMarksNothing check the bed's
// mechanics in under a second each: with DCQCN the bottleneck marks, the
// receiver sends CNPs, the senders receive them and cut their rates;
// without it the bottleneck drops and nothing is marked.
// BenchmarkIncast compares the two settings in one run for 2, 4 and 8
// flows (goodput as a share of the bottleneck, Jain's fairness index
// over the flows' bytes, the probe's p99 round trip and the bytes sent
// again, as ratios of DCQCN's to no-CC's) and a single flow's share
// alone, once per bottleneck law: Incast/phantom (the bed's default,
// alpha period 550µs) and Incast/red (RED with ecn on the real queue,
// the hardware's alpha period), because neither meets every target here
// and each misses different ones (below). Run it on demand, under the
// shared lock:
//
//	flock /tmp/ndkxdp-heavy.lock go test ./test/congestion -run XXX -bench Incast -benchtime 1x
//
// One run of both, after the timer catch-up (2026-11-28, 11:14):
// phantom goodput 0.47, 0.52, 0.69, 0.90 at 1/2/4/8 flows, Jain at 8 1.00,
// p99 0.30, 0.13, 0.17, resent at 8 0.09; red goodput 0.95, 0.96, 0.94,
// 0.95, Jain at 8 0.74, p99 1.00, 2.98, 1.39, resent at 8 0.23.
//
// ndk/internal/rc's doc ("Congestion control") has the figures. DCQCN's
// increase steps are a tenth of the hardware's here
// (ndk.CongestionOptions.AIRateMbps, HAIRateMbps), scaled to the
// bottleneck, and its alpha period ten times the hardware's (AlphaTimer
// 550µs; bed_test.go's alphaTimer says why); the other timers are the
// hardware's. Each run prints, per setting, the real queue sampled every
// 5ms (median and p90, from the marker's count less what the port drained
// since) and the probe's p99 over the READs posted after the first 200ms
// (BenchmarkIncast's p99-N-settled-dcqcn/off), to tell a standing queue
// from the start's burst.
//
// Measured now (2-vCPU VM, 2026-11-28 15:04-15:08, load average 1.4-1.7,
// flock /tmp/ndkxdp-heavy.lock go test ./test/congestion -run XXX -bench
// Incast/phantom -benchtime 1x, two runs; p99 and resent as dcqcn/off):
//
//	          goodput 1 / 2 / 4 / 8 flows    Jain at 2/4/8   p99 at 2 / 4 / 8        resent at 8
//	phantom:  0.89-0.90 0.79-0.82 0.83 0.89-0.90  1.00 1.00 1.00  0.32-0.34 0.22-0.40 0.03-0.12  0.22-0.27
//	red, 1 run (-bench Incast/red):
//	          0.97 0.99 0.92 0.94             1.00 1.00 0.66  2.53 2.73 1.29            0.45
//
// (RED on the real queue marks only past 256 KB, so its probe waits
// behind that queue whatever the senders do; its fairness at 8 flows is
// not yet understood.)
//
// What held a single flow at 0.4-0.5 before (a trace of its rate, alpha,
// CNPs and both queues every millisecond): the phantom's RED marks 1%
// of frames at most below Kmax, about one mark per 11ms at this port's
// 9,155 frames a second, so marking began only at Kmax, 200 KB of
// phantom, when the real queue already held 130-200 KB (3.5-5.5ms).
// Those marked frames reached the receiver behind that queue, one CNP
// per frame for 3-9ms, 50-70 cuts, Rc from 560 to 1 Mb/s. Three things
// in the reaction point turned that into a 150-250ms climb (rc's doc,
// "Congestion control", has them and what changed): each cut also set
// Rt = Rc, so recovery aimed at 1 Mb/s and climbed by additive
// increase; a frame paced at 1 Mb/s held the QP for 33ms however fast
// the rate then rose; and the pacer forgave a late wake only 20µs, so a
// QP paced at 285 Mb/s sent 220-240 (ppoll's wakes come 50µs and more
// late). In single-flow trace runs of 2s (same machine, same law):
// 0.52-0.56 with only the pacer's recharge, 0.53-0.59 with only the
// target kept, 0.80-0.87 with both, 0.84-0.87 with the late-wake credit
// too; with the phantom's Pmax at 1 (every frame at Kmax, no step) the
// rate held at 270-300 Mb/s without a cascade, the real queue's p90 at
// 5 KB, 0.86-0.87, and in one -bench Incast/phantom run goodput 0.81,
// 0.86, 0.91, 0.86, Jain 1.00, p99 0.04, 0.09, 0.08 of off's, resent at
// 8 0.25 (not adopted: one run, and goodput still short). What a
// single flow still misses is the start (the first 150ms, from the line
// rate into a 512 KB window) and stalls of the whole process on this VM
// (no sample, no frame, for 10-15ms at a time).
//
// Measured before those changes (2-vCPU VM, 2026-11-28, the command above, beside other
// helpers' work at load average 1-7 but for two of the first row's runs,
// which the previous figures took in a quiet spell; ranges over the runs;
// p99 and resent as dcqcn/off):
//
//	                                goodput 1 / 2 / 4 / 8 flows        Jain at 8  p99 at 2 / 4 / 8           resent at 8
//	RED on the real queue, 3 runs:  0.97-0.99 0.94-0.95 0.83-0.99 0.96    0.72-0.93  1.7-2.1 1.7-3.3 1.4-4.2    0.05-0.19
//	phantom, alpha 55µs, 4 runs:    0.48-0.50 0.65-0.67 0.73-0.82 0.93-0.98  0.98-0.99  0.17-0.34 0.35-0.81 0.96-1.38  0.07-0.17
//	phantom, alpha 550µs, 3 runs:   0.36-0.46 0.52-0.62 0.69-0.81 0.88-0.92  0.98-1.00  0.08-0.23 0.34-0.38 0.15-0.24  0.07-0.20
//
// (Jain was 0.98-1.00 at 2 and 4 flows in every phantom run, and nothing
// was resent at 2 and 4.) With the phantom queue and the scaled alpha
// period, fairness, the probe's p99 at 2 and 8 flows and the resends (at
// 8 in two runs of three) meet their goals; the p99 at 4 flows misses
// narrowly (0.34-0.38). The phantom marks every flow early and in
// proportion to its frames, and the probe waits behind milliseconds of
// real queue (median 3-135 KB with DCQCN against off's 144-300 KB), not
// behind a marking threshold's.
//
// Goodput with few flows is what it cost, far more than HULL's few
// percent, and it misses its goal (0.9; a single flow 0.36-0.50; 8 flows
// 0.88-0.92). DCQCN
// cuts once per CNP, and here a mark reaches the sender milliseconds
// after the rate it reports (the engines share two vCPUs; an idle probe
// READ takes about 3ms): a single flow that climbs past γC keeps
// receiving the marks of its own backlog and is cut once per frame for
// about 10ms, about a hundred cuts, from 500 Mb/s to the 1 Mb/s floor
// (a trace of its cuts: alpha 0.04 to 0.29), then climbs back by
// additive increase (0.5 Mb/s per 300µs) for 200-300ms; with several
// flows their additive steps add up and keep the link fuller. What
// bounds that cascade gives the queue back (one run each, phantom;
// goodput at 1/2/4/8 flows; p99 at 2/4/8):
//
//	alpha 550µs, RateReduceMonitorPeriod 500µs: 0.78 0.77 0.89 0.90; 0.47 0.52 0.32 (resent at 8 0.20)
//	alpha 550µs, RateReduceMonitorPeriod 1ms:   0.84 0.87 0.95 0.94; 0.51 3.56 1.39 (Jain at 8 0.74)
//	alpha 55µs, and:
//	RateReduceMonitorPeriod 300µs:  0.70 0.74 0.85 0.94; 0.43 0.59 1.25
//	RateReduceMonitorPeriod 1ms:    0.92 0.98 0.99 0.92; 2.09 0.76 1.41 (Jain at 8 0.94, resent 0.55)
//	CNPInterval 1ms, 1, 2, 8 flows: 0.92 0.99, 0.95; 2.54, 2.55 (Jain at 8 0.70; before the timer catch-up)
//	the hardware's steps (5, 50):   0.53 0.77 0.94 0.92; 0.98 0.72 1.87 (Jain at 8 0.82)
//	γ 0.98:                         0.48 0.61 0.81 0.96; 0.25 0.89 1.22
//	phantom capped at Kmax, the real queue's RED marking too:
//	                                0.93 0.93 0.89 0.95; 1.22 0.95 1.13 (Jain at 8 0.73)
//
// (The capped phantom, a virtual buffer as in Gibbens and Kelly's
// virtual queue, forgets a burst at once, but saturated it only reports
// the 5% over γC, too little to drain a standing real queue.) Meeting
// goodput and the queue at once would need marks back at the sender
// within about one of its frames (109µs at 300 Mbit/s), or a reaction
// that cuts once per round trip instead of per CNP; neither is DCQCN on
// this machine. ndk.CongestionOptions.RateReduceMonitorPeriod is the
// knob for that trade where a deployment wants it.
//
// Every link lives in the namespaces the bed creates (198.18.0.0/24,
// 2001:2::/64, no default route, nothing joined to a real interface) and
// is deleted with them when the test ends. Tests need root and tc
// (iproute2); they skip without, and fail under NDKXDP_STRICT=1.
package congestion
