package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
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
		for _, op := range []rocev2.Opcode{rocev2.RCSendOnly, rocev2.RCWriteFirst, rocev2.RCWriteLast, rocev2.RCReadRequest, rocev2.RCReadResponseLast, rocev2.RCAck} {
			if ops[op] == 0 {
				t.Errorf("demo -mtu %s: capture holds no %v frame (%d frames: %v)", mtu, op, len(f.Packets), ops)
			}
		}
	}
}
