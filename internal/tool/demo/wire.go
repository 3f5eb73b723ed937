package demo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// The demo's protocol between `demo -dev IF -peer ADDR` (the client) and
// `demo -dev IF -serve` (the server). Each phase is one RC connection set
// up through the IB CM on Port:
//
//   - The REQ's private data is a demoRequest: the phase, its size and
//     count, and whether it is the client's last phase (the server counts
//     a demo when that one ends).
//   - The REP's is a demoReply: the server's memory for WRITE and READ
//     (address and token), zero for SEND and the ping-pong. A request the
//     server cannot serve gets a REJ (consumer reason) whose private data
//     is demoMagic and a sentence saying why.
//   - SEND: the client streams count messages of size bytes (fillMessage);
//     the server checks each as it arrives and answers with a demoNote
//     SEND, its verdict. WRITE: the client WRITEs count times into the
//     server's slots (as demoWrite), then SENDs a demoNote with the count;
//     the server checks its memory and answers with its verdict. READ: the
//     server's slots hold the pattern demoRead fills, which the client
//     checks on each READ. Ping-pong: the server echoes every 64-byte SEND.
//   - The client ends every phase with a DREQ.
//
// All integers are big-endian.
const (
	demoMagic       = "NDKD"
	demoWireVersion = 1
	demoRequestLen  = 16
	demoReplyLen    = 20
	demoNoteLen     = 160
)

// demoOp is a phase on the wire.
type demoOp uint8

const (
	opSend demoOp = 1 + iota
	opWrite
	opRead
	opPingPong
)

func (o demoOp) String() string {
	switch o {
	case opSend:
		return "SEND"
	case opWrite:
		return "WRITE"
	case opRead:
		return "READ"
	case opPingPong:
		return "ping-pong"
	}
	return fmt.Sprintf("phase %d", uint8(o))
}

// demoRequest is a REQ's private data.
type demoRequest struct {
	Op    demoOp
	Last  bool
	Size  uint32
	Count uint32
}

func (r demoRequest) encode() []byte {
	b := make([]byte, demoRequestLen)
	copy(b, demoMagic)
	b[4] = demoWireVersion
	b[5] = byte(r.Op)
	if r.Last {
		b[6] = 1
	}
	binary.BigEndian.PutUint32(b[8:], r.Size)
	binary.BigEndian.PutUint32(b[12:], r.Count)
	return b
}

// decodeDemoRequest reads a REQ's private data and checks it against what
// the server serves; its error is the sentence the REJ carries.
func decodeDemoRequest(b []byte) (demoRequest, error) {
	if len(b) < demoRequestLen || string(b[:4]) != demoMagic {
		return demoRequest{}, errors.New("not a request of ndkxdp demo -peer (no demo request in the REQ's private data)")
	}
	if b[4] != demoWireVersion {
		return demoRequest{}, fmt.Errorf("demo protocol version %d; this server speaks %d", b[4], demoWireVersion)
	}
	r := demoRequest{Op: demoOp(b[5]), Last: b[6]&1 != 0, Size: binary.BigEndian.Uint32(b[8:]), Count: binary.BigEndian.Uint32(b[12:])}
	lo, hi, maxCount := uint32(1), uint32(16<<20), uint32(1_000_000)
	switch r.Op {
	case opSend:
		lo, hi, maxCount = 8, 1<<20, 10_000_000
	case opWrite, opRead:
	case opPingPong:
		lo, hi = pingSize, pingSize
	default:
		return r, fmt.Errorf("unknown phase %d", uint8(r.Op))
	}
	switch {
	case r.Size < lo || r.Size > hi:
		return r, fmt.Errorf("%v of %d bytes: this server serves %d..%d", r.Op, r.Size, lo, hi)
	case r.Count < 1 || r.Count > maxCount:
		return r, fmt.Errorf("%v count %d: this server serves 1..%d", r.Op, r.Count, maxCount)
	}
	return r, nil
}

// demoReply is a REP's private data: the server's memory for the phase.
type demoReply struct {
	Addr  uint64
	Token uint32
}

func (r demoReply) encode() []byte {
	b := make([]byte, demoReplyLen)
	copy(b, demoMagic)
	b[4] = demoWireVersion
	binary.BigEndian.PutUint64(b[8:], r.Addr)
	binary.BigEndian.PutUint32(b[16:], r.Token)
	return b
}

func decodeDemoReply(b []byte) (demoReply, error) {
	if len(b) < demoReplyLen || string(b[:4]) != demoMagic {
		return demoReply{}, errors.New("it accepted but is not ndkxdp demo -serve (no demo reply in its REP): for rping -s there, give -peer-kind rping")
	}
	if b[4] != demoWireVersion {
		return demoReply{}, fmt.Errorf("it speaks demo protocol version %d, this client %d", b[4], demoWireVersion)
	}
	return demoReply{Addr: binary.BigEndian.Uint64(b[8:]), Token: binary.BigEndian.Uint32(b[16:])}, nil
}

// rejectData is a REJ's private data saying why.
func rejectData(why string) []byte {
	b := make([]byte, 0, ndk.MaxRejectData)
	b = append(b, demoMagic...)
	return append(b, why[:min(len(why), ndk.MaxRejectData-len(demoMagic))]...)
}

// rejectText is the sentence of a REJ that a demo server sent.
func rejectText(b []byte) (string, bool) {
	if len(b) < len(demoMagic) || string(b[:4]) != demoMagic {
		return "", false
	}
	return strings.TrimRight(string(b[4:]), "\x00"), true
}

// demoNote is a SEND of the protocol: the client's "count WRITEs done"
// (Value), or the server's verdict (Failed, and Text saying what was
// wrong).
type demoNote struct {
	Failed bool
	Value  uint64
	Text   string
}

// put writes n into b (demoNoteLen bytes).
func (n demoNote) put(b []byte) {
	clear(b[:demoNoteLen])
	copy(b, demoMagic)
	if n.Failed {
		b[7] = 1
	}
	binary.BigEndian.PutUint64(b[8:], n.Value)
	copy(b[16:demoNoteLen], n.Text)
}

func decodeDemoNote(b []byte) (demoNote, error) {
	if len(b) != demoNoteLen || string(b[:4]) != demoMagic {
		return demoNote{}, fmt.Errorf("the peer sent %d bytes that are not a note of the demo protocol", len(b))
	}
	return demoNote{Failed: b[7] != 0, Value: binary.BigEndian.Uint64(b[8:]), Text: strings.TrimRight(string(b[16:]), "\x00")}, nil
}
