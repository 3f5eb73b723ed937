package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
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

// TestDemoRuns runs the README's main job in miniature and checks its report.
func TestDemoRuns(t *testing.T) {
	testenv.RequireRoot(t)
	for _, mtu := range []string{"1500", "9000"} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"demo", "-mtu", mtu, "-messages", "20", "-duration", "100ms"}, &out, &errOut)
		if err != nil {
			t.Fatalf("demo -mtu %s: %v\n%s%s", mtu, err, out.String(), errOut.String())
		}
		for _, want := range []string{"20 frames arrived intact, ICRC verified", "REDIRECT               20", "report: ", "namespaces removed"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("demo -mtu %s output lacks %q:\n%s", mtu, want, out.String())
			}
		}
	}
}
