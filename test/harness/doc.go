// Package harness gives tests the two-host network of internal/vethpair:
// New builds a pair for a test, skips (or, under NDKXDP_STRICT=1, fails)
// the test without root, and deletes the pair when the test ends.
//
// Config, Host and Pair are vethpair's types under the names tests use, so
// a test's pair can be handed to code that takes a *vethpair.Pair (the
// baselines, ndkhost).
//
// Example:
//
//	p := harness.New(t, harness.Config{MTU: 9000, Queues: 2})
//	err := p.A.Do(func() error {
//		// runs inside namespace A on a locked OS thread
//		return nil
//	})
package harness
