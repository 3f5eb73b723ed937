package inproc

import (
	"math"
	"math/rand/v2"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
)

// lossyPort drops a fraction of the frames its port receives, at random,
// before the engine sees them (Config.InjectLoss). AF_XDP's transmit path
// bypasses the kernel's queueing disciplines, so netem cannot make a veth
// pair lossy for ndkxdp; the soak command and fault tests use this.
type lossyPort struct {
	port.Port
	threshold uint64 // a frame is dropped when a draw falls below it
	rng       *rand.Rand
	dropped   uint64 // engine goroutine only
}

func newLossyPort(pt port.Port, fraction float64, seed uint64) *lossyPort {
	threshold := uint64(math.MaxUint64)
	if fraction < 1 {
		threshold = uint64(fraction * (1 << 64))
	}
	return &lossyPort{Port: pt, threshold: threshold, rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
}

// Unwrap returns the port it wraps (port.Inner).
func (p *lossyPort) Unwrap() port.Port { return p.Port }

// Receive implements port.Port: the kept frames are moved to the front of
// out; Release still gives back the whole batch.
func (p *lossyPort) Receive(out [][]byte) int {
	n := p.Port.Receive(out)
	kept := 0
	for i := range out[:n] {
		if p.rng.Uint64() < p.threshold {
			p.dropped++
			continue
		}
		out[kept] = out[i]
		kept++
	}
	return kept
}
