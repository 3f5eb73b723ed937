package harness

import (
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
)

type (
	// Config describes the pair to build; see vethpair.Config.
	Config = vethpair.Config
	// Host is one end of the pair; see vethpair.Host.
	Host = vethpair.Host
	// Pair is two hosts joined by a veth pair; see vethpair.Pair.
	Pair = vethpair.Pair
)

// New builds a pair for a test and deletes it when the test ends. A test run
// without root is skipped (or failed under NDKXDP_STRICT=1).
func New(t testing.TB, cfg Config) *Pair {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := vethpair.NewPair(cfg)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("harness: cleanup: %v", err)
		}
	})
	return p
}
