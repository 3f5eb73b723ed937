// Package porttest holds Pipe, the in-memory test double of package port:
// two port.Port ends joined in memory, with seeded loss, duplication and
// reordering and a per-frame filter, so that RC engines run without a
// network or privileges, and deterministically. Like port.XSK it wakes a
// sleeping end through port.Bell, so no wake-up is lost.
//
// It is not a network: frames never leave the process, and nothing is
// parsed or checksummed. Frames are copied into recycled buffers, so after
// warm-up a pipe allocates nothing.
//
// Example: two engines over a link that loses 1% of frames at random and
// every ACK from B to A (port's doc shows the loop that drives an end):
//
//	p, _ := porttest.NewPipe(porttest.PipeConfig{Seed: 1, Loss: 0.01,
//		Filter: func(dir porttest.Direction, f []byte) porttest.Verdict {
//			if dir == porttest.BtoA && isACK(f) {
//				return porttest.Drop
//			}
//			return porttest.Pass
//		}})
//	x, _ := rc.NewEngine(rc.Config{Port: p.A(), Regions: table})
//	y, _ := rc.NewEngine(rc.Config{Port: p.B(), Regions: table})
//	// ... connect a QP on each, post, poll the CQs ...
//	lost := p.Stats(porttest.AtoB).Dropped
package porttest
