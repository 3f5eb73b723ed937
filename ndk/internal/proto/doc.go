// Package proto is the language between ndkxdp's daemon (ndk/daemon) and
// its clients (ndk.Dial): control messages (Request, Message: JSON, one
// per SOCK_SEQPACKET datagram) and the byte layouts of the work and
// completion records in the rings the two share (Send, Recv, Completion;
// QPLayout, CQLayout). Records are little-endian at fixed offsets so that
// a client not written in Go can speak it. Decoding takes bytes as they
// are: the daemon checks every field it uses, since a client is not
// trusted.
package proto
