// Package memreg is ndkxdp's memory-region token table: it hands out the
// local and remote tokens (lkey/rkey) of registered memory and answers, on
// the engine's per-packet path, whether a token may touch a byte range.
//
// A token is index<<KeyBits | key. The index selects a slot in an array of
// atomic pointers, so a lookup is one atomic load and no lock (the layout
// Linux rxe uses, rxe_pool_get_index(key >> 8), with a wider key). The
// index takes only the bits the table's capacity needs and the key the
// rest: 15 bits for ndk's 65,536-region tables, down to rxe's 8 for the
// largest table (KeyBits). Keys are drawn from a ChaCha8 generator seeded
// by crypto/rand for every registration, differ between the local and the
// remote token, and differ from both keys of the slot's previous occupant,
// so a stale token from a reused slot fails. An R_Key is then a secret of
// KeyBits bits per region: a peer guessing keys (ReDMArk, USENIX Security
// 2021) needs 2^14 tries on average for one region of an ndk table, and
// each wrong guess costs it the connection (a remote access error moves
// the QP to error).
//
// A region's virtual address is an index only, as NdkRegisterMr requires
// (seed 001): checks compute offsets from it and return the bytes through
// the region's slice, never by turning an address into a pointer. Zero-based
// addresses are refused.
//
// Fast-register MRs and memory windows (mutable.go) take a slot at
// creation and change on the posting path: FastRegister and Bind give them
// memory, rights and new keys without allocating, Invalidate revokes
// them; readers take a consistent snapshot of the changing fields under a
// sequence count, lock-free. A window is checked against its own range
// and rights, answers only on the QP that bound it (CheckRemoteOn), and
// dies with its MR's registration.
//
// It is not the public API (package ndk's PD and MR are), and it does not
// know QPs, connections or wire formats: the engine maps a Fault to an NDK
// completion status or an IB NAK.
//
// Example:
//
//	tab, _ := memreg.New(1 << 16)
//	tok, _ := tab.Register(memreg.Region{PD: 1, VA: va, Buf: buf, Access: memreg.AccessRemoteWrite})
//	dst, fault := tab.CheckRemote(1, tok.Remote, rethVA, rethLen, memreg.AccessRemoteWrite)
//	if fault != memreg.OK { /* NAK: remote access error */ }
//	copy(dst, payload)
package memreg
