package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

func TestReasonsNamedAndClassified(t *testing.T) {
	names := map[string]bool{}
	for r := range Reason(NumReasons) {
		name := r.String()
		if name == "" || names[name] {
			t.Errorf("reason %d: name %q empty or repeated", r, name)
		}
		names[name] = true
		// The name carries the verdict (bpf/steer.c groups them so).
		prefix := map[Verdict]string{VerdictPass: "PASS_", VerdictDrop: "DROP_", VerdictRedirect: "REDIRECT"}[r.Verdict()]
		if prefix == "" || !strings.HasPrefix(name, prefix) {
			t.Errorf("reason %s: verdict %v does not match its name", name, r.Verdict())
		}
	}
	if got, want := Reason(NumReasons).String(), fmt.Sprintf("Reason(%d)", NumReasons); got != want {
		t.Errorf("out-of-range reason String = %q", got)
	}
	if v := Reason(NumReasons).Verdict(); v != 0 {
		t.Errorf("out-of-range reason Verdict = %v, want 0", v)
	}
}

func TestCountersByVerdictAndTable(t *testing.T) {
	var c Counters
	c[ReasonPassNotIP] = 3
	c[ReasonPassNotRoCE] = 4
	c[ReasonDropUnknownQP] = 5
	c[ReasonDropNoSocket] = 6
	c[ReasonRedirect] = 7
	c[ReasonRedirectForeignQueue] = 8
	for v, want := range map[Verdict]uint64{VerdictPass: 7, VerdictDrop: 11, VerdictRedirect: 15} {
		if got := c.Verdict(v); got != want {
			t.Errorf("Verdict(%v) = %d, want %d", v, got, want)
		}
	}
	table := c.String()
	if n := strings.Count(table, "\n"); n != NumReasons {
		t.Errorf("table has %d lines, want %d:\n%s", n, NumReasons, table)
	}
	for _, line := range []string{"drop     DROP_UNKNOWN_QP        5", "redirect REDIRECT_FOREIGN_QUEUE 8", "pass     PASS_TRUNCATED_L2      0"} {
		if !strings.Contains(table, line) {
			t.Errorf("table lacks %q:\n%s", line, table)
		}
	}
}

// loadForTest loads the program for tests that run it through
// BPF_PROG_TEST_RUN or fill its maps without attaching.
func loadForTest(t *testing.T, opts Options) *Program {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// rocev2Frame returns an Ethernet/IPv4/UDP 4791 frame with a BTH for qpn, or
// a UDP frame to dport when dport is not 4791. Package bpf tests every
// header variant; the loader only needs traffic for its counters.
func rocev2Frame(dport uint16, qpn uint32) []byte {
	f := make([]byte, 14+20+8+12+4)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 49152)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	bth := udp[8:]
	bth[0], bth[2], bth[3] = 0x04, 0xFF, 0xFF
	bth[5], bth[6], bth[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
	return f
}

func TestLoadMapsAndCounters(t *testing.T) {
	p := loadForTest(t, Options{MaxQueues: 4, MaxQPs: 128})
	if got := p.xsks.MaxEntries(); got != 4 {
		t.Errorf("xsks capacity %d, want MaxQueues 4", got)
	}
	if got := p.qpOwner.MaxEntries(); got != 128 {
		t.Errorf("qp_owner capacity %d, want MaxQPs 128", got)
	}

	if err := p.AddQP(GSIQPN, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.AddQP(0x123456, 3); err != nil {
		t.Fatal(err)
	}
	if err := p.AddQP(0x123456, 2); err != nil { // moves the QP
		t.Fatal(err)
	}
	qps, err := p.QPs()
	if err != nil {
		t.Fatal(err)
	}
	if len(qps) != 2 || qps[GSIQPN] != 0 || qps[0x123456] != 2 {
		t.Errorf("QPs() = %v, want map[1:0 0x123456:2]", qps)
	}

	run := func(frame []byte, want Verdict) {
		t.Helper()
		got, err := p.prog.Run(&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatal(err)
		}
		if Verdict(got) != want {
			t.Errorf("verdict %v, want %v", Verdict(got), want)
		}
	}
	run(rocev2Frame(53, 0), VerdictPass)
	run(rocev2Frame(4791, 0x123456), VerdictDrop) // no socket on queue 0
	run(rocev2Frame(4791, 0x123456), VerdictDrop)
	if err := p.RemoveQP(0x123456); err != nil {
		t.Fatal(err)
	}
	run(rocev2Frame(4791, 0x123456), VerdictDrop) // now unknown

	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{ReasonPassNotRoCE: 1, ReasonDropNoSocket: 2, ReasonDropUnknownQP: 1}
	if c != want {
		t.Errorf("counters:\n%s\nwant:\n%s", c.String(), want.String())
	}
}

func TestMapInputErrors(t *testing.T) {
	p := loadForTest(t, Options{MaxQueues: 2})
	pipe := make([]int, 2)
	if err := unix.Pipe2(pipe, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(pipe[0]); unix.Close(pipe[1]) })

	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"qpn 0", p.AddQP(0, 0), "add qp 0x0: QPN must be in 1..0xffffff"},
		{"qpn over 24 bits", p.AddQP(1<<24, 0), "add qp 0x1000000: QPN must be in"},
		{"qp queue out of range", p.AddQP(5, 2), "add qp 0x5: queue 2 out of range (MaxQueues 2)"},
		{"remove unknown qp", p.RemoveQP(77), "remove qp 0x4d: qp not in steering map"},
		{"socket queue out of range", p.RegisterSocket(2, pipe[0]), "register socket for queue 2: queue out of range"},
		{"negative fd", p.RegisterSocket(0, -1), "invalid fd -1"},
		{"not an AF_XDP socket", p.RegisterSocket(0, pipe[0]), "register socket fd"},
		{"unregister out of range", p.UnregisterSocket(9), "unregister socket for queue 9: queue out of range"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "loader: ") {
			t.Errorf("%s: error %v, want one starting \"loader: \" containing %q", c.name, c.err, c.want)
		}
	}
	if err := p.RemoveQP(77); !errors.Is(err, ErrQPNotFound) {
		t.Errorf("RemoveQP(unknown) = %v, want ErrQPNotFound", err)
	}
	if err := p.UnregisterSocket(1); err != nil {
		t.Errorf("UnregisterSocket of an empty slot: %v", err)
	}
}
