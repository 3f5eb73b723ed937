package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestDaemonSpin: the daemon's engines spin as long as -spin (or the
// config's spin) says before they sleep, 20µs by default; a spin that is
// not a positive duration up to 1s, or one given with busy polling, is
// refused before anything touches the system.
func TestDaemonSpin(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ndkxdp.json")
	if err := os.WriteFile(cfg, []byte(`{"interface": "lo", "spin": "75us"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := defaultDaemonConfig()
	if err := loadDaemonConfig(cfg, &c); err != nil {
		t.Fatal(err)
	}
	opts, _, _, err := c.resolve(io.Discard)
	if err != nil || opts.SpinTime != 75*time.Microsecond {
		t.Fatalf("config spin 75us: spin time %v, %v", opts.SpinTime, err)
	}
	overlay(&c, daemonConfig{Spin: "1ms"})
	if opts, _, _, err = c.resolve(io.Discard); err != nil || opts.SpinTime != time.Millisecond {
		t.Fatalf("-spin 1ms over the config: spin time %v, %v", opts.SpinTime, err)
	}
	c = defaultDaemonConfig()
	c.Interface = "lo"
	if opts, _, _, err = c.resolve(io.Discard); err != nil || opts.SpinTime != 0 || opts.Polling != ndk.PollAdaptive {
		t.Fatalf("default: spin time %v (want 0, the engine's default), polling %v, %v", opts.SpinTime, opts.Polling, err)
	}
	for _, tc := range []struct{ polling, spin, want string }{
		{"adaptive", "0s", `spin "0s"`},
		{"adaptive", "-5us", `spin "-5us"`},
		{"adaptive", "2s", "at most 1s"},
		{"adaptive", "fast", `spin "fast"`},
		{"busy", "50us", `spin "50us": is for adaptive polling`},
	} {
		c := defaultDaemonConfig()
		c.Interface, c.Polling, c.Spin = "lo", tc.polling, tc.spin
		if _, _, _, err := c.resolve(io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("polling %s, spin %s: %v, want an error naming %q", tc.polling, tc.spin, err, tc.want)
		}
	}
}

// TestDaemonConfigQueues: the config's queues is "all", or a count
// written as a number or a string; a value of another type is named with
// the key and the type it wants, not as a Go unmarshal error.
func TestDaemonConfigQueues(t *testing.T) {
	for _, tc := range []struct{ json, want, err string }{
		{`{"interface": "lo", "queues": 2}`, "2", ""},
		{`{"interface": "lo", "queues": "3"}`, "3", ""},
		{`{"interface": "lo", "queues": "all"}`, "all", ""},
		{`{"interface": "lo", "queues": true}`, "", `queues: want "all" or a count`},
		{`{"interface": "lo", "xdp_mode": 2}`, "", "key xdp_mode: want a string, got a number"},
	} {
		cfg := filepath.Join(t.TempDir(), "ndkxdp.json")
		if err := os.WriteFile(cfg, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		c := defaultDaemonConfig()
		err := loadDaemonConfig(cfg, &c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "Go struct") {
				t.Errorf("%s: %v, want %q", tc.json, err, tc.err)
			}
			continue
		}
		if err != nil || string(c.Queues) != tc.want {
			t.Errorf("%s: queues %q, %v; want %q", tc.json, c.Queues, err, tc.want)
			continue
		}
		opts, _, _, err := c.resolve(io.Discard)
		if n, _ := strconv.Atoi(tc.want); err != nil || opts.Queues != n {
			t.Errorf("%s: resolved to %d queues, %v", tc.json, opts.Queues, err)
		}
	}
}

// TestDaemonEngineCPUs: the config's engine_cpus (or -engine-cpus over
// it) pins the daemon's engines; a list that is no CPU list is refused
// before anything touches the system.
func TestDaemonEngineCPUs(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ndkxdp.json")
	if err := os.WriteFile(cfg, []byte(`{"interface": "lo", "engine_cpus": "0,2-3"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := defaultDaemonConfig()
	if err := loadDaemonConfig(cfg, &c); err != nil {
		t.Fatal(err)
	}
	opts, _, _, err := c.resolve(io.Discard)
	if err != nil || !slices.Equal(opts.EngineCPUs, []int{0, 2, 3}) {
		t.Fatalf("config engine_cpus 0,2-3: %v, %v", opts.EngineCPUs, err)
	}
	overlay(&c, daemonConfig{EngineCPUs: "1"})
	if opts, _, _, err = c.resolve(io.Discard); err != nil || !slices.Equal(opts.EngineCPUs, []int{1}) {
		t.Fatalf("-engine-cpus 1 over the config: %v, %v", opts.EngineCPUs, err)
	}
	c.EngineCPUs = "two"
	if _, _, _, err := c.resolve(io.Discard); err == nil || !strings.Contains(err.Error(), "engine_cpus") {
		t.Fatalf("engine_cpus two: %v, want an error naming engine_cpus", err)
	}
}
