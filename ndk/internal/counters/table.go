package counters

import (
	"fmt"
	"iter"
	"reflect"
	"regexp"
	"sync/atomic"
	"unsafe"
)

// Counter describes one counter: its name (snake case: the JSON key, and
// the metric's name between ndkxdp_engine_ or ndkxdp_qp_ and _total),
// what it counts, and a sentence for a person.
type Counter struct {
	Name string
	Unit string
	Help string
}

// EngineCounters and QPCounters describe the fields of Engine and QP, in
// their order.
var (
	EngineCounters = table(reflect.TypeFor[Engine]())
	QPCounters     = table(reflect.TypeFor[QP]())
)

// The fields are read as an array of words: Engine and QP hold uint64
// fields only, which table checks when the program starts.
const (
	numEngine = unsafe.Sizeof(Engine{}) / 8
	numQP     = unsafe.Sizeof(QP{}) / 8
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// table reads t's tags. A field that is not a uint64, or lacks a tag, is
// a mistake in this package that every test of a package linking it
// reports.
func table(t reflect.Type) []Counter {
	out := make([]Counter, t.NumField())
	seen := make(map[string]bool)
	for i := range t.NumField() {
		f := t.Field(i)
		c := Counter{Name: f.Tag.Get("counter"), Unit: f.Tag.Get("unit"), Help: f.Tag.Get("help")}
		switch {
		case f.Type.Kind() != reflect.Uint64:
			panic(fmt.Sprintf("counters: %s.%s is a %v, not a uint64", t.Name(), f.Name, f.Type))
		case !snakeCase.MatchString(c.Name) || seen[c.Name]:
			panic(fmt.Sprintf("counters: %s.%s: counter name %q is not snake case, or not unique", t.Name(), f.Name, c.Name))
		case c.Unit == "" || c.Help == "":
			panic(fmt.Sprintf("counters: %s.%s: needs a unit and a help tag", t.Name(), f.Name))
		case f.Tag.Get("json") != "" && f.Tag.Get("json") != c.Name:
			panic(fmt.Sprintf("counters: %s.%s: json name %q is not its counter name %q", t.Name(), f.Name, f.Tag.Get("json"), c.Name))
		}
		seen[c.Name] = true
		out[i] = c
	}
	return out
}

func (s *Engine) words() *[numEngine]uint64 { return (*[numEngine]uint64)(unsafe.Pointer(s)) }
func (s *QP) words() *[numQP]uint64         { return (*[numQP]uint64)(unsafe.Pointer(s)) }

// Add adds o's counts to s, to total an adapter's engines.
func (s *Engine) Add(o Engine) {
	d, w := s.words(), o.words()
	for i := range d {
		d[i] += w[i]
	}
}

// Snapshot reads each counter of s atomically: s is a live Engine that
// an engine goroutine increments with atomic adds.
func (s *Engine) Snapshot() Engine {
	var out Engine
	d, w := out.words(), s.words()
	for i := range w {
		d[i] = atomic.LoadUint64(&w[i])
	}
	return out
}

// All yields each counter with its count, in EngineCounters' order.
func (s *Engine) All() iter.Seq2[Counter, uint64] {
	return func(yield func(Counter, uint64) bool) {
		w := s.words()
		for i, c := range EngineCounters {
			if !yield(c, w[i]) {
				return
			}
		}
	}
}

// Add adds o's counts to s (the daemon sums the QPs past its metric
// series limit).
func (s *QP) Add(o QP) {
	d, w := s.words(), o.words()
	for i := range d {
		d[i] += w[i]
	}
}

// All yields each counter with its count, in QPCounters' order.
func (s *QP) All() iter.Seq2[Counter, uint64] {
	return func(yield func(Counter, uint64) bool) {
		w := s.words()
		for i, c := range QPCounters {
			if !yield(c, w[i]) {
				return
			}
		}
	}
}
