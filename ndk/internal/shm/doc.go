// Package shm carries the data path between ndkxdp's daemon and the
// application processes that use it: memory both map, rings of records in
// it, and doorbells that wake a sleeping side, with no copy through the
// kernel and no system call on posting while the other side is awake.
//
// A Segment is a sealed memfd mapped shared. One side creates it, lays out
// rings (RingLayout) and doorbells at cache-line-aligned offsets, and sends
// its descriptor and eventfds with SendFDs over a unix socket; the other
// receives them with RecvFDs and maps the segment with MapSegment. A ring
// is single-producer single-consumer: a Producer in one process, a
// Consumer in the other, each owned by one goroutine. A Doorbell is a pair
// of flags in the segment plus the sleeper's eventfd.
//
// The peer is another process and is not trusted. MapSegment refuses a
// memfd that could shrink under the mapping; a ring checks every index the
// peer stores and breaks (ErrBroken) instead of reading outside its slots;
// record bytes may change under a reader until it copies them. Nothing
// here decides what records mean, who may connect, or how the daemon
// schedules its engines: it is the transport under those, and imports
// nothing from ndk.
//
// Example, the creating side (errors elided):
//
//	req := shm.RingLayout{Offset: 0, SlotSize: 64, Slots: 256}
//	bellOff := req.End()
//	seg, _ := shm.NewSegment("ndkxdp-app", bellOff+shm.DoorbellSize)
//	efd, _ := shm.NewEventfd()
//	bell, _ := shm.NewDoorbell(seg, bellOff, efd) // we sleep on it
//	rx, _ := shm.NewConsumer(seg, req)
//	_ = shm.SendFDs(conn, layoutMessage, seg.FD(), bell.FD())
//	for {
//		for rec := rx.Peek(); rec != nil; rec = rx.Peek() {
//			handle(rec)
//		}
//		rx.Release()
//		_ = bell.Wait(-1)
//	}
//
// and the other side, which maps the segment, attaches a Producer over the
// same layout and a Doorbell over the received eventfd, then posts:
//
//	if tx.TryPush(rec) {
//		bell.Ring()
//	}
package shm
