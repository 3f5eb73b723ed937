// Package congestion is a congestion test bed for ndkxdp's ECN, CNP and
// DCQCN (ndk/internal/rc's doc, "Congestion control"): four hosts in
// network namespaces of their own around a bridge in a hub namespace
// (internal/vethpair's Star), MTU 9000 (path MTU 4096). Host 0 receives;
// hosts 1 and 2 send; host 3 runs a latency probe. The hub's port toward
// host 0 is the bottleneck: an htb class at 300 Mbit/s with a 4.5 MB
// byte FIFO, behind a tc program on the port's egress (marker_test.go)
// that is a switch port as HULL builds it (Alizadeh et al., "Less is
// More: Trading a little Bandwidth for Ultra-Low Latency in the Data
// Center", NSDI 2012): every frame also joins a phantom queue, a counter
// draining at γ = 0.98 of the port's rate, and ECN-capable frames are
// marked CE by RED over the phantom queue with DCQCN's published switch
// thresholds (Zhu et al., SIGCOMM 2015: Kmin 5 KB, Kmax 200 KB; every
// frame beyond Kmax) and Pmax scaled to this port's frame rate (1, where
// the paper's 40 Gbit/s port has 1%: bed_test.go's pmax says why), so
// senders are told to slow down while the real queue, draining at the
// full rate, is still near empty. Frames that are not ECN-capable do not
// see the phantom: RED over the real queue drops them (probability 0 at
// 256 KB, 0.2 at 1 MB, every one beyond), as a RED switch with ecn drops
// what it cannot mark. The program stands in for sch_red, which the
// kernel here (6.18) lacks with every other marking qdisc.
// TestMarker_PhantomMarksBeforeTheRealQueue runs frames through it
// (BPF_PROG_RUN) and checks both laws; with γ = 1 and the drop law for
// marking too, it is a RED-with-ecn port on the real queue.
//
// Flows are RC connections from hosts 1 and 2 to host 0, each keeping
// eight 64 KiB WRITEs in flight, with rdma_cm's local ACK timeout for
// RoCE (537ms; the queue holds 120ms: bed_test.go's flowAckTimeout);
// the probe READs 64 bytes from host 0 every 200µs, its request queued
// at the bottleneck behind the flows' frames. Each run opens ndkxdp on
// every host with one of two settings: DCQCN on with ECT(0) frames, or
// off with frames not ECN-capable (the default; loss-driven pacing runs
// in both). DCQCN's increase steps are a tenth of the hardware's
// (ndk.CongestionOptions.AIRateMbps, HAIRateMbps) and its alpha period
// ten times the hardware's (AlphaTimer 550µs), scaled to the bottleneck
// (bed_test.go's aiRate and alphaTimer say why); the other timers are
// the hardware's.
//
// TestBed_MarksNotifiesCuts and TestBed_OffMarksNothing check the bed's
// mechanics in under a second each: with DCQCN the bottleneck marks, the
// receiver sends CNPs, the senders receive them and cut their rates;
// without it the bottleneck drops and nothing is marked.
// BenchmarkIncast compares the two settings in one run for 2, 4 and 8
// flows (goodput as a share of the bottleneck, Jain's fairness index
// over the flows' bytes, the probe's p99 round trip and the bytes sent
// again, as ratios of DCQCN's to no-CC's) and a single flow's share
// alone, once per bottleneck law: Incast/phantom (the bed's) and
// Incast/red (RED with ecn on the real queue, the hardware's alpha
// period), the second to show what the phantom buys. Each run prints,
// per setting, the real queue sampled every 5ms (median and p90, from
// the marker's count less what the port drained since) and the probe's
// p99 over the READs posted after the first 200ms. Run it on demand,
// under the shared lock (about 17s a law):
//
//	flock /tmp/ndkxdp-heavy.lock go test ./test/congestion -run XXX -bench Incast -benchtime 1x
//
// Measured (2-vCPU VM, 2026-11-28, machine otherwise quiet; ranges over
// the runs; p99 and resent as dcqcn/off; goals: goodput >= 0.9, Jain >=
// 0.95, p99 <= 0.3, resent <= 0.1):
//
//	                 goodput 1 / 2 / 4 / 8 flows   Jain 2/4/8   p99 at 2 / 4 / 8      resent at 8
//	phantom, 8 runs: 0.84-0.94 0.91-0.94 0.93-0.95 0.95-0.96  1.00 1.00 1.00  0.02-0.05 0.02-0.13 0.06-0.29  0
//	red, 2 runs:     0.98 0.98 0.93-0.97 0.99            1.00 1.00 1.00  2.5-3.0 2.5-3.0 1.4-3.3     0
//
// (Commands: the one above, and -bench Incast/phantom for six of the
// phantom's runs. Nothing was resent with DCQCN in any run; no-CC
// resent 10-15 MB at 8 flows. The single flow met its goal in six runs
// of eight; after the first 200ms it made 0.89-0.94 in three, so what it
// misses is not only the start: its sawtooth under the phantom's 0.98,
// and the VM's stalls of the whole process. With γ 0.99, three runs:
// 0.90-0.93 alone, the rest alike, the real queue's median a little
// longer; not taken on three runs.)
//
// The phantom marks every flow early and in proportion to its frames, so
// the real queue stays short (median 2-106 KB against no-CC's 190-295 KB;
// its p90 at 8 flows is the start's burst, 1-4 MB) and the probe waits behind
// little of it; what goodput it costs is γ's 2% and DCQCN's sawtooth
// below it. RED on the real queue marks only past 256 KB, so its probe
// waits behind that queue whatever the senders do.
//
// What a flow still loses is the start: at the line rate into its 512
// KB window, then cut once per marked frame of that window as the marks
// come back behind it (a trace of the rates every 20ms: 4 flows from
// 4-10 Gb/s to 1-10 Mb/s within 100ms, the queue empty from 100 to
// 160ms, then 55-115 Mb/s each, the queue at 5-50 KB). The bed's
// settings and what they fix, each measured with three runs or more of
// -bench Incast/phantom against the same bed without it: Pmax 1% marked
// one frame in 11ms below Kmax, so marking began at Kmax with the real
// queue at 130-200 KB and a flow was cut about a hundred times in one
// episode (goodput at 2 and 4 flows 0.77-0.87); γ 0.95 capped a single
// flow at 0.93 of the port, and with the sawtooth it made 0.85-0.91; a 4
// MB queue dropped the end of 8 flows' first windows (4.28 MB) and a 67ms
// ACK timeout fired behind the start's 110ms of queue, and go-back-N
// resent the windows into it (resent at 8 flows 0.10-0.45 of off's).
//
// Bounding the cascade instead, with RateReduceMonitorPeriod near the
// round trip (ndk.CongestionOptions), kept goodput (0.84-0.99 with 500µs
// to 1ms, on the bed before these settings) but gave the queue back: the
// probe's p99 0.5-3.6 of off's, Jain's index at 8 flows down to 0.74.
//
// Every link lives in the namespaces the bed creates (198.18.0.0/24,
// 2001:2::/64, no default route, nothing joined to a real interface) and
// is deleted with them when the test ends. Tests need root and tc
// (iproute2); they skip without, and fail under NDKXDP_STRICT=1.
package congestion
