// Package counters declares each of the engine's counters once, as a
// field of Engine (one engine's counts: rc.Stats, ndk.EngineStats) or of
// QP (one QP's: rc.QPInfo, the daemon's QP rows). A field's tags give
// the counter's name, its unit and its help text; the tables built from
// them (EngineCounters, QPCounters) are what `ndkxdp stats` and its -j
// JSON, the daemon's admin answers and /metrics read, so nothing else
// lists the counters.
//
// Adding a counter is one line here, a uint64 field with its tags:
//
//	CNPsSent uint64 `counter:"cnps_sent" unit:"frames" help:"CNPs sent for ECN-marked frames received."`
//
// and the engine code that increments it, a plain atomic add on the
// engine's goroutine (atomic.AddUint64(&e.c.CNPsSent, 1)); for an Engine
// counter, `go generate ./ndk` then writes the field into ndk.EngineStats
// (ndk/stats_gen.go; a test fails until it is run). The name becomes the
// JSON key (ndkxdp stats -j) and the metric ndkxdp_engine_<name>_total.
// A QP counter (ndkxdp_qp_<name>_total) carries a json tag too, the same
// name, since the daemon's QP rows embed QP; the engine increments it in
// place (q.t.n.Field++), no atomic.
//
// This package is only the declarations: it does no I/O and imports no
// other room of the module.
package counters
