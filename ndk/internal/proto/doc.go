// Package proto is the language between ndkxdp's daemon (ndk/daemon) and
// its clients (ndk.Dial): control messages (JSON, one per SOCK_SEQPACKET
// datagram) and the byte layouts of the work and completion records in
// the rings the two share (Send, Recv, Completion; QPLayout, CQLayout).
//
// Each operation is a request type and a reply type (ops.go: CreateCQ is
// answered by a CQReply), so that the client (ndk/internal/client.Do)
// and the daemon's handler table agree on both at compile time. Request
// and Message are the union of every request's and every reply's or
// event's fields, under the same names: what a hand-built message (a
// test, a client not written in Go) says. ops_test.go pins the wire.
//
// Records are little-endian at fixed offsets so that a client not
// written in Go can speak it; their op codes (OpSend ... OpWriteImm) are
// this package's constants. Decoding takes bytes as they are: the daemon
// checks every field it uses, since a client is not trusted.
package proto
