package ndk

import "github.com/ndkxdp/ndkxdp/ndk/internal/counters"

// EngineStats (stats_gen.go) has the fields of counters.Engine, where
// each counter is declared; the conversions below compile only while the
// two match, field for field.
//go:generate go run ./internal/counters/gen -o stats_gen.go

// Add adds o's counters to s, to total an adapter's engines.
func (s *EngineStats) Add(o EngineStats) {
	c := counters.Engine(*s)
	c.Add(counters.Engine(o))
	*s = EngineStats(c)
}

// engineStats converts the engines' counters.
func engineStats(in []counters.Engine) []EngineStats {
	out := make([]EngineStats, len(in))
	for i, s := range in {
		out[i] = EngineStats(s)
	}
	return out
}
