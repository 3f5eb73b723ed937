// Package rdma holds ndkxdp's end-to-end RDMA tests and benchmarks: two
// hosts, each a network namespace running ndkxdp (ndk.Open on its end of a
// veth pair), exchanging RoCEv2 over the pair.
//
// What it covers: every operation and flag of the QP API, message sizes
// from 0 B to 16 MiB around the path-MTU boundaries at 1024 and 4096, 64
// QPs at once, remote access violations, and one named test per rule of
// the seed pages (ndk/SEEDS.md maps them). Each test runs in both modes
// of ndkxdp, as subtests: inproc (ndk.Open in the test process) and
// daemon (each host's adapter served by ndk/daemon, the test's objects on
// a client of it from ndk.Dial; internal/ndkhost). Registered memory
// comes from Adapter.Memory, which serves both. The benchmarks run in
// process. BenchmarkRDMAvsBaseline puts
// ndkxdp's message rate, ping-pong and WRITE bandwidth beside raw AF_XDP,
// Go UDP and Go TCP from internal/tool/baseline, in one run on the same
// pair. BenchmarkCPUCost and BenchmarkBulk run each side of a transfer as
// a process of its own (the test binary started again; TestMain and
// proc_bench_test.go) and measure it with getrusage: CPU-seconds per
// million 64 B messages and per GB moved for ndkxdp, raw AF_XDP, Go UDP
// and Go TCP, an idle adapter's share of a core, and 64 KiB WRITE and
// READ at MTU 4096 and 9000 over 1 and 4 queues, with both engines'
// retransmission counters. BenchmarkReport runs all of these
// and prints them as one table, with the core count and GOMAXPROCS, and
// as JSON to the file NDKXDP_BENCH_JSON names.
//
// What it is not: unit tests (ndk/internal/rc runs the engine over an
// in-memory pipe) or interoperability with Linux rxe (test/interop).
//
// # Measured
//
// `go test ./test/rdma -run XXX -bench RDMAvsBaseline -benchtime 1x`, on
// the project's 2-core Debian 12 VM (kernel 6.18, veth MTU 9000, adaptive
// polling). Three runs on an otherwise idle machine, before the changes
// below, gave:
//
//	                          ndkxdp          reference          ratio      target
//	64 B SEND msg/s           432k-575k       AF_XDP 371k-400k   1.08-1.55  >= 0.50
//	                                          Go UDP 158k-185k   2.74-3.11  > 1
//	SEND ping-pong p50        8.1-10.5 us     AF_XDP 9.6-12.9 us 0.73-0.93  <= 2
//	                                          Go TCP 13.6-16.6us 0.50-0.77  < 1
//	64 KiB WRITE              7.0-8.6 Gbit/s  Go TCP 17.6-19.8   0.35-0.49  >= 0.70
//
// The machine is shared: with other work taking one core or more (load
// average 3-8), every ndkxdp figure drops, since the benchmark runs two
// engines and two polling consumers on two cores, while the baselines
// keep most of theirs. Runs of the old and the new code interleaved under
// the same load (load average 5-7; three runs before, five after, the
// last two of them with the receive join):
//
//	                     before                          after
//	64 B SEND msg/s      59k-116k (0.14-0.29 of AF_XDP)  62k-116k (0.12-0.38)
//	SEND ping-pong p50   11.8-12.3 us (0.87-0.90 of TCP) 11.9-12.3 us (0.87-0.91)
//	64 KiB WRITE         2.1-3.6 Gbit/s (0.18-0.36 of TCP) 1.0-4.3 Gbit/s (0.11-0.21)
//
// and the ping-pong sometimes missed its 5-second bound, before and after.
// So the loaded runs cannot show a change of 10%; the CPU cost per 4 KiB
// frame of the WRITE stream (perf record on the process, samples of each
// call tree divided by the frames sent) can:
//
//	                                           before        after
//	sender's kick (kernel work, see below)     2.0-3.9 us    the same
//	sending engine's own work, Go memory       0.3-0.75 us   the same
//	sending engine's own work, AllocBuffer     0.61 us       0.30 us (payload sent in place)
//	receiving engine (chain, ICRC, placement)  0.7-1.2 us    0.5-0.7 us (chain joined in place)
//	consumer's refused posts (queue full)      7-12% of CPU  none (no allocation)
//
// The WRITE target is out of reach on veth in copy mode. The sending
// engine spends about 87% of its time in its kick, sendto(2): copy-mode
// AF_XDP transmit (__xsk_generic_xmit: an skb per frame, the 4 KiB
// payload copied in, a page for the second fragment) and, inline in the
// same call, veth's transmit and then the peer's NAPI poll as a softirq
// (veth_poll: the skb copied again into page-pool pages because an AF_XDP
// skb has neither XDP's 256 bytes of headroom nor a linear body,
// skb_pp_cow_data; the XDP program; the redirect; the copy into the
// peer's UMEM, __xsk_rcv). That is 3 copies and about 3 us of kernel time
// per 4158-byte frame on one core, a ceiling near 300k frames/s, or about
// 10 Gbit/s, however little the engine does itself. Go TCP on the same
// pair moves 64 KiB GSO segments: 2 copies per byte and per-segment
// costs paid once per 64 KiB, about 20 Gbit/s here. Evaluated and not
// kept: a kernel TX budget of 512 descriptors per sendto
// (XDP_MAX_TX_SKB_BUDGET) instead of 32 changed nothing measurable;
// threaded NAPI on the veth moves the peer's receive path off the
// sending thread but then overflows veth's 256-entry ring, and each
// dropped tail costs a 67 ms ACK timeout. What would lift the ceiling is
// a driver with zero-copy AF_XDP, where AllocBuffer payloads already
// leave without a copy.
//
// # Measured: CPU cost, bulk, the report (2-vCPU)
//
// `NDKXDP_BENCH_JSON=r.json go test ./test/rdma -run XXX -bench Report
// -benchtime 1x`, on the same 2-vCPU VM (2 cores, GOMAXPROCS 2, kernel
// 6.18.44, adaptive polling), beside other work (load average 2.2-6.5):
// six runs, the last three with the raw reference batching as the engine
// does (16 frames a look at RX, 64 a kick). Each side of the CPU and bulk
// figures is a process of its own; a 64 B message is a 122-byte frame on
// the wire for every contender (Go TCP: 68-byte writes on one stream).
//
//	CPU-seconds per million 64 B messages    receiver     sender      msg/s
//	ndkxdp SEND (adaptive)                   0.33-0.93    0.84-1.01   653k-1.18M
//	raw AF_XDP                               0.63-1.16    0.73-1.27   554k-1.31M
//	Go UDP                                   0.65-1.82    1.66-3.45   262k-437k
//	Go TCP                                   0.24-1.28    0.47-1.80   491k-1.69M
//	ndkxdp / Go TCP                          0.48-3.6     0.52-2.0    (target <= 0.5, receiver)
//	ndkxdp / raw AF_XDP                      0.30-1.14    0.68-1.39
//	idle adapter, 4 connected QPs, 10 s      0.013-0.035% of a core (target < 1%)
//
// (CPU rows: six runs of `go test ./test/rdma -run XXX -bench CPUCost
// -benchtime 1x` on 2026-11-28, same VM, other work beside it; ratios
// within one run: receiver 0.48, 0.72, 0.85, 3.63, 1.08, 1.51 of Go
// TCP's. Go
// TCP's receiver costs 0.24 a million when its rate reaches 1.7M, many
// messages a read; ndkxdp's receiver, an engine and a consumer that
// poll, uses 0.85-0.99 of a core while the stream is fast, so its cost
// per message is about the inverse of its rate. In one run of six the
// receiving consumer, having yielded its thread, waited long enough for
// a core that its 4,096 posted receives ran out: 93 RNR NAKs, 44,762
// frames dropped out of sequence behind them, 653k msg/s (BenchmarkCPUCost
// prints each side's engine counters). Before ndk/internal/rc's
// consumer yield (its doc, "Polling": the consumers' Gosched held the
// cores the engines waited for) ndkxdp measured 5.4-7.7 on the receiver,
// 5.6-9.0 on the sender, at 62k-161k msg/s, 4.4-30x Go TCP's.)
//
// The cost table has a second ndkxdp row, "ndkxdp notify", whose
// receiving consumer blocks on its CQ's notification (Arm, CQNotifyAny)
// after verbs.Backoff's 20µs spin, as the tools' consumers do and as Go
// TCP's receiver blocks in read, where the first row's consumer polls on
// (procJob.Notify; TestCostProcs_NotifyReceiverWaits: with a sender that
// pauses 200ms every 64 SENDs, over 1s 5 waits and 0.011 CPU-s against
// the polling receiver's 0.29 for the same messages). Quiet machine,
// 2026-11-28 18:05-18:25, five runs of `go test ./test/rdma -run XXX
// -bench CPUCost -benchtime 1x`, CPU-seconds per million on the
// receiver: ndkxdp 0.75-0.80, notify 0.77-0.80, raw AF_XDP 0.61-1.20, Go
// TCP 0.94-1.36 (at 500k-656k msg/s against ndkxdp's 1.19M-1.28M), so
// 0.57-0.82 of Go TCP's (goal 0.5). Under a stream the notify receiver
// still blocks 2,232-2,343 times a second and its process uses 0.94-0.99
// of a core: a CPU profile of its window (NDKXDP_BENCH_CPUPROFILE=DIR,
// go tool pprof -top DIR/rdma-rx-send-notify.pprof) puts 38% of it in
// spin.Yielder.Yield, the engine's idle spin between receive batches
// (22%) and the consumer's Backoff spin (16%), most of that sched_yield
// and the runtime/metrics read behind YieldP; receiving, checking and
// completing the frames and reposting the receives is the other 0.47µs
// a message, about 0.35-0.5 of Go TCP's. The receiver outruns this
// sender, so it spins in the gaps the sender leaves; spinning less would
// trade the latency the spins buy (rc's doc, "Polling").
//
// The same table with NDKXDP_BENCH_POLL=progress (ndk.PollProgress in
// both processes, what PollAuto picks with more Ps than engines plus
// one), three runs interleaved with three of the default on 2026-11-29:
// the polling receiver moved 304k-505k msg/s at 1.98-2.91 CPU-s a
// million (the default's 558k-712k at 1.39-1.75), its engine napping
// about 11,000 times a window while its consumer ran the turns. The
// notify receiver, whose engine sleeps on its socket while the consumer
// blocks (ConsumerBlocks), used 0.27-0.38 of a core (the default's
// 0.87-0.92) at 196k-609k msg/s: 0.58-1.38 CPU-s a million, 0.22-1.37
// of Go TCP's in the same runs (the default's notify row 0.59-1.04),
// while its sender used 1.0-1.6 cores. A receiver that blocks and an
// engine that sleeps between batches can cost less than half of Go
// TCP's a message, but that rate varies 3x from run to run here, and
// the polling receiver loses a third of its rate, so PollAuto keeps
// adaptive polling at GOMAXPROCS 2.
//
//	64 KiB WRITE, Gbit/s           ndkxdp     raw AF_XDP  Go TCP     ndkxdp/raw  ndkxdp/TCP
//	MTU 4096, 1 queue              4.7-8.2    10.0-15.5   13.8-22.5  0.46-0.70   0.31-0.42
//	MTU 4096, 4 queues             6.5-13.9   11.4-15.7   12.8-20.5  0.53-0.93   0.47-0.79
//	MTU 9000, 1 queue              5.8-10.5   6.4-21.3    13.1-18.4  0.34-0.93   0.44-0.73
//	MTU 9000, 4 queues             7.3-19.3   12.8-18.7   13.0-21.2  0.57-1.03   0.56-0.91
//	(targets: one queue >= 0.8 of raw; 4 queues >= 1.0 of Go TCP)
//
//	CPU-seconds per GB             ndkxdp rx  ndkxdp tx   TCP rx     TCP tx
//	MTU 4096, 1 queue              0.24-0.36  1.44-1.76   0.22-0.26  0.27-0.34
//	MTU 9000, 1 queue              0.25-0.46  0.91-1.44   0.23-0.37  0.27-0.40
//	MTU 9000, 4 queues             0.22-0.38  0.47-0.60   0.21-0.35  0.21-0.35
//
// 64 KiB READ beside WRITE (B reads A's memory: the responses flow A to
// B in the frames the WRITEs take, so the raw AF_XDP and Go TCP rows are
// the same references; 128 READs posted and 16 on the wire per QP, as
// ib_read_bw runs). `go test ./test/rdma -run XXX -bench Bulk -benchtime
// 1x` and the report, under /tmp/ndkxdp-heavy.lock, on the same 2-vCPU VM
// on 2026-11-28, beside other helpers' work (load average 2.3-6.1): six
// runs. rx is the requester (its consumer polls the CQ), tx the
// responder (its engine alone answers):
//
//	64 KiB READ, Gbit/s    READ        READ/WRITE  READ/raw    READ/TCP    rx CPU-s/GB  tx CPU-s/GB
//	MTU 4096, 1 queue      6.2-9.0     1.01-1.25   0.54-0.94   0.42-0.62   1.03-1.33    0.66-0.73
//	MTU 4096, 4 queues     4.0-12.8    0.38-1.27   0.34-1.09   0.25-0.64   0.40-0.63    0.74-0.84
//	MTU 9000, 1 queue      3.9-11.1    0.64-1.23   0.24-1.42   0.34-0.79   0.79-1.13    0.46-0.66
//	MTU 9000, 4 queues     10.5-17.2   0.68-1.30   0.85-1.33   0.57-1.14   0.30-0.50    0.57-0.64
//
// READ moves what WRITE moves or more in most runs: the copy-mode
// transmit is the ceiling for both (above), and a READ's responder runs
// only its engine where a WRITE's sender also runs the consumer that
// posts (WRITE's tx 1.0-1.8 CPU-s/GB on one queue); the CPU moves to the
// requester, whose consumer polls (WRITE's receiving side 0.27-0.39).
// The bulk rows carry both engines' counters over the window: WRITE lost
// no frame in any run, READ over 4 queues went back 1-38 times a window
// (0-4 ACK timeouts), on one queue 0-2: 16 READs of 32 responses each
// are 512 frames a QP in flight that the responder sends as fast as it
// builds them, 2,048 over 4 QPs, and the requester's process also runs
// its polling consumer. The low ratios (0.38 and 0.64 READ/WRITE) came
// with load from other work on the machine, the 0.38 with 38 go-backs
// and 4 ACK timeouts (268 ms of the 1s window) while raw AF_XDP ran 11.6
// Gbit/s; beside 1, 2 or 4 busy loops of its own (MTU 4096, 4 queues,
// three runs each) READ/WRITE was 0.90-1.16 with 3-11 go-backs and no
// ACK timeout, so the collapse was not reproduced on demand and no
// engine change is founded on it. Holding READ requests by the
// requester's cut loss window (as WRITE's packets are) was tried and not
// kept: no run without uncontrolled load lost enough to show a
// difference. The raw reference itself varies 2x between runs (6.2-16.8
// Gbit/s in one configuration), so compare within a run.
//
// In process (BenchmarkRDMAvsBaseline's figures in the same runs) the 64 B
// SEND ping-pong took 10.2-14.5 us at p50 and 23-54 us at p99 (Go TCP
// 4.3-4.6 us at p50, so 2.4-3.3x; the raw AF_XDP ping-pong, whose sides
// sleep in poll(2), 4.2-74 us) and ndkxdp sent 0.70-1.0M msg/s (1.17-1.6x
// raw AF_XDP's rate). With GOMAXPROCS=16 on the 2 cores the adaptive
// engine's ping-pong is slow enough that it used to run out of its 5s
// budget mid-wait and fail ("no reply before the deadline"); it ends
// between round trips now, as the raw reference's does, and the table
// says how many it made. Two runs each (GOMAXPROCS=16 go test ./test/rdma
// -run '^$' -bench RDMAvsBaseline -benchtime 1x, a quiet machine):
// adaptive p50 76-93us, 19.9-23.4x raw AF_XDP's, p99 20ms, 1,648-2,036
// round trips of 20,000 in 5s; with NDKXDP_BENCH_POLL=progress p50
// 5.3-5.5us (1.30x raw AF_XDP's where the reference was steady, 1.23-1.27x
// Go TCP's), p99 38-45us, all 20,000.
//
// What the figures say. Between processes ndkxdp now sends about what it
// sends in process (0.65-1.18M against 0.70-1.0M msg/s), 0.50-1.5x the
// raw AF_XDP reference's rate in the same run: a reference slower than
// what it bounds is a floor, not a ceiling (it spins on a locked thread
// a side, copying nothing, and the runs differ in what else the two
// cores ran). It used to send 0.07-0.16 of it:
// each process runs an engine and a polling consumer on 2 Ps of its own,
// the two processes' four spinning threads share the 2 cores through the
// kernel's scheduler, and a consumer that spins with runtime.Gosched
// keeps its thread, so the engines that owed it completions waited for
// the kernel's slice (perf record -a -g: a third of the receiver's
// samples in goschedImpl; the engines' counters: thousands of sleeps, no
// RNR NAK or retransmission). An adaptive engine's empty poll and a post
// to a full send queue now yield the thread when no goroutine waits for a
// P. Per message the receiver still spins: 0.48-3.6x Go TCP's, whose
// receiver reads many 68-byte messages per read(2), so that its cost
// per message falls as its rate rises. Per GB,
// ndkxdp's receiving side costs about what Go TCP's does (0.67-1.46x at
// MTU 9000 on one queue: the engine places WRITEs, the kernel has copied
// each frame twice before), its sender 2.3-6.5x TCP's on one queue (a kick
// per batch and an skb per frame in copy mode, where TCP sends 64 KiB GSO
// segments). Over 4 queues ndkxdp and raw AF_XDP both gain at MTU 9000 (an
// engine or socket thread per queue, the kernel's transmit work spread
// over both cores), but with 4 queues a side on 2 cores the raw reference
// runs 8 busy-polling threads: it is then a floor rather than a ceiling,
// and one run's ndkxdp at 1.03x of it says as much about the reference as
// about ndkxdp. The spread from run to run comes from the shared machine;
// compare ratios within one run.
//
// # Measured: beside a CPU hog (2-vCPU)
//
// BenchmarkUnderHog measures the 64 B SEND rate and ping-pong of ndkxdp,
// raw AF_XDP and (ping-pong) Go TCP first on the quiet machine, then
// beside one busy-loop process per CPU, and reports each contender's
// degradation (rate quiet/loaded, RTT p50 loaded/quiet) and ndkxdp's over
// the references'. `GOMAXPROCS=N go test ./test/rdma -run XXX -bench
// UnderHog -benchtime 1x`, the default polling (ndk.PollAuto: adaptive at
// GOMAXPROCS 2, progress at 16), 2026-11-28, helpers' work beside it
// (load average 4.5-6.9), two runs each:
//
//	                    ndkxdp msg/s degr.   raw msg/s degr.   ratio       ndkxdp RTT p50 quiet/loaded   its degr.   TCP's   ratio
//	GOMAXPROCS 2        1.26-4.00            1.29-2.55         0.98-1.57   11.7-13.7 / 11.3-31.1µs       0.83-2.67   0.98    0.84-2.72
//	GOMAXPROCS 16       3.04-3.73            1.97-2.84         1.07-1.89   5.7-6.0 / 5.8-5.9µs           0.98-1.02   0.94-1.00  1.02-1.04
//
// Issue 27 asks for ndkxdp's degradation within 3x the reference's: the
// rate's is 0.98-1.89x raw AF_XDP's, the round trip's 0.84-2.72x Go TCP's.
// Against the raw AF_XDP ping-pong the ratio means nothing here: that
// reference sleeps in poll(2) between frames, and on the quiet VM every
// wake-up finds a halted vCPU (53-73µs at p50, rc's doc, "Polling"),
// while beside the hogs no vCPU halts and it measured 4.2-4.9µs, so its
// "degradation" is 0.06-0.50. Earlier runs with adaptive polling at
// GOMAXPROCS 16 (before ndk.PollAuto) kept the p50 (89µs quiet and
// loaded) but not the tail (p99 8ms quiet, 24ms loaded).
//
// # Engine scheduling
//
// Two choices in ndk/internal/rc rest on these measurements, on the same
// 2-core VM. An engine is not locked to its OS thread unless each engine
// can have a core (rc.Config.LockThread, ndk.LockAuto): with two engines
// and a consumer on two cores, a 64-byte SEND round trip over the
// in-memory pipe (rc's BenchmarkSendRoundTrip) took 110-130 us with the
// engines locked against 20-45 us unlocked, and with two engines and two
// consumers locking made the ping-pong 5x slower, since a yield from a
// locked thread is a futex hand-off between threads. An idle engine hands
// over its P on every loop: yielding every 64 idle loops gave a 20 us
// ping-pong on the veth benchmark, yielding every loop 7 us.
//
// Between two processes (test/latency: `ndkxdp perf send_lat` on a veth
// pair), engines and consumers that only yielded their P measured p50
// 5 us and p99 2,000-3,200 us, write_lat p99 2,800-3,900 us, and
// `-polling busy` showed the same tail; the tools' stats lines showed no
// retransmission or RNR NAK in those runs. Spinning a bounded time
// (rc.Config.SpinTime), yielding the thread and blocking after it
// brought p99 to 30-100 us, and with a process spinning on one core
// beside the tools p99 stays within about 2x p50 (p50 30-65 us, since
// every exchange then wakes a sleeper). Spins of 100 us and 1 ms made the
// tail worse.
//
// The tests need root (namespaces, XDP); without it they skip, and with
// NDKXDP_STRICT=1 they fail. Example:
//
//	go test ./test/rdma -run TestSizes -v
//	go test ./test/rdma -run XXX -bench RDMAvsBaseline -benchtime 1x
//	go test ./test/rdma -run XXX -bench 'CPUCost|Bulk|Report' -benchtime 1x
//	go test ./test/rdma -run XXX -bench UnderHog -benchtime 1x
package rdma
