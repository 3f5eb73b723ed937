// Package rping is the protocol logic of `ndkxdp rping`: a client and a
// server that speak librdmacm's rping (rdma-core
// librdmacm/examples/rping.c, unchanged in this respect from rdma-core 44,
// Debian 12's rdmacm-utils, to today) over any verbs.Endpoint.
//
// The wire protocol, as rping.c runs it over one RC connection set up by
// rdma_cm (port 7174 by default, RDMA_PS_TCP):
//
//   - Connection parameters (rping_init_conn_param): responder_resources 1,
//     initiator_depth 1, retry_count 7, rnr_retry_count 7. Both sides post
//     one 16-byte receive before rdma_connect / rdma_accept and repost it
//     after each receive completion (rping_cq_event_handler).
//   - Every SEND carries struct rping_rdma_info {__be64 buf; __be32 rkey;
//     __be32 size;}, 16 bytes big-endian (Info). A receive of any other
//     length is "bogus data" and ends the run (server_recv, client_recv).
//   - Per ping (rping_test_client, rping_test_server): the client fills
//     start_buf with "rdma-ping-%d: " and ASCII from a start character that
//     advances by one per ping ('A'..'z', wrapping), NUL in the last byte
//     (FillPing); SENDs {start_buf, rkey, size}; the server READs size bytes
//     from it into its rdma_buf and SENDs a go-ahead; the client SENDs
//     {rdma_buf, rkey, size}; the server WRITEs strlen(rdma_buf)+1 bytes
//     into it and SENDs a go-ahead. The server's go-aheads are 16 zero
//     bytes: rping never formats the server's send_buf. With -V the client
//     compares start_buf and rdma_buf (size bytes). All SENDs, READs and
//     WRITEs are signaled.
//   - -S size is accepted from RPING_MIN_BUFSIZE (26) to RPING_BUFSIZE-1
//     (65535); -C 0 (the default) pings until interrupted; the client ends
//     with rdma_disconnect, and a server waiting for the next ping treats
//     the disconnect as success.
//
// The capture ../shared/testdata/pcaps/linlinw5__rdma_ib_tutorial/rping.pcap
// (rxe, -S 64, 5 pings) shows exactly this; the tests decode it.
//
// What it is not: connection setup (the verbs.Connector and verbs.Listener
// passed in do IB CM and rdma_cm), the persistent server (-P), rping's -q
// (self-created QP) or its debug output (-d).
//
// Example:
//
//	st, err := rping.RunClient(ctx, rping.Config{Size: 64, Count: 10, Validate: true, Verbose: os.Stdout}, connector, rping.DefaultPort)
//	// prints "ping data: rdma-ping-0: ABCDEF..." per ping; st.Pings == 10
package rping
