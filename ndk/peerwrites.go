package ndk

// PeerWrites returns how many RDMA WRITE packets from peers the engine
// running this QP has placed into memory (an ndkxdp extension; the count
// covers every QP of that engine). Loading it is an acquire: the bytes
// those packets placed are visible to the caller afterwards, so polling
// memory a peer writes (ib_write_lat watches the last byte of its buffer,
// since a WRITE makes no completion at the responder) is no data race,
// without Adapter.Stats' round trip to the engine. Allocates nothing.
func (q *QP) PeerWrites() uint64 { return q.rc.PlacedWrites() }
