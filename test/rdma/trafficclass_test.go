package rdma

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// lockedBuffer is a capture both of an adapter's engines may write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}

// TestTrafficClassOnTheVethPair: the adapters' default (DSCP 26, ECT(0),
// VLAN 100 with PCP 3) and a connection's own class (DSCP 46, ECT(1),
// PCP 5) reach the wire through the steering program and the engines on
// both ends: WRITE and READ complete over tagged frames, every frame B
// captured carries its connection's class and verifies, and
// tshark decodes the same fields.
func TestTrafficClassOnTheVethPair(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) { trafficClassOnTheVethPair(t, s.daemon) })
}

// trafficClassOnTheVethPair runs A in process or through a daemon (the
// connection's class then crosses the daemon's protocol), and captures
// on B, in process.
func trafficClassOnTheVethPair(t *testing.T, daemon bool) {
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	capture := &lockedBuffer{}
	def := ndk.TrafficClass{DSCP: 26, ECN: ndk.ECT0, VLAN: true, VLANID: 100, PCP: 3}
	own := ndk.TrafficClass{DSCP: 46, ECN: ndk.ECT1, VLAN: true, VLANID: 100, PCP: 5}
	x := openHost(t, p.A, setup{daemon: daemon, opts: ndk.Options{TrafficClass: def}}, nil)
	y := openHost(t, p.B, setup{opts: ndk.Options{TrafficClass: def, Capture: capture}}, nil)
	classes := map[uint32]ndk.TrafficClass{}
	for _, tc := range []*ndk.TrafficClass{nil, &own} {
		qa, qb := x.pairWith(y, ndk.ConnectOptions{TrafficClass: tc})
		want := def
		if tc != nil {
			want = *tc
		}
		classes[qa.QPN()], classes[qb.QPN()] = want, want
		src := x.region(5000, ndk.MRFlagAllowLocalWrite)
		dst := y.region(5000, ndk.MRFlagAllowRemoteWrite|ndk.MRFlagAllowRemoteRead)
		fill(src.b, 3)
		must(t, qa.Write(nil, src.sgl(0, 5000), dst.mr.Addr(), dst.mr.RemoteToken(), 0))
		must(t, qa.Read(nil, src.sgl(0, 5000), dst.mr.Addr(), dst.mr.RemoteToken(), 0))
		for _, r := range wait(t, x.ICQ, 2, 5*time.Second) {
			if r.Status != ndk.StatusSuccess {
				t.Fatalf("class %+v: %v", want, r.Status)
			}
		}
		same(t, "WRITE then READ", src.b, dst.b)
	}
	y.Close() // flushes the capture
	f, err := pcapfile.Decode(capture.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	var wants []ndk.TrafficClass
	for i, pk := range f.Packets {
		var pkt rocev2.Packet
		if err := rocev2.Parse(pk.Data, &pkt); err != nil {
			if pkt.BTH.DestQP == rocev2.GSIQP {
				continue
			}
			t.Fatalf("frame %d: %v", i, err)
		}
		if pkt.BTH.DestQP == rocev2.GSIQP {
			continue
		}
		want, ok := classes[pkt.BTH.DestQP]
		if !ok {
			t.Fatalf("frame %d for QP %#x of no connection", i, pkt.BTH.DestQP)
		}
		tci := uint16(want.PCP)<<13 | want.VLANID
		if pkt.IP.TOS != want.DSCP<<2|uint8(want.ECN) || !pkt.Eth.HasVLAN || pkt.Eth.VLANTCI != tci {
			t.Fatalf("frame %d (%v to QP %#x): TOS %#x TCI %#x, want %+v", i, pkt.BTH.Opcode, pkt.BTH.DestQP, pkt.IP.TOS, pkt.Eth.VLANTCI, want)
		}
		frames = append(frames, pk.Data)
		wants = append(wants, want)
	}
	if len(frames) < 20 {
		t.Fatalf("%d RC frames captured", len(frames))
	}
	tshark := testenv.RequireTool(t, "tshark")
	path := filepath.Join(t.TempDir(), "tc.pcap")
	var buf bytes.Buffer
	w, err := pcapfile.NewWriter(&buf, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range frames {
		must(t, w.WritePacket(time.Unix(1_700_000_000, 0), fr))
	}
	must(t, os.WriteFile(path, buf.Bytes(), 0o600))
	out, err := exec.Command(tshark, "-r", path, "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "frame.protocols", "-e", "_ws.malformed", "-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn", "-e", "vlan.priority", "-e", "vlan.id").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark decoded %d of %d frames", len(lines), len(frames))
	}
	for i, line := range lines {
		f := strings.Split(line, "\t")
		for len(f) < 6 {
			f = append(f, "")
		}
		w := wants[i]
		got := []string{f[2], f[3], f[4], f[5]}
		exp := []string{strconv.Itoa(int(w.DSCP)), strconv.Itoa(int(w.ECN)), strconv.Itoa(int(w.PCP)), strconv.Itoa(int(w.VLANID))}
		if !strings.Contains(f[0], "vlan") || !strings.Contains(f[0], "udp:infiniband") || f[1] != "" || strings.Join(got, " ") != strings.Join(exp, " ") {
			t.Fatalf("tshark frame %d: %q, want DSCP ECN PCP VLAN %v", i+1, f, exp)
		}
	}
}
