package ndk

// PeerWrites returns how many RDMA WRITE packets from peers the engine
// running this QP has placed into memory (an ndkxdp extension; the count
// covers every QP of that engine). Loading it is an acquire: the bytes
// those packets placed are visible to the caller afterwards, so polling
// memory a peer writes (ib_write_lat watches the last byte of its buffer,
// since a WRITE makes no completion at the responder) is no data race,
// without Adapter.Stats' round trip to the engine. Allocates nothing.
func (q *QP) PeerWrites() uint64 { return q.be.peerWrites() }

// ArmPeerWrites asks for one token on ch when the engine next places a
// WRITE packet from the peer of this QP (an ndkxdp extension, the
// blocking counterpart of PeerWrites; NDKPI has no event for an incoming
// WRITE). The send never blocks: a full ch already holds a token. One arm
// is outstanding per QP; arming again replaces it. Arm, check the memory
// once more, then block on ch: the engine counts a placed packet before
// it looks at the arm, so a WRITE placed after the check always sends.
// The consumer serializes ArmPeerWrites with itself. It allocates only
// when ch differs from the last call's.
func (q *QP) ArmPeerWrites(ch chan struct{}) { q.be.armPeerWrites(ch) }
