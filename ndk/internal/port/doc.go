// Package port moves whole RoCEv2 frames (Ethernet header through ICRC) for
// one engine: the engine's only view of the network. It is the seam between
// the RC transport (package rc) and the wire, in the manner of
// wireguard-go's conn.Bind: the engine is written against Port, an AF_XDP
// queue implements it for real traffic (XSK), and porttest.Pipe implements
// it in memory, with seeded loss, duplication and reordering, so that the
// transport can be tested without privileges and deterministically.
// Capture wraps any Port to record its frames in a pcap file.
//
// A Port knows nothing of RoCE: it does not parse, checksum or steer frames.
//
// Files: port.go the Port contract and its errors; bell.go Bell, the
// doorbell; xsk.go the XSK (configuration, counters, Wait, Doorbell,
// Close); xsk_rx.go its receive side (Receive, joining or gathering
// descriptor chains, Release, the fill ring); xsk_tx.go its transmit side
// (Transmit, descriptor layout, Flush, completions); xsk_unsafe.go the
// package's unsafe conversions; txslots.go the buffer pool's layout for
// one-descriptor sends (TxSlots); capture.go Capture. The in-memory Pipe
// is in porttest.
//
// # Zero-copy transmit
//
// Transmit takes a frame in segments (headers, payload, trailer). An XSK
// given a TxReference range (ndk gives it the AllocBuffer pool) sends a
// payload segment that lies there as descriptors pointing at it, split at
// chunk boundaries, with the headers and the trailer copied side by side
// into one port frame; completions free port frames by the count of their
// descriptors and never touch referenced memory. With a zero-copy driver
// no payload byte is copied on transmit; veth has only copy mode, where
// the kernel copies the payload into an skb instead (xsk_build_skb,
// net/xdp/xsk.c, one page per fragment). test/rdma's doc has what this
// saves on the 64 KiB WRITE stream over veth.
//
// A chain needs a multi-buffer socket, which a zero-copy socket cannot
// have on a device whose xdp_zc_max_segs is 1 (virtio_net: xp_assign_dev,
// net/xdp/xsk_buff_pool.c, refuses XDP_USE_SG with XDP_ZEROCOPY). So, as
// kernel stacks build headers in an skb's headroom, the pool's allocations
// of up to MaxTxSlotted bytes carry TxHeadroom bytes before and
// TxTailroom after that the user never sees (TxSlots, ndk's AllocBuffer
// lays them out). A frame whose payload is exactly one allocation has its
// headers written into the headroom and its pad and ICRC into the
// tailroom, and leaves as one descriptor over the three, on any socket,
// as long as it stays inside one chunk (xp_aligned_validate_desc,
// net/xdp/xsk_queue.h; virtio_net's xsk transmit takes a descriptor at any
// offset, its virtio header from a buffer of its own). Before writing the
// headroom the port takes the allocation's mark (shared by every queue's
// port of the pool), and the descriptor's completion gives it back; a
// frame that finds the mark taken (the buffer posted twice, a
// retransmission before the first frame completed, another engine) is
// copied. XSKStats counts such frames as TxSlotted and in TxRefFrames and
// TxRefBytes, which the daemon shows as tx_in_place_frames and
// tx_in_place_bytes.
//
// On receive, a frame over one chunk arrives as a descriptor chain. When
// the chunks are neighbours in the UMEM, which Release arranges by giving
// frames back to the fill ring in arrival order, the XSK joins the chain
// where it lies, moving only the bytes past the first chunk down over the
// headroom; other chains are gathered into scratch buffers.
//
// # Sleeping and the doorbell
//
// An engine that finds no work calls Wait; a goroutine that posts work for
// it (a send queue entry, a CQ arm) calls Doorbell after the post. Doorbell
// costs two atomic operations while the engine is awake and wakes a
// sleeping one; a Doorbell that comes before Wait makes that Wait return at
// once. So no wake-up is lost as long as the engine checks its queues after
// every return from Wait, and posters post before they ring. Nothing else
// is asked of either side: see Bell for the ordering argument.
//
// Example, an engine loop over a pipe:
//
//	p, _ := porttest.NewPipe(porttest.PipeConfig{Seed: 1, Loss: 0.01})
//	a := p.A() // give p.B() to the peer engine
//	frames := make([][]byte, 64)
//	for running {
//		n := a.Receive(frames)
//		for _, f := range frames[:n] {
//			handle(f) // copy what must outlive Release
//		}
//		a.Release()
//		for w := range work() {
//			if err := a.Transmit([][]byte{w.hdr, w.payload, w.trailer}); errors.Is(err, port.ErrTxFull) {
//				break // retry after the next Flush
//			}
//		}
//		a.Flush()
//		if n == 0 && !haveWork() {
//			a.Wait(time.Millisecond)
//		}
//	}
//
// The same loop runs over an AF_XDP queue once its socket is bound and
// registered with the steering program (packages afxdp and loader):
//
//	x, err := port.NewXSK(sock, umem.Allocator(), port.XSKConfig{MTU: 9000})
package port
