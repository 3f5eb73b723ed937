// Package rc is ndkxdp's reliable-connection transport engine: the RoCEv2
// RC requester, responder and completer for the QPs of one device queue,
// run by one goroutine over one port.Port (an AF_XDP socket, or
// porttest's in-memory pipe in tests). Package ndk wraps it in the public
// QP.
//
// It is not the wire codec (rocev2 parses and builds frames), the frame
// I/O (port), connection management (cm), or the API's object model
// (ndk); it knows QPs, PSNs, WQEs and memory tokens.
//
// # Roles and opcodes
//
// As in Linux rxe (rxe_req.c, rxe_resp.c, rxe_comp.c), a QP has three
// roles on its engine: the requester turns posted WQEs into requests, the
// responder executes the peer's requests and answers them, and the
// completer takes those answers and retires the requester's WQEs. Every
// CQE is pushed by completeSend or completeRecv. Who handles each opcode
// (ROCEV2.md 1.4; "completed by" is the function that retires the WQE):
//
//	opcode                          sent by           received by              completed by
//	SEND_FIRST/MIDDLE/LAST/ONLY     sendRequest       recvSend                 ackThrough (send),
//	                                                                           recvSend (receive)
//	SEND_LAST/ONLY_WITH_INVALIDATE  sendRequest       recvSend (invalidates)   as SEND
//	SEND_LAST/ONLY_WITH_IMMEDIATE   sendRequest       recvSend (the receive    as SEND
//	                                                  carries the ImmDt)
//	RDMA_WRITE_FIRST/MIDDLE/        sendRequest       recvWrite                ackThrough (no receive
//	LAST/ONLY                                                                  CQE)
//	RDMA_WRITE_LAST/ONLY_WITH_      sendRequest       recvWrite (takes a       ackThrough (write),
//	IMMEDIATE                                         receive: takeReceive)    recvWrite (receive)
//	RDMA_READ_REQUEST               sendRequest       recvRead, duplicateRead  readResponse
//	RDMA_READ_RESPONSE_FIRST/       sendReadResponse  readResponse             readResponse (on the
//	MIDDLE/LAST/ONLY                                                           last one)
//	COMPARE_SWAP, FETCH_ADD         sendRequest       recvAtomic,              atomicAck
//	                                                  duplicateAtomic
//	ATOMIC_ACKNOWLEDGE              sendAtomicAck     atomicAck                atomicAck
//	ACKNOWLEDGE (ACK, NAK,          sendCtl           completer                ackThrough; failHead
//	RNR NAK)                                                                   (fatal NAK)
//	FLUSH, ATOMIC_WRITE             -                 responder: fatalNAK      -
//	                                                  (invalid request)
//	UD SEND_ONLY to QP1 (CM)        TransmitGSI       dispatch -> Config.GSI   (package cm)
//	UD SEND_ONLY[_WITH_IMMEDIATE]   udRequest         udReceive                udRequest (send, as it
//	to a UD QP (ud.go)                                                         leaves), udReceive
//	UC SEND_* and RDMA_WRITE_*      sendRequest       ucResponder              ucSent (send, as its
//	(uc.go)                                                                    last packet leaves),
//	                                                                           ucResponder (receive)
//
// sendRequest is the requester's (called from request); recv*,
// duplicate*, fatalNAK and the senders of answers (sendReadResponse,
// sendAtomicAck, sendCtl) are the responder's; completer, ackThrough,
// readResponse, atomicAck, retry, rnrWait and goBack are the completer's.
// Requests end in error through fail (the oldest outstanding request,
// with its error status: a fatal NAK, retries spent, a response of the
// wrong length), recvSend (a receive the message does not fit, or whose
// token cannot be invalidated) and cancelAll (everything else,
// STATUS_CANCELLED).
//
// # Files
//
//	engine.go     Engine and Config; the loop: receive and dispatch, ready QPs,
//	              control calls, transmit, timers, sleep
//	qp.go         QP, QPConfig, the WQEs; CreateQP, Connect, Close
//	post.go       PostSend, PostReceive, Flush: the consumer's side
//	local.go      FastRegister, Bind and Invalidate work requests
//	srq.go        SRQ, the shared receive queue
//	ring.go       workRing, a QP's send or receive queue
//	transport.go  qpTransport, a QP's engine-owned transport state, and the
//	              responder resources
//	requester.go  the requester: request, sendRequest
//	responder.go  the responder: requests in, READ responses, atomic
//	              acknowledgements, ACKs and NAKs out
//	completer.go  the completer: ACKs, NAKs and responses in; retries
//	complete.go   CQEs, the error state, cancelling, the drain signal
//	frame.go      emit (headers, payload, ICRC onto the port), span, scatter
//	forward.go    frames handed between the engines of one adapter
//	gsi.go        QP1's datagrams for connection management
//	ud.go         UD QPs (an ndkxdp extension): ActivateUD, datagrams out and
//	              in, the GRH, Q_Key checks
//	uc.go         UC QPs (an ndkxdp extension): unacknowledged SENDs and
//	              WRITEs, the responder's drop rules
//	stats.go      the engine's live counters (declared in ndk/internal/counters) and Stats
//	progress.go   consumer-driven progress (PollProgress): the turn token,
//	              Progress, ConsumerBlocks
//	congestion.go traffic class, ECN notification point, DCQCN reaction
//	              point and pacer
//	violations.go access violations per source: the bounded table of token
//	              buckets that limits key guessing (ViolationSources)
//	types.go      SGE, Op, ConnParams, State and the other shared types (op
//	              flags, statuses and completion types are ndkpi's)
//	unsafe.go     the package's unsafe conversions
//	hostile_test.go  the hostile-peer suite: its table lists each crafted frame and the verdict
//	scale_test.go    idle QPs cost the timer pass nothing
//
// # Threads and posting
//
// Each Engine owns its QPs' transport state; nothing on the packet path is
// locked. Consumers post into per-QP work rings (single producer, the
// engine consumes in place: a WQE stays in its slot until acknowledged so
// go-back-N rebuilds frames from it). Posting validates the request
// (state, SGE count, inline size, local tokens through memreg.CheckLocal),
// copies the SGEs (or the inline bytes) into the slot, and, unless
// OpFlagDefer, queues the QP on the engine's MPSC ready ring and rings the
// port's doorbell, which costs no syscall while the engine is awake. An
// inline failure rings for earlier deferred posts first (NDKPI.md §8).
// Posting and completing allocate nothing (TestPostAndCompleteAllocateNothing).
//
// The loop: receive a batch of at most 16 frames, so that a flood in the
// receive ring holds back the loop's answers by no more than that
// (rocev2.Parse; bad frames, unknown QPs, other transports and frames not
// addressed to their QP's local IP and MAC, or for QP1 to the adapter's,
// are dropped and counted), dispatch requests to the responder and ACKs,
// NAKs, READ responses and atomic acknowledgements to the completer; handle the
// frames other engines of the adapter forwarded (forward.go: a frame for
// another engine's QP, or QP1's datagram on an engine without the GSI
// hook, is copied into a preallocated buffer and handed over); take the
// ready QPs; run control calls; send the queued MADs, then each active
// QP's responses before its requests (at most 64 of each per QP per loop,
// and answers to duplicates at most 4 a loop for all QPs together, so
// that a peer replaying requests cannot stretch the loop its neighbours
// wait on: ndk BenchmarkFloodRTT);
// fire timers; flush the port. Timers are per-QP deadlines on a clock read
// once per loop and checked when the earliest one is due, not one timer
// per packet. After every loop, busy or idle, the engine yields its P when
// a goroutine waits for one, so that a flooded engine, busy every loop,
// does not hold it from the goroutines its other QPs' traffic needs (ndk
// BenchmarkFloodRatio).
//
// # Polling
//
// Idle, a PollAdaptive engine spins and then sleeps in Port.Wait, ppoll(2)
// on the XSK socket and the doorbell's eventfd (the port's doorbell
// protocol loses no wake-up). While it spins it yields its P and, through
// internal/spin, its thread (sched_yield), every time: a spinner that
// keeps its thread holds the core for a whole slice against the others
// (internal/spin's Yield). Beside a thread that keeps the core (yields
// that come back a slice later, one after another: spin.Yielder.Quiet)
// it sleeps at once instead of spinning. PollBusy never sleeps and only
// yields its P: a core per engine. Consumers do the same on their side
// (the tools' verbs.Backoff and the demo's cqWait: spin 20µs, then block
// on the CQ's notification and QP.ArmPeerWrites).
//
// The spin adapts as cpuidle's haltpoll window does (Engine.adaptSpin):
// it doubles, up to 200µs, after a sleep that work ended within 200µs,
// and halves, down to SpinTime (20µs), after a longer one. A READ
// responder waits a whole round trip between requests, longer than 20µs,
// and slept before nearly every one; with the adaptive spin, perf
// read_lat -n 5000 through a daemon on each end (two runs each) went from
// p50 25.7 and 17.6µs, p99 104 and 126µs, to p50 16.3 and 13.4µs, p99 103
// and 73µs, the daemons' engines sleeping 20 times instead of about
// 1,000. Beside a process spinning on one core it made no difference, and
// eight client processes through one daemon move as many messages as
// before (test/daemon BenchmarkClientProcesses). Fixed longer spins
// measured no better than 20µs: perf -spin 50µs and 100µs (engines and
// the test) gave idle p99/p50 of 2.9-5.7 and 3.3-5.2 against 2.3-5.3,
// and 3.0-4.5 and 3.1-5.1 against 1.9-4.6 beside a computing process
// (BenchmarkLatency -perf-args "-spin D", two runs each).
//
// Why: with engines and consumers of two processes polling on two cores,
// each thread with work waits for another's kernel time slice, because a
// goroutine that only yields its P keeps its thread; the latency tail is
// then scheduling alone, not transport recovery, and busy polling does
// not help (four spinning threads on two cores). Spinning a bounded time,
// yielding the thread, and blocking after it keeps the tail near the
// median; longer spins hold a core that another process's thread is
// waiting for. test/rdma's doc has the measurements. Measure with:
//
//	go test -run x -bench Latency -benchtime 1x ./test/latency/
//
// which reports p50, p99, p99.9 and the ratios p99/p50 and p99/TCP's p99
// per test, idle and contended, in one run.
//
// Yielding the P costs nothing only when a goroutine waits for one.
// runtime.Gosched also wakes a thread for an idle P (wakep), which finds
// nothing to run and sleeps again: two futex calls and a thread on
// another core for every yield. A daemon at GOMAXPROCS 2 made 13,487
// futex calls for 5,000 send_lat round trips (strace -f -c; -k shows
// goschedImpl -> wakep -> startm), against 47 at GOMAXPROCS 1, and its
// clients' p50 was 35-39µs against 11-17µs. The engine and the consumers
// yield through spin.Yielder.YieldP, which yields only when the runtime
// counts a runnable goroutine (runtime/metrics, about 50ns, no
// allocation): a goroutine readied while a P is idle runs there anyway.
// With it, the daemon's send_lat p50 was 12-21µs and in process 8-9.4µs
// against 9.6-10.4µs (three runs each of perf send_lat -n 5000 between
// two namespaces).
//
// What a wake-up costs sets the tail. On the 2-vCPU VM these figures come
// from, an idle vCPU halts (cpuidle haltpoll, guest_halt_poll_ns=0 on the
// kernel's command line), and a thread woken onto it waits for the
// hypervisor: a round trip of two blocking eventfds between two processes
// takes 34-42µs at p50 when they sit on different CPUs and 4.6-5.3µs on
// one (internal/wake BenchmarkWakeAcrossCPUs: go test -run '^$' -bench
// WakeAcrossCPUs -benchtime 1x ./internal/wake). A round trip whose spin
// runs out before its answer arrives pays one or two such wake-ups (the
// sleeping engine's, the blocked consumer's), which is the p99 of 40-70µs
// beside a p50 of 10-12µs in process. Through the daemon each end has one
// more process to wake (engine, then client), and a round trip that
// misses its spin pays up to two more. perf sched record over a send_lat
// through daemons (perf script's sched_waking and sched_switch, by waker
// and wakee) shows where the wake-ups come from; the relay's arms and
// receives that woke the daemon's engine for nothing are gone (ndk/daemon's
// doc), and what is left is one wake-up per process the answer crosses.
//
// Below the wake-ups is the machine's own floor. A thread that spins on
// one CPU reading the clock, and nothing else, loses about 3% of its time
// on this VM to interruptions it cannot see: per CPU and second, about
// 570 gaps of 20-80µs (timer ticks, 250 Hz, and exits to the hypervisor,
// which a nested guest pays dearly for). A round trip of 20µs across both
// CPUs meets one every few dozen round trips. test/latency's floor
// measures it in the same run as the latency tests: two processes
// ping-pong over a shared cache line, computing per message so that the
// median matches the test's, with no system call, network or sleep. Its
// p99/p50 at a 9µs median was 2.2-4.8 (go test -run '^$' -bench Latency
// -benchtime 1x ./test/latency reports it as *-floor-p99/p50, and the
// test's p99 against it as *-p99/floor-p99, 0.6-1.7 in process).
//
// The Go runtime's sysmon thread is a third source of interruptions. It
// sleeps 20µs between rounds (about 100µs with the kernel's timer slack)
// for 50 rounds after it last took a P from a goroutine in a system call
// or was woken by one entering a call, and backs off to 10ms after. A
// spinner whose sched_yield and TX kicks went through unix.Syscall was in
// a system call nearly every time sysmon looked. A READ responder alone
// on its P never finds a goroutine to yield to, so after 10ms without a
// scheduling sysmon took its P (retake in runtime/proc.go), every 10ms,
// and its wake-ups, about 10,000 a second, cost each round trip they
// interrupted 20-30µs: 12% of read_lat's round trips met one (p50 41µs
// against 15µs for the others, under perf record). Those calls never
// block, and are raw system calls now, which the runtime does not see
// (internal/spin TestYieldIsNoSystemCallToTheRuntime); sysmon then slept
// 28 times in 74ms of read_lat instead of 426 in 87ms, and read_lat's
// p99/p50 fell from 4.6 to 2.9 in process (medians of eight alternating
// runs of perf read_lat -n 5000); through a daemon on each end send_lat
// and write_lat went from 4.8 and 4.0 to 3.0 and 3.0, read_lat from 4.7
// to 4.0 (four runs each, a noisy hour). Record it with:
//
//	perf record -a -e syscalls:sys_enter_sendto,syscalls:sys_enter_nanosleep,sched:sched_switch,sched:sched_wakeup,irq_vectors:local_timer_entry
//
// during a run: sysmon is the thread of each process that a local timer
// interrupt wakes and that sleeps again in nanosleep. An engine's sleep in
// ppoll is a real system call (it blocks, and its P must be free for
// others), which sets sysmon back; a ping-pong's engine sleeps rarely, its
// adaptive spin covering the round trip.
//
// AF_XDP preferred busy polling (-busy-poll 50us: SO_BUSY_POLL with
// SO_PREFER_BUSY_POLL and a budget of 64 on each socket) changed nothing
// on the veth pair, whose frames reach the socket in the sender's own
// softirq: perf send_lat -n 3000 in process, three runs each, p50 9.9-13.3
// against 8.3-9.2µs and p99 34-46 against 29-47µs. On a NIC with
// interrupt deferral (napi_defer_hard_irqs, gro_flush_timeout) it moves
// the receive work into the engine's own polling; the option stays for
// that.
//
// A process that ping-pongs does best on one P per engine. With a P to
// spare, the consumer is a second polling thread, and each goroutine the
// engine readies makes the runtime wake a thread for the idle P on the
// other CPU (wakep), at the wake-up cost above; on one P the engine hands
// the consumer its completion on its own thread. perf's latency tests run
// so (cmd/ndkxdp latencyProcs): send_lat p99 72.7 -> 25.5µs and write_lat
// 77.1 -> 29.4µs in process, medians of six runs.
//
// Where a round trip goes at a high GOMAXPROCS. A Go service runs at
// GOMAXPROCS = the core count, and a library cannot ask for one P. At
// GOMAXPROCS 16 on the 2-vCPU VM, test/rdma's in-process ping-pong (two
// adapters over a veth pair; on each an engine goroutine and a consumer
// that polls its CQ and calls runtime.Gosched when it is empty) measured
// p50 78, 80 and 96µs, p99 8.9, 9.1 and 48ms, and in three of six runs
// no reply at all within its 5s deadline (20,100 round trips), where
// GOMAXPROCS 2 gave p50 10.6-13.1µs, p99 13-67µs and GOMAXPROCS 1 7.0-7.2
// and 9.3-11.7µs. perf sched record -a over 1.5s of the GOMAXPROCS 16
// ping-pong, perf sched timehist: the test process ran on 18 threads,
// which were switched in 18,966 times and waited, runnable, 2,064ms in
// all for a CPU (637 waits over 1ms, the longest 12.8ms): more than one
// of its threads was always waiting for one of the two CPUs. The four
// polling goroutines each have a P and so a thread, and more threads are
// woken for idle Ps (wakep); a consumer's Gosched returns at once when no
// goroutine waits for its P, so to the kernel its thread never stops,
// and each hop of the round trip (engine receives, consumer sees the
// completion, consumer posts, engine transmits) waits until the kernel's
// time slice gives the thread that must take it a CPU. At GOMAXPROCS 2
// the same four goroutines share two threads and Gosched switches
// between them in the runtime, in nanoseconds. The engine's adaptive
// spin, its thread yields and busy polling cannot help: the hand-off
// between threads is the cost. Commands (2-vCPU VM, under flock
// /tmp/ndkxdp-heavy.lock):
//
//	GOMAXPROCS=16 NDKXDP_BENCH_POLL=adaptive go test -run '^$' -bench RDMAvsBaseline -benchtime 1x ./test/rdma
//	perf sched record -a -- sleep 1.5   # during its ping-pong
//	perf sched timehist -i perf.data    # per thread: wait time, sch delay, run time
//
// Consumer-driven progress (PollProgress, progress.go; ndk.PollProgress)
// takes the hand-off out of the hot path: a consumer whose CQ poll finds
// nothing, or whose post finds the engine asleep or behind, runs the
// engine's turn on its own thread under the turn token (a
// CompareAndSwap), so a frame in, its completion and the answer out need
// no other thread, and the engine goroutine naps on its doorbell while
// consumers poll. The same benchmark with NDKXDP_BENCH_POLL=progress, in
// the same hour, runs of one setting each (the raw AF_XDP reference,
// which blocks in poll(2) between frames, measured 3.7-72µs at p50 in
// the same runs and is no steady yardstick here; Go TCP 4.2-4.4µs):
//
//	                        RTT p50 µs      RTT p99 µs          64 B SEND msg/s  runs
//	GOMAXPROCS 16 adaptive  78-96           8,853-48,029        62k-131k         6, 3 no reply
//	GOMAXPROCS 16 progress  5.4-6.1         24-47 (105, 248,    130k-672k        19, 1 no reply
//	                                        5,918 once each)
//	GOMAXPROCS 2  adaptive  10.6-13.1       13-67               555k-1.02M       5
//	GOMAXPROCS 2  progress  6.0-6.2         38-127              368k-559k        4
//	GOMAXPROCS 1  adaptive  7.0-7.2         9.3-11.7            979k-1.02M       3
//	beside a spinning process on each CPU (timeout 120 taskset -c N sh -c 'while :; do :; done'):
//	GOMAXPROCS 16 adaptive  56              25,216              83k              1 (in 1 more the UDP reference failed)
//	GOMAXPROCS 16 progress  5.9-6.0         33-43               61k-82k          2
//	GOMAXPROCS 2  adaptive  30-55           3,960-3,994         187k-243k        2
//	GOMAXPROCS 2  progress  6.0-6.2         38-47               176k-239k        2
//	GOMAXPROCS 1  adaptive  29.7            3,434               128k             2, 1 no reply
//
// (progress rows: this branch's last two builds, which differ only in
// when a post runs the turn; "no reply": none within the deadline.) With
// progress the round trip no longer depends on GOMAXPROCS or on the
// processes beside it: its p50 is
// 5.4-6.2µs in every row, 1.3-1.5x Go TCP's on veth, and its p99 stays
// under 50µs beside the spinners, where adaptive polling's is 3-4ms. The
// p99 that remains is 5-7x the p50, where the machine's floor alone
// allows 2.2-4.8x (above), and the napping engines' wake-ups, a thousand
// a second each, are the likely rest (a 10ms nap measured no better).
// One P keeps the best idle tail, but only while nothing else runs, and
// a process cannot keep its Ps for one library.
//
// The engine's nap parks it in the runtime (port.XSK.WaitDoorbell: a
// channel and a timer), not in ppoll. A goroutine blocked in a system
// call keeps its P until sysmon takes it back (20µs to 10ms), and with
// fewer Ps than polling goroutines the consumer that was to run the next
// turn waited for it: progress at GOMAXPROCS 1 measured p50 1.2ms in one
// run of two and 64 KiB WRITE at 0.36-0.46 Gbit/s, at GOMAXPROCS 2 p99
// 0.45-1.2ms. With the parked nap, the same benchmark (NDKXDP_BENCH_POLL=
// progress, two runs each, interleaved with the ppoll nap, 2026-11-29):
//
//	               ppoll nap                             parked nap
//	               p50/p99 µs     msg/s      WRITE Gb/s    p50/p99 µs   msg/s      WRITE Gb/s
//	GOMAXPROCS 1   13.2-1,224/    208k-267k  0.36-0.46     13.0-13.3/   320k-362k  8.4-8.9
//	               24-1,353                                15-24
//	GOMAXPROCS 2   11.4-14.0/     154k-274k  3.4-8.1       8.2-9.6/     462k-606k  8.5-9.0
//	               450-1,164                               16-25
//	GOMAXPROCS 16  10.3-10.5/     245k-286k  5.8-6.5       8.7-10.3/    278k-311k  7.4-7.7
//	               49-60                                   28-41
//
// (Go TCP's p50 in the same runs was 10.0-10.4µs at GOMAXPROCS 2.) The
// runtime's timers are coarser than ppoll's, a timeout under 1ms ending
// after about 1.1ms in an otherwise idle process (the netpoller waits in
// whole milliseconds); a nap is taken only while consumers drive the
// engine and fire its timers in their turns, and drivenNap already lets
// a timer be that late once they stop. What progress
// costs: a poster without an engine awake to batch for it runs a kick, a
// system call that on veth carries the peer's receive too, per post, so
// the 64 B stream is slower than adaptive's at GOMAXPROCS 2 (where the
// engine, on the other CPU, batches), and 64 KiB WRITE bandwidth fell
// from 16.0-16.7 to 11.8-12.7 Gbit/s there (at GOMAXPROCS 16 it is
// 3.6-12.9 against adaptive polling's 3.3-5.6); a post runs the turn
// itself only when the engine sleeps, or lags (the QP is still queued
// from an earlier post), so that an engine that keeps up batches.
//
// In process, at GOMAXPROCS 2 with one queue, progress with the parked
// nap now beats adaptive polling on every figure of that benchmark
// (p50 8.7-8.8 against 15.8-18.7µs, p99 18-20 against 49-54µs, the same
// rate and WRITE bandwidth, two runs each); between processes it does
// not: BenchmarkCPUCost's 64 B stream, each side a process at GOMAXPROCS
// 2, moved 385k-548k msg/s with progress against 592k-752k adaptive
// (three runs interleaved), each post's kick paid alone. PollAuto's rule
// below is kept for that.
//
// So ndk's default, ndk.PollAuto, picks progress where GOMAXPROCS
// exceeds the adapter's engines plus one (where ndk.LockAuto gives each
// engine a thread of its own, and every hop between an engine and a
// consumer is a hand-off between threads) and adaptive polling below
// that, where goroutines hand off on one thread and an engine batching
// beside the consumers streams faster. A 16-core host at its default
// GOMAXPROCS gets progress; the 2-vCPU VM, at GOMAXPROCS 2, keeps
// adaptive. At GOMAXPROCS 16 on the 2-vCPU VM, ten runs of progress in a
// row (2026-11-28, the command above with NDKXDP_BENCH_POLL=progress)
// measured p50 5.5-5.8µs, p99 26-39µs, 544k-664k msg/s, 64 KiB WRITE
// 6.0-15.2 Gbit/s, every run complete, against adaptive's 83-96µs, 7.8-8.0ms,
// 113k-130k msg/s and 4.8-4.9 Gbit/s in the same hour. One of nineteen
// progress runs of an earlier build got no reply within the deadline;
// none of the 36 since (26 in the last stop, these ten) has, and the
// cause was not found.
//
// Pinning the engines' threads (Config.CPUs; ndk.Options.EngineCPUs,
// the tools' -engine-cpus) is for a host with cores to spare: on the
// 2-vCPU VM it only took cores from the consumers. The same benchmark,
// two runs each (NDKXDP_BENCH_ENGINE_CPUS="A;B": host A's engines on A,
// B's on B), RTT p50 and 64 B msg/s:
//
//	GOMAXPROCS 2   adaptive, unpinned      14.4-14.7µs     946k-961k
//	GOMAXPROCS 2   adaptive, engines 0;1   167-173µs       55k-73k
//	GOMAXPROCS 2   adaptive, engines 1;1   180µs           205k (one run)
//	GOMAXPROCS 16  adaptive, unpinned      83-96µs         113k-130k
//	GOMAXPROCS 16  adaptive, engines 0;1   981-1,406µs     107k-128k
//	GOMAXPROCS 16  progress, engines 0;1   5.7µs           558k (one run)
//	GOMAXPROCS 16  progress, unpinned      5.6µs           574k (one run)
//
// A pinned engine cannot move off a CPU where a consumer spins, and a
// locked thread's yield is a futex hand-off; with progress the engine
// naps while the consumers run its turns, so where it sits matters
// little. Where each engine can have a core near its queue's interrupt,
// pinning keeps it there; that host has not measured it. A consumer that finds the token
// held does not wait, so a holder whose thread the kernel preempts
// mid-turn (the engine goroutine, woken from a nap) stalls the round
// trip for a slice (the likely cause of the one 5.9ms p99 above).
//
// A stream of posts under progress pays one kick (sendto) per post: each
// post finds the engine napping and runs a turn, whose flush sends the
// one frame it built, where an awake engine takes what was posted
// meanwhile in one kick. A sender that batches with OpFlagDefer (the
// next non-deferred post rings for all) gets the kicks back: the same
// benchmark's 64 B SEND stream at GOMAXPROCS 16, 15 of 16 posts deferred,
// moved 0.81-0.83 of raw AF_XDP's rate against 0.54-0.65 without (two
// runs each, interleaved, 2-vCPU VM, 2026-11-28). Coalescing kicks in the
// engine itself would need a trailing kick that no later call of the
// consumer's can promise without waking the engine, the hand-off that
// progress exists to avoid; it is not done. The cost is copy mode's: a
// zero-copy socket bound with need_wakeup (afxdp.Socket.Kick) makes the
// system call only when the driver asks for one, and a driver whose NAPI
// is still sending does not, so there a stream of posts under progress
// pays for the frames, not for a kick each.
//
// Between processes, perf's latency tests at GOMAXPROCS 16 (each side
// one engine and a consumer that spins 20µs on its CQ, then arms it and
// blocks: ConsumerBlocks wakes the napping engine to watch its socket),
// two runs each, p50/p99 in µs (send_lat and write_lat half round trips,
// read_lat whole ones):
//
//	                      send_lat             write_lat            read_lat
//	idle      adaptive    5.3-5.7 / 26-27      6.4-6.7 / 27-29      8.6-9.5 / 30-83
//	          progress    4.3-5.1 / 29         4.6-4.7 / 29-31      5.0-5.3 / 22-46
//	beside a  adaptive    9.7-10.9 / 31-41     10.1-11.7 / 32-46    10.1-11.4 / 44-55
//	spinner   progress    4.2-4.4 / 26-29      4.8-5.6 / 27-31      6.7 / 37-47
//
// with Go TCP's tcp_lat at 3.6-4.7 / 14-72 in the same runs:
//
//	GOMAXPROCS=16 go test -run '^$' -bench 'BenchmarkLatency$' -benchtime 1x ./test/latency -args -perf-args "-polling progress"
//
// Through the daemon the consumer is another process: it cannot run the
// daemon's engine's turn, whose state lives in the daemon, and the
// daemon's relay runs on the engine goroutine only (Poller). The daemon
// refuses -polling progress; its clients' round trip still crosses the
// daemon's threads.
//
// The 64 B SEND stream between processes (test/rdma BenchmarkCPUCost: a
// sender and a receiver, each a process with an adaptive engine and a
// consumer at GOMAXPROCS 2, on the 2-vCPU VM, 2026-11-28) moved 62k-161k
// msg/s at 5.4-7.7 CPU-seconds per million messages on the receiver,
// where one process moves 0.7-1.0M. The engines' counters over the runs
// showed no recovery at all (no RNR NAK, retransmission, ACK timeout or
// full transmit ring; one ACK per 30-56 frames) but wake-ups: the
// receiver's engine slept 1,437-6,081 times and the sender's 2,165-40,377
// times in about 1.5s. perf record -a -g over both processes: a third of
// the receiver's samples in runtime.goschedImpl (its lock2/unlock2,
// wakep, findRunnable), the engine's receive path 1.5%; the sender's in
// wakep, casgstatus and the failed posts' error path. Both consumers
// spin with runtime.Gosched between polls (the receiver on its empty CQ,
// the sender on its full send queue), Go's idiom, which yields the P but
// not the thread: with each process's two goroutines on two Ps, four
// polling threads on two cores, the engines that owe a consumer its
// completions (its own, and the peer process's, which sends the ACKs
// that free the sender's queue) wait for the kernel's time slice on a
// core the consumer holds, and a Gosched while the engine sleeps wakes a
// thread for its idle P each time. A consumer that yields its thread
// (internal/spin's Yielder, in the benchmark's loops as an experiment)
// moved 1.02-1.06M msg/s at 0.84-0.92 on the receiver; PollProgress with
// the Gosched consumers 0.68-0.71M at 1.4; PollBusy changed nothing
// (0.17M at 5.5-5.7): the threads, not the engine's sleeps, were the
// cost.
//
// So an adaptive engine's empty poll (Progress, which every in-process
// CQ poll that finds nothing calls) yields the caller's thread, every
// fourth time (consumerIdle), and so does a post that finds the send
// queue full (sendQueueFull), unless a goroutine waits for a P: then the
// caller's Gosched hands this process's engines the P, and a thread
// yield costs a ping-pong a system call for nothing (a yield on every
// empty poll took the in-process ping-pong's p50 from 10.8-13.3µs to
// 13.7-15.5µs; with the check, five alternating pairs measured
// 11.6-15.9µs against 13.8-14.3µs before, 2.50-3.55x Go TCP's p50 in the
// same run against 2.92-3.24x, medians 3.16 and 3.19: no change told
// apart). Over the same benchmark after
// it, six runs: 0.65-1.18M msg/s at 0.33-0.93 CPU-seconds per million
// on the receiver (0.48-3.6x Go TCP's in the same run, whose receiver's
// cost falls to 0.24 as its rate rises), the engines sleeping 3-5,786
// times a 1s window, the idle adapter at 0.013-0.035% of a core. No
// retransmission and, in five runs, no RNR NAK; in one the receiving
// consumer, its thread yielded, waited for a core until its 4,096
// receives ran out (93 RNR NAKs, 44,762 frames dropped out of sequence
// behind them, 653k msg/s).
// At GOMAXPROCS 16 in process (same VM, load average 4-5 from other
// work) the ping-pong's p50 stayed 5.5-7.0µs, and its p99 was 7-11ms in
// four runs of five against three of five before (47-71µs in the
// others): not told apart in so few runs. Stopping the consumers' yields
// for spin.Quiet after one that came back slow, as the engine does its
// own, brought the stream between processes back to 73k msg/s at 8.4
// CPU-seconds a million: there a slow yield is the peer's engine at
// work, which is what the yield is for.
// The receiver's engine and consumer still poll a core between them
// when the stream is fast (0.85-0.99 of a core): what it costs per
// message then is the spin, and the benchmark's consumer's Gosched
// while its engine sleeps still wakes a thread (wakep, 7% of its
// samples). Commands (under flock /tmp/ndkxdp-heavy.lock):
//
//	go test ./test/rdma -run XXX -bench CPUCost -benchtime 1x   # prints the engines' counters
//	perf record -a -g -- sleep 1.5                              # during its ndkxdp rows
//
// # Transport (ROCEV2.md §2, rxe semantics)
//
//   - Segmentation by path MTU; FIRST/MIDDLE carry exactly one PMTU. PSNs
//     are 24-bit; a READ takes ceil(len/PMTU) PSNs. AckReq on the last
//     packet of each message and every 32 packets; a window of 512
//     unacknowledged PSNs per QP.
//   - Responder: execute at ePSN; re-ACK duplicates of SEND/WRITE (never
//     re-execute); answer a duplicate READ again from its responder
//     resource; a duplicate READ, atomic or WRITE_FIRST/ONLY is
//     re-validated first (its R_Key must be the original's and allow its
//     range and right in the token table as it is now, else a remote
//     access NAK; a WRITE that fails is dropped instead, so that a genuine
//     retransmission after its region was invalidated does not end the
//     connection); one PSN-sequence NAK per gap; ACKs coalesced (one per QP
//     per receive batch, on AckReq) and never ahead of READ responses they
//     would cover; an ACK after a completed receive waits up to 20 us to
//     leave with the consumer's answer. MSN counts completed messages.
//   - Requester: cumulative ACKs retire WQEs in order; a NAK acknowledges
//     what precedes it; sequence NAKs, response gaps and ACK timeouts go
//     back N to the oldest unacknowledged PSN (a READ re-asks only for the
//     missing part); RetryCount retries, reset by progress, then
//     STATUS_IO_TIMEOUT. RNR NAK: wait the timer from the table, resend;
//     RNRRetry (7 = infinite).
//   - Fatal NAKs (remote access, invalid request, remote operational)
//     complete the request in error; both QPs enter the error state and
//     everything else completes STATUS_CANCELLED. A responder that NAKs
//     still sends the READ responses it owed for earlier PSNs.
//   - QP.Drained closes once a failed, flushed or closed QP completed
//     everything and owes no READ response: the CM's disconnect waits on
//     it (NDKPI.md §8 Disconnect) instead of polling the state.
//   - Outbound read limit and READ_FENCE hold requests before they get
//     PSNs; the inbound limit is the number of responder resources, and a
//     READ beyond it is an invalid request.
//   - SEND with Invalidate: IETH; the receiver invalidates the token
//     (memreg.Invalidate: a fast MR, a bound window, or an invalidatable
//     MR) and completes with Type ReceiveAndInvalidate and the token; a
//     token it cannot invalidate aborts the connection.
//   - Local operations (local.go: OpFastRegister, OpBind, OpInvalidate):
//     executed on the token table when posted, queued without PSNs, and
//     completed in order once every earlier request has; a failed
//     Invalidate completes STATUS_INVALID_DEVICE_REQUEST and fails the QP.
//     A window answers only on the QP that bound it (memreg.CheckRemoteOn
//     with the QP's number, IB type 2).
//   - SRQ (srq.go): a QP created on one takes a receive from the SRQ's
//     lock-free ring when a SEND starts and sends an RNR NAK only when it
//     is empty; the limit event fires once per arm, off the engine.
//   - SE on the last packet of a solicited SEND; the receive completion is
//     marked Solicited for the CQ's arm.
//   - SILENT_SUCCESS: no completion on success, the WQE still retires in
//     order.
//   - Atomics (CMP_SWAP, FETCH_ADD; an ndkxdp extension, OpCompareSwap and
//     OpFetchAdd): the responder needs memreg.AccessRemoteAtomic on 8
//     bytes (else a remote access NAK) at an 8-byte aligned address (else
//     an invalid request NAK), executes with sync/atomic on the memory
//     (atomic across QPs, engines and local sync/atomic users, in host
//     byte order as rxe), and keeps the original value in the responder
//     resource: a duplicate gets the saved ATOMIC_ACKNOWLEDGE again and is
//     never executed twice. The requester counts atomics against the
//     outbound read limit like READs and retires them only by their
//     ATOMIC_ACKNOWLEDGE, whose value lands in the 8-byte local SGE in
//     host order.
//   - Immediate data (OpSendImm, OpWriteImm; an ndkxdp extension): the
//     ImmDt rides on the last packet; the receive completion carries it
//     (cq.Entry.HasImmediate, Immediate). A WRITE with immediate takes a
//     receive as its LAST or ONLY packet arrives, before its key is
//     checked (rxe's RXE_RWR_MASK: RNR NAK when none is posted, the bytes
//     of that packet not yet placed), and completes it with type
//     ReceiveWriteWithImmediate and the RETH's length (rxe do_complete).
//
// Status mapping (ndk's doc lists it for users): remote access NAK ->
// STATUS_ACCESS_VIOLATION (STATUS_REMOTE_RESOURCES for a READ, as NdkRead
// documents); invalid request / operational NAK -> STATUS_REMOTE_RESOURCES;
// an answer whose AETH syndrome IBTA reserves for its opcode (type 2 or bit
// 7 on an ACK, anything but an ACK on a READ response or
// ATOMIC_ACKNOWLEDGE) -> STATUS_REMOTE_RESOURCES with IB_WC_BAD_RESP_ERR,
// at once, as rxe check_ack; retries exhausted -> STATUS_IO_TIMEOUT;
// receive too small ->
// STATUS_BUFFER_OVERFLOW; flushed -> STATUS_CANCELLED. ProviderErrorCode
// carries the ib_wc_status number.
//
// # Congestion control (congestion.go)
//
// Traffic class: each QP's frames carry a DSCP and an ECN codepoint in
// the IP header and, if asked, an 802.1Q tag with a PCP, from
// ConnParams.Traffic or the engine's Config.Traffic. The ICRC masks the
// TOS/traffic class and leaves out the link header (ROCEV2.md 1.8), so
// switches may remark and retag; the steering program already parses one
// tag (bpf/steer.c). TestTrafficClass_FramesCarryItAndVerify checks the
// fields, the ICRC and tshark's decoding.
//
// Notification point (CCNotify, CCOn): an RC frame for a connected QP
// that arrives with CE is answered with a CNP to the peer's QP, at most
// one per QP per Config.CC.CNPInterval (default 50µs, the paper's N;
// ConnectX's MIN_TIME_BETWEEN_CNPS is 2µs, which at one CNP per
// loop would cost a software engine a frame for nearly every one it
// receives). The CNP is the ConnectX-4 Lx's (ROCEV2.md 1.7): opcode
// 0x81, BECN, PSN 0, 16 zero bytes, DSCP 48 with ECT(0), PCP 6 when
// tagged (DCQCN.md CNP_DSCP, CNP_802P_PRIO). Stats.CNPsSent and
// Stats.CNPs count both ways.
//
// Reaction point (CCOn): DCQCN as published (Zhu et al., "Congestion
// Control for Large-Scale RDMA Deployments", SIGCOMM 2015, Algorithm 1),
// with the parameter names and defaults of ConnectX firmware (mlxconfig;
// DCQCN.md gives the sources, which Google isekai's rdma_roce_cc_dcqcn.h
// and the HPCC ns-3 simulator's run.py share). A QP runs at the line rate
// and is unpaced until its first CNP. Each CNP, at most one per
// RateReduceMonitorPeriod (4µs): Rt = Rc, Rc = Rc(1 - alpha/2) (never
// below Rc(1 - RPG_MIN_DEC_FAC) nor RPG_MIN_RATE), alpha = (1-g)alpha +
// g, except that Rt = Rc only if an increase event (timer or byte
// counter) came since the last cut: the hardware's CLAMP_TGT_RATE 0 with
// CLAMP_TGT_RATE_AFTER_TIME_INC 1 (the same mlxconfig dump as DCQCN.md's
// other values; the HPCC simulator's ClampTargetRate false does the
// same in CheckRateDecreaseMlx). The paper's Algorithm 1 sets Rt on every
// cut; Config.CC.ClampTgtRate asks for that. Where a mark comes back
// milliseconds after the rate it reports, one episode sends a CNP per
// frame of the queue behind it, and with Rt = Rc on each of them Rt
// followed Rc to the floor and recovery was additive for 150ms and more
// (a trace of test/congestion's single flow). Alpha decays, alpha =
// (1-g)alpha, every DCE_TCP_RTT without a CNP.
// Increase events come from a timer (RPG_TIME_RESET, 300µs) and a byte
// counter (RPG_BYTE_RESET), each counted since the last cut (T, BC):
// fast recovery while max(T, BC) <= F (RPG_THRESHOLD, 1), hyper increase
// (Rt += (min(T, BC) - F) RPG_HAI_RATE) once both passed F, additive
// (Rt += RPG_AI_RATE) in between; each sets Rc = (Rt + Rc)/2. Back at the
// line rate, the QP is released: no pacing, no timers. Units the public
// sources leave open, and the reading taken: DCE_TCP_G 1019 is 1-g in
// 1024ths (g = 5/1024, next to the paper's 1/256); DCE_TCP_RTT's unit is
// not public, so the paper's 55µs; RPG_BYTE_RESET counts 64-byte units
// (32767 of them, 2 MiB; in bytes the counter would fire every 8 frames
// and hyper increase would follow every cut at once); the line rate is
// Config.CC.LineRate (10 Gb/s by default), since RPG_MAX_RATE 0 means the
// NIC's, which the engine cannot ask.
//
// Loss-driven pacing, in every mode: what DCQCN does not see is a peer
// that drops what it cannot take, such as a requester whose receive ring
// overflows under an 8 MiB READ's 8,192 responses (34 go-back-N rounds
// and 38 MB/s where 256 KiB READs made 266 MB/s, before), or a queue
// that drops frames that are not ECN-capable. The responder takes a READ
// asked again for answers it already sent, and the requester a sequence
// NAK or an ACK timeout, as a loss (onLoss, at most one per 100µs): the
// QP's rate halves, or drops to the rate the peer was seen to take (a
// duplicate READ at packet k of a run: k packets over the time from the
// run's first response to its latest) if lower, never below 1/100 of
// the line rate (so that repeated
// losses cannot stretch one READ to seconds: 1 MiB at 1 Mb/s is 8s) and
// never up (that floor raised 8 flows that DCQCN had cut to 37 Mb/s each
// to 100, over test/congestion's 300 Mbit/s bottleneck). A rate a loss set
// rises by 1/32 of itself per increase event (about 10% a millisecond),
// not by DCQCN's hyper increase, which brought the rate back to the
// overrun within milliseconds, and not at all while the QP sends nothing
// (its timers stop until its next frame: a requester waiting out its own
// timeout has not shown it takes more); a CNP returns the QP to DCQCN's
// stages.
//
// A requester's loss also halves the request packets it keeps in flight
// (cutWindow: a congestion window, not below 8, widened by one per
// window acknowledged and lifted at Config.Window), since go-back-N
// resends all of them: with the whole window (512 PSNs) in flight behind
// a full queue, each loss resent hundreds of frames into it and lost
// more. A cut window sets AckReq twice per window. READ requests are not
// held by it: a READ's responses are the responder's to pace.
//
// A READ at the head of the send queue whose responses stop coming is
// asked again, without spending a retry, an eighth of the ACK timeout
// (at least 2ms) after the last response or the last ask (reask): the
// answer to a re-ask is often lost behind the overrun too, and a lost
// last response shows no gap at all; each of those cost an ACK timeout
// (67ms) before. The ACK timer, which only progress moves, still bounds
// a peer that never answers. On the responder, only the responses a
// duplicate READ has the responder send a second time count against the
// replay budget; the rest of the run leaves at a first run's pace (it
// crawled at 4 frames a loop before).
//
// Whether the requester is overrun at all depends on the machine's load.
// BenchmarkLargeReads (test/rdma: go test ./test/rdma -run XXX -bench
// LargeReads -benchtime 1x, NDKXDP_BENCH_DAEMON=1 for daemons on both
// ends) on the shared 2-vCPU VM, 8 MiB READs as a share of the 256 KiB
// rate: without the stall probe, 0.36-1.02 with daemons, up to 19%
// resent and up to 2 ACK timeouts a run; in a quiet spell, three
// in-process runs each, 0.64-0.99 with an ACK timeout in two of three,
// against 0.95-1.06 and nothing resent with it. Under load (load average
// 4-5, another suite beside), the requester is descheduled long enough
// to overflow its receive ring about once per READ: 0.46-0.66 of the 256
// KiB rate with 17-21 rounds and 18-28% resent, daemons or not, and no
// ACK timeout in 11 runs. The goal (0.8, 5% resent) holds only while the
// requester keeps up.
//
// test/congestion's BenchmarkIncast (its doc has the bed: 300 Mbit/s,
// HULL's phantom queue draining at 0.98 of it, marked by RED from 5 KB
// to 200 KB; flock /tmp/ndkxdp-heavy.lock go test ./test/congestion -run
// XXX -bench Incast -benchtime 1x), on the 2-vCPU VM, 2026-11-28, DCQCN
// (ECT(0), increase steps a tenth of the defaults, alpha period 550µs)
// against off (no ECN: RED drops on the real queue), runs of 2s, eight
// runs, as DCQCN's share or ratio to off:
//
//	flows  goodput/bottleneck  Jain's index  probe p99 dcqcn/off  resent dcqcn/off
//	1      0.84-0.94           -             -                    -
//	2      0.91-0.94           1.00          0.02-0.05            0
//	4      0.93-0.95           1.00          0.02-0.13            0
//	8      0.95-0.96           1.00          0.06-0.29            0
//
// A mark reaches the sender milliseconds after the rate it reports (the
// engines share two vCPUs), so an episode sends a CNP per frame of the
// queue behind it; what the reaction point does with those is above (the
// target kept through an episode, the pacer's recharge). What a flow
// still loses is the start, from the line rate into its window: its
// rate is cut to a few Mb/s within 100ms and the queue runs empty for
// about 60ms. With RED on the real queue from 256 KB instead (and the
// hardware's alpha period), goodput was 0.93-0.99 but the probe waits
// behind that queue: its p99 1.4-3.3 times off's. Bounding the cascade
// (RateReduceMonitorPeriod near the round trip) keeps goodput and gives
// the queue back the same way; test/congestion's doc has the rows.
//
// The alpha and increase timers are the engine's timer list, which a
// loop on a shared core may reach late (on the 2-vCPU VM alpha decayed
// once per 380µs where DCE_TCP_RTT said 55µs): tick runs every period a
// late pass missed, as the hardware's timers would have fired, up to 64
// increase events a pass (TestDCQCN_LateTimerPassCatchesUp).
//
// Pacing costs no timer per packet and no allocation: each QP keeps the
// time its next data frame may leave (paceAt), which each frame moves by
// its wire length over Rc; a sender that finds it ahead stops and puts
// the QP on the engine's timer list with that deadline, and the timer
// pass (timers.go) schedules it again. A QP may run up to 20µs, or one
// frame's gap at Rc if longer, ahead of its rate after an idle spell or
// a late pass, so a loop's frames leave in one kick and a wake that
// ppoll's slack delays costs nothing (with 20µs alone, a QP paced at 285
// Mb/s sent 220-240 on the 2-vCPU VM). A rate change charges the last
// frame's gap again at the new rate (the HPCC simulator's ChangeRate): a
// frame sent at the 1 Mb/s floor no longer holds the QP for 33ms after
// recovery raised the rate (TestDCQCN_RateChangeRechargesTheLastGap).
// ACKs, NAKs and CNPs are not paced. TestCongestionControlAllocatesNothing
// runs round trips with CNPs and pacing under testing.AllocsPerRun.
//
// # Decisions that differ from DESIGN.md
//
// The engine goroutine is locked to its thread only with
// Config.LockThread: a yield from a locked thread is a thread hand-off,
// which with two engines and two consumers on two cores slows the
// ping-pong several-fold (test/rdma's doc has the numbers). ndk.Open
// decides per adapter (ndk.LockAuto): it locks when every engine can have
// a core of its own and one is left for the consumers. Bad local tokens
// are refused at post time (STATUS_ACCESS_VIOLATION, no completion)
// instead of completing in error.
//
// # Left to do
//
//   - FLUSH and ATOMIC_WRITE are refused with an invalid request NAK.
//   - Zero copy stops at the XSK port: a packet whose payload is a whole
//     AllocBuffer buffer leaves as one descriptor, its headers in the
//     pool's headroom (port.TxSlots), on any socket, zero-copy ones
//     without multi-buffer included (virtio_net); other AllocBuffer
//     payloads leave in place only as descriptor chains on a multi-buffer
//     socket (port.XSKConfig.TxReference), so on a zero-copy socket of a
//     device whose xdp_zc_max_segs is 1 a part of a buffer (a message
//     over the path MTU, an SGE that is not the whole buffer) is copied,
//     and a daemon client's memory, outside the daemon's UMEM, always is.
//     A frame over one 4 KiB chunk is joined where it lies, so receive
//     places each payload with one copy; but a chain whose chunks are not
//     adjacent (once per round of the fill ring) is still gathered.
//   - Credits: ACKs advertise "no credit information" (like rxe) and
//     incoming credit counts are ignored.
//   - WRITE bandwidth on veth falls short of Go TCP's: the sending
//     engine's kick runs copy-mode AF_XDP transmit and, inline, the
//     peer's veth receive, XDP and copy into its UMEM, which costs far
//     more per 4 KiB frame than the engine's own work, while TCP moves
//     64 KiB GSO segments; test/rdma's doc has the measurements and the
//     profile.
//
// Example:
//
//	e, _ := rc.NewEngine(rc.Config{Port: p, Regions: table})
//	defer e.Close()
//	qp, _ := e.CreateQP(rc.QPConfig{QPN: 0x100, PD: 1, RecvCQ: rcq, SendCQ: scq,
//		RecvDepth: 256, SendDepth: 256, MaxRecvSGE: 4, MaxSendSGE: 4, MaxReadSGE: 4})
//	_ = qp.Connect(params) // both Endpoints, path MTU, limits, timers
//	if st := qp.PostSend(&rc.SendWR{Op: rc.OpSend, SGL: sgl}); st != ndkpi.StatusSuccess { ... }
package rc
