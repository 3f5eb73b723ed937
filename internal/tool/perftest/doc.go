// Package perftest is the protocol logic of `ndkxdp perf`: client and
// server of linux-rdma perftest's tests in rdma_cm mode (-R), in its
// default mode (control over TCP, socket.go) and with -z (control over
// rdma_cm, data QPs out of band), ib_send_bw,
// ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_lat, ib_write_lat and
// ib_read_lat, over any verbs.Endpoint, printing perftest's report table.
//
// The reference is Debian 12's perftest 4.5+0.17, which announces version
// "6.06". Its message flow was read from linux-rdma/perftest
// (src/perftest_communication.c: create_comm_struct, establish_connection,
// rdma_client_connect, rdma_server_connect, ctx_hand_shake,
// rdma_write_keys/rdma_read_keys, ctx_xchg_data, exchange_versions,
// check_sys_data, check_mtu, xchg_bw_reports, create_rdma_cm_connection,
// rdma_cm_client_connection; src/*_bw.c, *_lat.c main()), counted in the
// Debian binaries' main() (calls of ctx_hand_shake per test) and checked
// against ../shared/testdata/pcaps/linlinw5__rdma_ib_tutorial/rdma_cm.pcap
// (ib_write_bw --rdma_cm, perftest 6.20), which our client reproduces
// message for message (TestCaptureMatchesOurFlow).
//
// Wire protocol, one QP, RC, iterations mode, not bidirectional:
//
//  1. Control connection: rdma_cm to port 18515 (-p), retry_count 7,
//     rnr_retry 7, no private data. Each side registers one 56-byte buffer
//     and posts one receive before rdma_connect / rdma_accept. Every
//     message is a single signaled SEND whose completion the sender awaits;
//     the receiver reposts its receive at once. In every exchange the
//     client sends first and the server answers (ctx_xchg_data,
//     ctx_hand_shake).
//  2. Prologue (after perftest's sleep(1), which we do not need): the
//     version string, 16 bytes NUL-padded ("6.06"; both refuse a peer
//     older than 5.70); cycle buffer (page size) and cache line size,
//     4-byte big-endian each, the larger kept; the MTU as sprintf("%d") of
//     enum ibv_mtu in 2 bytes ("3\0" for 1024), the smaller kept.
//  3. create_rdma_cm_connection: a pingpong_dest handshake with zeroed
//     dests, then the data connection on the same port (responder
//     resources and initiator depth = -o for read and atomic tests), then
//     another zeroed handshake. perftest's server only starts listening for
//     the data connection after that first handshake, so a fast client's
//     REQ can meet no listener and get REJ reason 8; perftest's client
//     retries 10 times, 100 ms apart. Our client retries as Params.
//     ConnectRetry says (bounded); our server accepts the data connection
//     on the listener that accepted the control connection, which stays
//     bound, so it never rejects.
//  4. pingpong_dest handshakes (56 bytes, struct pingpong_dest big-endian,
//     see Dest): 3 for write/read/atomic bw (gather, print loop, "after
//     RTR"), 4 for send bw and for the latency tests, and no further sync
//     before the run (live Debian 12 rxe answers exactly that many; the
//     receives of send tests are posted before the connection). Each side advertises rkey and vaddr = buffer + BUFF_SIZE, the
//     second half of a 2 x max(size, cycle buffer) buffer.
//  5. The test on the data QP:
//     write/read/atomic bw: the client warms up (one window of requests),
//     then keeps up to -t requests outstanding (for READ and atomics also
//     at most -o), signaling every -Q-th and the last, stamping each post
//     and each signaled completion; the server idles. send bw: the server
//     has -r receives posted and reposts until -n are consumed. write lat:
//     ping-pong of WRITEs, the iteration number in the last byte, each side
//     polling the last byte of its own target half, the server first (as
//     in linlinw5__rdma_ib_tutorial/rdma_write_lat.pcap and live rxe). send
//     lat: ping-pong of SENDs, the client first. read lat: the client
//     READs one at a time; the server idles.
//  6. After the test: write/read/atomic bw: one handshake, then
//     xchg_bw_reports (size, iterations as big-endian u64; peak, average,
//     message rate as big-endian doubles; five 8-byte exchanges) and the
//     server prints the client's row. Every test but write lat ends with
//     a closing handshake (ctx_close_connection), then disconnects;
//     write_lat.c's main() returns after its report and disconnects
//     without one (live rxe, both roles).
//
// --write_with_imm (Params.WriteImm, write bw only) is perftest 24.01
// and later's (write_bw.c with WRITE_IMM, read at tag 25.01.0-0.80;
// Debian 13's perftest is 25.01, Debian 12's has no such option): the
// client posts IBV_WR_RDMA_WRITE_WITH_IMM with immediate 0 and no
// warm-up; after the three pingpong_dest handshakes the server posts -r
// receives of no bytes ("Write w/imm completions have zero recieve
// buffer length") and both sides handshake; the server then runs
// run_iter_bw_server as send bw's does, reposting up to -n; each side
// prints its own row (no xchg_bw_reports), and the closing handshake ends
// it (RUN_REGULAR: no handshake after the run; live Debian 13 rxe closed
// the connection at ours). With -a (RUN_ALL) every size has its
// receives, a handshake before and one after. ib_write_lat --write_with_imm
// (write_lat.c, run_iter_lat_write_imm): both sides post -r receives of
// no bytes for each size and handshake, then ping-pong as write lat (the
// server first), each learning of the peer's WRITE by the receive it
// consumed, reposting while rcnt + rx_depth <= iters. -D is refused.
//
// --use-srq (Params.UseSRQ, send tests only) changes nothing on the
// wire: the side that receives (the server of send bw, both sides of
// send lat: perftest's srq_exists) makes an SRQ of -r receives before the
// data QP (verbs.SRQMaker), creates the QP on it (verbs.ConnParams.SRQ)
// and posts and reposts every receive to the SRQ (ibv_post_srq_recv in
// ctx_set_recv_wqes and run_iter_bw_server). A send bw client has no SRQ.
//
// Statistics are perftest's, computed from monotonic nanoseconds:
// print_report_bw (peak = the best rate over windows ending at a signaled
// completion, with perftest's integer division; average and Mpps over the
// whole run; MB/sec = 2^20 bytes/s, --report_gbits 10^9 bits/s; peak
// disabled by -N and above 20000 iterations) and print_report_lat (deltas
// between posts, halved for send and write round trips, sorted, the two
// largest dropped; typical = median; stdev with perftest's truncation to
// int; 99% and 99.9% at ceil(n x 0.99) and ceil(n x 0.999)).
//
// All sizes (-a, Params.AllSizes; allsizes.go) runs each size from 2 to
// 2^23 bytes in a buffer of the largest, one row each, with perftest's
// handshakes between sizes: send bw one before each size after the first
// (after the server posted that size's receives) and one after each; send
// lat one before each size after the first; write, read bw and the
// latency tests none, and a write or read bw server prints only the last
// size's row, which the client sends. atomic_bw refuses -a, as perftest
// does.
//
// Duration mode (-D, Params.Duration; duration.go) replaces -n: each side
// runs on its own timer, counts only the sample window between two margins
// of a quarter of -D in whole seconds, and reports with no peak; latency
// tests print t_avg and tps instead of their distribution. Nothing on the
// wire ends the run: after it the sides meet at the handshakes of
// iterations mode. -D with -a is refused.
//
// Bidirectional mode (-b, Params.Bidir; bidir.go) runs send, write, read
// and atomic bw on RC, with -a, -D, -q and --use-srq as each runs
// without -b: both sides run the test at once and each prints both sides'
// sum (under -D send bw's sides print their own rows, as send_bw.c does).
// It is not taken with -c UD or --write_with_imm.
//
// Report options (report.go): --output (Params.Output) prints no
// banner, addresses or table, only each row's figure ("%lf\n": the BW
// average or the message rate of a bandwidth row, t_avg of a latency
// row); -w and -y (Params.LimitBW, LimitMsgRate) fail a run none of whose
// rows reaches them, in perftest's words, after it ended cleanly;
// --report-both (Params.ReportBoth) adds each side's own row after a -b
// sum; -U and -H (Params.ReportUnsorted, ReportHistogram; latency tests)
// print the samples before each row, as taken and sorted without the
// tail, then the header again (PrintSamples). None of them changes the
// wire.
//
// What it is not: the test banner of ctx_print_test_info, -f (the margin
// is always perftest's default), UD beyond -c UD's send tests, XRC, DC,
// and the Ethernet-socket exchange's multicast and raw Ethernet modes.
// The send bw server's row spans its first to its last
// receive, without a peak.
//
// Several QPs (-q, Params.QPs; multiqp.go), as perftest 4.5-0.17 and
// 25.01 do them: only bw tests take -q, latency tests refuse even -q 1
// ("Multiple QPs only available on bw tests"), 1..16384. With -R there
// is still one control connection. In create_rdma_cm_connection, between
// the two zeroed handshakes, perftest's server listens once (backlog -q)
// and accepts -q connect requests in arrival order, the n-th becoming QP
// n (cma_master.connection_index; no private data of perftest's own);
// its client resolves and connects -q cm_ids at once, retrying the whole
// set 10 times, 100 ms apart. Our client connects them one after another
// (each retried on REJ reason 8 as the one connection is), so the REQs
// reach the server in QP order; our server accepts -q on its listener.
// The pingpong_dest handshakes of step 4 then go once per QP, QP 0
// first, where the test's main() loops over its QPs (write_bw.c: for i <
// num_of_qps ctx_hand_shake(&my_dest[i], &rem_dest[i])): write, read and
// atomic bw gather per QP, print per QP, then one "after RTR" (2 x -q +
// 1); send bw gathers per QP, one, prints per QP, one before the run
// (2 x -q + 2). The dests are printed per QP, all local ones first. Each
// QP advertises its own buffer (perftest's default carves one MR into
// per-QP halves at buf + (num_of_qps + i) x BUFF_SIZE; the peer only
// uses what each dest says). run_iter_bw posts round-robin over the QPs,
// each up to -t outstanding (READ and atomics: -o), signaling every
// -Q-th and the last of each QP, and every QP runs the full -n
// (tot_iters = iters * num_of_qps); the send bw server expects -n
// receives per QP and reposts each QP's own (run_iter_bw_server). The
// report counts size * iters * num_of_qps bytes over the whole run
// (print_report_bw, the peak over the stamps of all QPs in order), and
// xchg_bw_reports still sends one report. -q > 1 is refused with -a, -D,
// --write_with_imm, --use-srq and -c UD. The QPs are polled together and
// the test sleeps on all of them (verbs.AnyWaiter); an ndk adapter with
// several queues puts them on its engines round-robin.
//
// Example:
//
//	res, err := perftest.RunClient(ctx, perftest.Params{Verb: perftest.Write, Kind: perftest.BW, Size: 65536,
//		ConnectRetry: perftest.Retry{Attempts: 50, Interval: 100 * time.Millisecond}}, connector, os.Stdout)
//	// prints the ib_write_bw table; res.BW holds the row
package perftest
