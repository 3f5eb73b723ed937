package rc

import (
	"errors"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Frames, for every role: emit puts a QP's headers, a payload and the
// ICRC on the port; span and scatter read and write a WQE's SGEs as one
// run of bytes.

// emit builds the frame for q's current header fields around payload and
// queues it: header scratch, payload in place (MR or WQE memory), pad and
// ICRC. It returns port.ErrTxFull when there is no room; other failures
// are counted and the frame is dropped (retransmission recovers).
func (e *Engine) emit(q *QP, payload []byte) error {
	t := &q.t
	t.ipID++
	t.hdr.IP.ID = t.ipID
	hl, err := t.hdr.EncodeHeaders(e.hbuf[:], len(payload))
	if err != nil {
		atomic.AddUint64(&e.c.EncodeErrors, 1)
		return nil
	}
	pad := rocev2.PadCount(len(payload))
	crc, err := rocev2.ICRC(e.hbuf[t.l3:hl], payload, pad)
	if err != nil {
		atomic.AddUint64(&e.c.EncodeErrors, 1)
		return nil
	}
	tail := e.tbuf[:pad+rocev2.ICRCLen]
	clear(tail[:pad])
	rocev2.PutICRC(tail[pad:], crc)
	e.segs[0] = e.hbuf[:hl]
	segs := e.segs[:2]
	if len(payload) > 0 {
		e.segs[1] = payload
		e.segs[2] = tail
		segs = e.segs[:3]
	} else {
		e.segs[1] = tail
	}
	err = e.port.Transmit(segs)
	e.segs[1], e.segs[2] = nil, nil
	switch {
	case err == nil:
		atomic.AddUint64(&e.c.FramesOut, 1)
		t.n.FramesOut++
		return nil
	case errors.Is(err, port.ErrTxFull):
		atomic.AddUint64(&e.c.TxFull, 1)
		return port.ErrTxFull
	default:
		atomic.AddUint64(&e.c.TxErrors, 1)
		return nil
	}
}

// span returns n bytes at offset off of the concatenated segments: in
// place when they lie in one segment, else gathered into scratch.
func (e *Engine) span(seg [][]byte, nseg uint8, off, n uint32) []byte {
	if n == 0 {
		return nil
	}
	i := uint8(0)
	for ; i < nseg && off >= uint32(len(seg[i])); i++ {
		off -= uint32(len(seg[i]))
	}
	if i == nseg {
		return nil
	}
	if off+n <= uint32(len(seg[i])) {
		return seg[i][off : off+n]
	}
	out := e.gather[:n]
	c := uint32(0)
	for ; i < nseg && c < n; i++ {
		c += uint32(copy(out[c:], seg[i][off:]))
		off = 0
	}
	return out
}

// scatter copies data into the concatenated segments at offset off and
// reports false, copying nothing, if it does not fit.
func scatter(seg [][]byte, nseg uint8, off uint32, data []byte) bool {
	var total uint64
	for i := uint8(0); i < nseg; i++ {
		total += uint64(len(seg[i]))
	}
	if uint64(off)+uint64(len(data)) > total {
		return false
	}
	for i := uint8(0); i < nseg && len(data) > 0; i++ {
		s := seg[i]
		if off >= uint32(len(s)) {
			off -= uint32(len(s))
			continue
		}
		c := copy(s[off:], data)
		data = data[c:]
		off = 0
	}
	return true
}
