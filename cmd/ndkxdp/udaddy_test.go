package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/udaddy"
)

// TestUdaddyFlags: udaddy's flags parse to the run they mean, and bad
// ones are usage errors naming what is wrong.
func TestUdaddyFlags(t *testing.T) {
	f, err := parseUdaddy([]string{"-s", "198.18.0.2", "-C", "20", "-S", "512", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.dst != "198.18.0.2" || f.cfg.Count != 20 || f.cfg.Size != 512 || f.port != udaddy.DefaultPort {
		t.Fatalf("parsed %+v, %v", f, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-C", "0", "-dev", "lo"}, "must be positive"},
		{[]string{"-port", "70000", "-dev", "lo"}, "not a port"},
		{[]string{"-s", "198.18.0.2"}, "-dev or -daemon is required"},
		{[]string{"-s", "198.18.0.2", "-dev", "lo", "-daemon", "/tmp/x.sock"}, "give one of -dev and -daemon"},
		{[]string{"-dev", "nosuchif0"}, "no such network interface"},
	} {
		_, err := parseUdaddy(tc.args, io.Discard, io.Discard)
		var ue *cmdline.UsageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error naming %q", tc.args, err, tc.want)
		}
	}
}
