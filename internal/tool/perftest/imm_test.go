package perftest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// TestWriteWithImm: ib_write_bw --write_with_imm as perftest 24.01 and
// later run it (write_bw.c with WRITE_IMM): no warm-up; the server posts
// its receives of no bytes after the pingpong_dest handshakes and a
// handshake tells the client; every WRITE with immediate consumes one;
// no handshake follows the run (write_bw.c's RUN_REGULAR), each side
// prints its own row and no reports are exchanged. Against the same run
// without it: as many handshakes (the sync before the run takes the place
// of write_bw's after it), the five report messages fewer. With -a
// (RUN_ALL), a handshake before and after every size, and a server row
// for every size.
func TestWriteWithImm(t *testing.T) {
	plain := Params{Verb: Write, Kind: BW, Size: 3000, Iterations: 300, TxDepth: 16, CQMod: 4, RxDepth: 32}
	imm := plain
	imm.WriteImm = true
	wbw := runPair(t, plain, plain, 0)
	pr := runPair(t, imm, imm, 0)
	if wbw.cerr != nil || wbw.serr != nil || pr.cerr != nil || pr.serr != nil {
		t.Fatalf("write_bw: %v, %v\n--write_with_imm: client %v\nserver %v", wbw.cerr, wbw.serr, pr.cerr, pr.serr)
	}
	p := pr.client.Params
	checkBW(t, p, pr.client.BW)
	checkBW(t, p, pr.server.BW)
	if *pr.server.BW == *pr.client.BW {
		t.Error("the server printed the client's row: it must measure its receives")
	}
	cdata, sdata := pr.rec.eps[1], pr.srv.eps[1]
	if cdata.Posted.Write != p.Iterations || cdata.Posted.Receive != 0 {
		t.Errorf("client posted %d WRITEs (want %d, no warm-up) and %d receives", cdata.Posted.Write, p.Iterations, cdata.Posted.Receive)
	}
	if sdata.Posted.Receive != p.Iterations {
		t.Errorf("server posted %d receives, want %d", sdata.Posted.Receive, p.Iterations)
	}
	if got, want := dests(pr.rec.sent), dests(wbw.rec.sent); got != want {
		t.Errorf("%d handshakes, want %d (write_bw's)", got, want)
	}
	if got, want := len(pr.rec.sent), len(wbw.rec.sent)-5; got != want {
		t.Errorf("client sent %d control messages, want %d (write_bw's %d without the reports)", got, want, len(wbw.rec.sent))
	}

	all := imm
	all.Iterations, all.AllSizes = 5, true
	one := imm
	one.Iterations = 5
	a, o := runPair(t, all, all, 0), runPair(t, one, one, 0)
	if a.cerr != nil || a.serr != nil || o.cerr != nil || o.serr != nil {
		t.Fatalf("-a: client %v server %v; without: %v %v", a.cerr, a.serr, o.cerr, o.serr)
	}
	// -a: one before and one after each of 23 sizes; one size: the one
	// before.
	if got := dests(a.rec.sent) - dests(o.rec.sent); got != 2*23-1 {
		t.Errorf("-a added %d handshakes, want %d (one before and one after each size, against one before)", got, 2*23-1)
	}
	if got := rowSizes(a.sout.String()); fmt.Sprint(got) != fmt.Sprint(allSizes) {
		t.Errorf("server's rows: sizes %v", got)
	}
}

// TestWriteWithImmRefused: --write_with_imm is the write tests', not with
// -D, and needs an endpoint with verbs.Immediate.
func TestWriteWithImmRefused(t *testing.T) {
	for _, p := range []Params{
		{Verb: Send, Kind: Lat, WriteImm: true},
		{Verb: Send, Kind: BW, WriteImm: true},
		{Verb: Read, Kind: BW, WriteImm: true},
	} {
		if err := p.Check(); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%v %v --write_with_imm: %v, want ErrInvalid", p.Verb, kindName(p.Kind), err)
		}
	}
	if err := (Params{Verb: Write, Kind: BW, WriteImm: true, Duration: 5e9}).Check(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("-D --write_with_imm: %v, want ErrUnsupported", err)
	}
	d := &data{}
	prepare := prepareData(d, &Params{Verb: Write, Kind: BW, Size: 64, WriteImm: true}, DefaultCycleBuf)
	if err := prepare(noImm{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("an endpoint without WRITE with immediate: %v, want ErrUnsupported", err)
	}
}

// noImm is an endpoint without verbs.Immediate.
type noImm struct{ verbs.Endpoint }

// TestWriteLatWithImm: ib_write_lat --write_with_imm (run_iter_lat_write_imm):
// both sides post their receives of no bytes and handshake once more than
// write_lat, then ping-pong WRITEs with immediate, the server first, each
// learning of the peer's by a receive; both print a latency row.
func TestWriteLatWithImm(t *testing.T) {
	plain := Params{Verb: Write, Kind: Lat, Size: 64, Iterations: 100, RxDepth: 16}
	imm := plain
	imm.WriteImm = true
	wl := runPair(t, plain, plain, 0)
	pr := runPair(t, imm, imm, 0)
	if wl.cerr != nil || wl.serr != nil || pr.cerr != nil || pr.serr != nil {
		t.Fatalf("write_lat: %v, %v\n--write_with_imm: client %v\nserver %v", wl.cerr, wl.serr, pr.cerr, pr.serr)
	}
	p := pr.client.Params
	checkLat(t, p, pr.client.Lat)
	checkLat(t, p, pr.server.Lat)
	for side, ep := range map[string]*verbstest.Endpoint{"client": pr.rec.eps[1], "server": pr.srv.eps[1]} {
		if ep.Posted.Write != p.Iterations || ep.Posted.Receive != p.Iterations {
			t.Errorf("%s posted %d WRITEs with immediate and %d receives, want %d each", side, ep.Posted.Write, ep.Posted.Receive, p.Iterations)
		}
	}
	if got, want := dests(pr.rec.sent), dests(wl.rec.sent)+1; got != want {
		t.Errorf("%d handshakes, want %d (write_lat's and one)", got, want)
	}
}
