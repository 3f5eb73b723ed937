package perftest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// listEndpoint records each WRITE's signaled flag and how many WRITEs
// were outstanding (posted, not yet covered by a completion) when it was
// posted.
type listEndpoint struct {
	verbs.Endpoint
	cqMod       int
	posted      int
	done        int
	signaled    []bool
	outstanding []int
}

func (e *listEndpoint) Write(id uint64, local verbs.Segment, addr uint64, rkey uint32, signaled bool) error {
	e.signaled = append(e.signaled, signaled)
	e.outstanding = append(e.outstanding, e.posted-e.done)
	e.posted++
	return e.Endpoint.Write(id, local, addr, rkey, signaled)
}

func (e *listEndpoint) Poll(out []verbs.Completion) (int, error) {
	n, err := e.Endpoint.Poll(out)
	e.done = min(e.done+n*e.cqMod, e.posted)
	return n, err
}

// TestPostList: -l posts requests in lists, starting one only where all
// of it fits in the window (run_iter_bw), and signals one request a list
// (-Q becomes -l); perftest's parser's refusals hold.
func TestPostList(t *testing.T) {
	p := Params{Verb: Write, Kind: BW, Size: 64, Iterations: 60, TxDepth: 10, PostList: 4}
	if err := p.normalize(); err != nil || p.CQMod != 4 {
		t.Fatalf("normalize: %v, -Q %d, want 4", err, p.CQMod)
	}
	a, b := verbstest.Pair(verbstest.Options{})
	var dc, ds data
	rec := &listEndpoint{Endpoint: a, cqMod: p.CQMod}
	if err := prepareData(&dc, &p, DefaultCycleBuf)(rec); err != nil {
		t.Fatal(err)
	}
	if err := prepareData(&ds, &p, DefaultCycleBuf)(b); err != nil {
		t.Fatal(err)
	}
	posted, completed := make([]uint64, p.Iterations), make([]uint64, p.Iterations)
	if err := postBW(context.Background(), &p, &dc, ds.dest(&p), posted, completed); err != nil {
		t.Fatal(err)
	}
	if len(rec.signaled) != p.Iterations {
		t.Fatalf("%d WRITEs, want %d", len(rec.signaled), p.Iterations)
	}
	for i, s := range rec.signaled {
		if s != ((i+1)%4 == 0) {
			t.Errorf("WRITE %d signaled %v: want every 4th", i, s)
		}
		if i%4 == 0 && rec.outstanding[i]+4 > 10 {
			t.Errorf("list at WRITE %d started with %d outstanding: it does not fit a window of 10", i, rec.outstanding[i])
		}
	}
	for _, bad := range []Params{
		{Verb: Write, Kind: BW, Iterations: 61, PostList: 4},               // not a multiple
		{Verb: Write, Kind: BW, Iterations: 64, PostList: 4, CQMod: 3},     // -Q does not divide it
		{Verb: Write, Kind: Lat, Iterations: 64, PostList: 4},              // BW only
		{Verb: Write, Kind: BW, Iterations: 512, TxDepth: 8, PostList: 16}, // longer than the window
		{Verb: Write, Kind: BW, Iterations: 64, PostList: -1},
	} {
		if err := bad.normalize(); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	q := Params{Verb: Write, Kind: BW, Iterations: 64, PostList: 4, QPs: 2}
	if err := q.normalize(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("-l with -q 2: %v, want ErrUnsupported", err)
	}
}

// TestPrintSamples: -U prints every sample as it was taken, -H the
// sorted ones without the two largest, each under "#, usec" and as C's
// %g, then the table's header again; bandwidth tests refuse both.
func TestPrintSamples(t *testing.T) {
	posted := []uint64{0, 3000, 4000, 9000, 10000, 12000, 112000} // deltas 3,1,5,1,2,100 µs
	var b strings.Builder
	PrintSamples(&b, posted, true, true, true)
	want := "#, usec\n1, 1.5\n2, 0.5\n3, 2.5\n4, 0.5\n5, 1\n6, 50\n" +
		"#, usec\n1, 0.5\n2, 0.5\n3, 1\n4, 1.5\n" + resultLine + resultFmtLat
	if got := b.String(); got != strings.ReplaceAll(want, "%%", "%") {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	b.Reset()
	PrintSamples(&b, posted, false, false, false)
	if b.Len() != 0 {
		t.Errorf("neither -U nor -H printed %q", b.String())
	}
	if err := (&Params{Verb: Write, Kind: BW, ReportHistogram: true}).normalize(); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("bw -H: %v", err)
	}
}
