// Package afxdp drives AF_XDP sockets: a UMEM of packet frames shared with
// the kernel, the fill, completion, RX and TX rings over it, and the
// syscalls that bind a socket to a device queue and wake the kernel.
//
// It is not a packet parser and knows nothing of RoCE, and it does not load
// or attach XDP programs: a socket receives only what a program redirects
// to it through an XSKMAP (see package loader), keyed by Socket.FD.
//
// # Rings
//
// Each ring type (FillQueue, CompletionQueue, RxQueue, TxQueue) follows the
// kernel's protocol (net/xdp/xsk_queue.h): batch calls Reserve/Set/Submit on
// the rings we produce, Peek/Get/Release on the rings we consume, with
// cached indices so that a batch costs one atomic load and one atomic store.
// Rings and frame allocators are owned by one goroutine, normally the queue's
// engine; nothing on the per-packet path allocates or locks.
//
// # Modes
//
// ModeAuto binds zero-copy where the driver supports it and copy mode
// otherwise; Socket.Mode reports the mode the kernel chose. Sockets bind with
// XDP_USE_NEED_WAKEUP unless told not to, so Kick and WakeupRX make a
// syscall only when the kernel asks for one (copy-mode TX always needs one).
// With SocketConfig.MultiBuffer, packets larger than a frame are chains of
// descriptors linked by PktContd (NextPacket, TxQueue.SetPacket).
//
// # Example
//
//	umem, err := afxdp.NewUMEM(afxdp.UMEMConfig{})
//	if err != nil { ... }
//	defer umem.Close()
//	sock, err := afxdp.NewSocket(umem, afxdp.SocketConfig{Ifindex: ifindex, Queue: 0})
//	if err != nil { ... }
//	log.Printf("bound in %v mode", sock.Mode())
//	frames := umem.Allocator()
//	sock.Fill().FillFrom(frames, sock.Fill().Size())
//
//	// Transmit one frame.
//	addr, _ := frames.Alloc()
//	n := copy(umem.Frame(addr), packet)
//	if i, got := sock.TX().Reserve(1); got == 1 {
//		sock.TX().Set(i, afxdp.Desc{Addr: addr, Len: uint32(n)})
//		sock.TX().Submit()
//	}
//	err = sock.Kick()
//	sock.Completion().ReclaimTo(frames, 64)
//
//	// Receive.
//	if i, got := sock.RX().Peek(64); got > 0 {
//		for j := uint32(0); j < got; j++ {
//			d := sock.RX().Get(i + j)
//			handle(umem.Data(d))
//			frames.Free(d.Addr)
//		}
//		sock.RX().Release(got)
//	}
//
// Several queues of one device share one UMEM by opening one Socket per
// queue on it; each gets its own fill and completion rings, and
// UMEM.Partition gives each queue's engine its own FrameAllocator.
package afxdp
