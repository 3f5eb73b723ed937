package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

func TestBadInvocations(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"demo", "-messages", "0"},
		{"demo", "-xdp-mode", "fast"},
		{"demo", "-dev", "eth0"},
		{"perf"},
		{"perf", "baseline", "-duration", "-1s"},
		{"counters"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("ndkxdp %q succeeded", args)
		}
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &out); err != nil || !strings.HasPrefix(out.String(), "ndkxdp ") {
		t.Errorf("version: %q, %v", out.String(), err)
	}
}

// TestDemoRuns runs the README's main job in miniature and checks its
// report, and that every frame it captured is a valid RoCEv2 frame.
func TestDemoRuns(t *testing.T) {
	testenv.RequireRoot(t)
	for _, mtu := range []string{"1500", "9000"} {
		capture := filepath.Join(t.TempDir(), "demo.pcap")
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"demo", "-mtu", mtu, "-messages", "2000", "-rdma-ops", "50",
			"-pings", "200", "-capture", capture}, &out, &errOut)
		if err != nil {
			t.Fatalf("demo -mtu %s: %v\n%s%s", mtu, err, out.String(), errOut.String())
		}
		for _, want := range []string{"report:", "SEND      2000 x 64", "WRITE       50 x 65536", "READ        50 x 65536",
			"RTT p50", "0 bad ICRC", "namespaces removed"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("demo -mtu %s output lacks %q:\n%s", mtu, want, out.String())
			}
		}
		f, err := pcapfile.ReadFile(capture)
		if err != nil {
			t.Fatal(err)
		}
		ops := map[rocev2.Opcode]int{}
		var p rocev2.Packet
		for _, pkt := range f.Packets {
			if err := rocev2.Parse(pkt.Data, &p); err != nil {
				t.Fatalf("captured frame %d: %v", pkt.Index, err)
			}
			ops[p.BTH.Opcode]++
		}
		for _, op := range []rocev2.Opcode{rocev2.RCSendOnly, rocev2.RCWriteFirst, rocev2.RCWriteLast, rocev2.RCReadRequest, rocev2.RCReadResponseLast, rocev2.RCAck, rocev2.UDSendOnly} {
			if ops[op] == 0 {
				t.Errorf("demo -mtu %s: capture holds no %v frame (%d frames: %v)", mtu, op, len(f.Packets), ops)
			}
		}
		checkWithTshark(t, capture)
	}
}

// checkWithTshark decodes the demo's capture with Wireshark's RoCE
// dissector: every frame is InfiniBand over UDP 4791, each of the demo's
// four connections shows its REQ, REP, RTU, DREQ and DREP (each recorded
// twice: sent by one adapter, received by the other), and no frame is
// malformed. The one exception is Wireshark guessing the payload of a
// SEND as an EtherType frame (the demo's messages start with a sequence
// number) and failing to parse that guess: the RoCE headers still decode.
func checkWithTshark(t *testing.T, capture string) {
	t.Helper()
	tshark := testenv.RequireTool(t, "tshark")
	out, err := exec.Command(tshark, "-r", capture, "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "frame.number", "-e", "frame.protocols", "-e", "_ws.malformed", "-e", "infiniband.mad.attributeid").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	cm := map[string]int{}
	frames := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 4 {
			t.Fatalf("tshark line %q", line)
		}
		frames++
		if !strings.Contains(f[1], "udp:infiniband") {
			t.Errorf("frame %s decodes as %s", f[0], f[1])
		}
		if f[2] != "" && (f[3] != "" || !strings.Contains(f[1], "infiniband:ethertype")) {
			t.Errorf("frame %s is malformed: %s (%s)", f[0], f[2], f[1])
		}
		if f[3] != "" {
			cm[f[3]]++
		}
	}
	for _, attr := range []string{"0x0010", "0x0013", "0x0014", "0x0015", "0x0016"} {
		if cm[attr] < 2*4 {
			t.Errorf("tshark finds %d CM MADs of attribute %s in %d frames, want at least 8 (%v)", cm[attr], attr, frames, cm)
		}
	}
}

// TestDemoEndsWhenInterrupted cancels the demo's context (what SIGINT and
// SIGTERM do) at several points of its run: each time it returns promptly
// with the cancellation, and leaves no namespace behind. The SEND phase
// used to spin forever once its receiver had given up.
func TestDemoEndsWhenInterrupted(t *testing.T) {
	testenv.RequireRoot(t)
	for _, after := range []time.Duration{50 * time.Millisecond, 120 * time.Millisecond, 300 * time.Millisecond, time.Second} {
		ctx, cancel := context.WithTimeout(context.Background(), after)
		var out, errOut bytes.Buffer
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"demo", "-messages", "2000000"}, &out, &errOut) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(after + 20*time.Second):
			t.Fatalf("demo still running 20s after its context ended at %v:\n%s", after, out.String())
		}
		cancel()
		took := time.Since(start)
		if err == nil {
			t.Fatalf("demo cancelled at %v returned no error:\n%s", after, out.String())
		}
		t.Logf("cancelled at %v: returned after %v: %v", after, took.Round(time.Millisecond), err)
		ents, _ := os.ReadDir("/var/run/netns")
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), vethpair.NamePrefix+strconv.Itoa(os.Getpid())+"-") {
				t.Errorf("namespace %s left behind", e.Name())
			}
		}
	}
}
