package rocev2

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparison uses a 2^23 half-window, as rxe's psn_compare does: a is before
// b when (a-b) shifted into the top 24 bits of an int32 is negative
// (torvalds/linux drivers/infiniband/sw/rxe/rxe_hdr.h; IBTA 9.7.1).
type PSN uint32

// PSNMask keeps the 24 PSN bits.
const PSNMask = 1<<24 - 1

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Diff returns the signed distance p-q in [-2^23, 2^23): positive when p is
// after q.
func (p PSN) Diff(q PSN) int32 { return int32(uint32(p-q)<<8) >> 8 }

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p PSN) Compare(q PSN) int {
	d := p.Diff(q)
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Less reports whether p is before q.
func (p PSN) Less(q PSN) bool { return p.Diff(q) < 0 }

// Distance returns how many steps forward it takes to go from p to q,
// modulo 2^24: the number of PSNs in [p, q).
func (p PSN) Distance(q PSN) uint32 { return uint32(q-p) & PSNMask }
