package soak

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// TestSoakShort runs the soak for 10 seconds with 2% loss and two-second
// connections: it must move and verify bytes over more than one
// connection, report RSS, heap and goroutines at the start, on the way
// and at the end, and see retransmissions (the loss is real). The loss
// takes CM messages too, and one lost costs the CM response timeout
// (4.3 s) before it is resent: in 4 s a lost DREQ left room for no
// second connection, and in 10 s two losses in one disconnect (9.2 s)
// did. 14 s leave room for two.
func TestSoakShort(t *testing.T) {
	testenv.RequireRoot(t)
	var out, errOut bytes.Buffer
	err := Run(context.Background(), []string{"-duration", "14s", "-report", "1s", "-reconnect", "2s",
		"-loss", "0.02", "-max-size", "16384"}, &out, &errOut)
	if err != nil {
		t.Fatalf("soak: %v\n%s%s", err, out.String(), errOut.String())
	}
	o := out.String()
	if n := strings.Count(o, " RSS "); n < 3 {
		t.Errorf("%d RSS reports, want at least 3:\n%s", n, o)
	}
	for _, want := range []string{"every byte verified: true", "goroutines", "retransmission rounds"} {
		if !strings.Contains(o, want) {
			t.Errorf("soak output lacks %q:\n%s", want, o)
		}
	}
	if strings.Contains(o, "over 1 connections") || strings.Contains(o, " 0 rounds") || strings.Contains(o, "retransmission rounds 0/0") {
		t.Errorf("the soak did too little:\n%s", o)
	}
	t.Log(o)
}

func TestSoakBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-duration", "0s"},
		{"-loss", "0.9"},
		{"-max-size", "0"},
		{"-polling", "lazy"},
	} {
		var out bytes.Buffer
		if err := Run(context.Background(), args, &out, &out); err == nil {
			t.Errorf("soak %q succeeded", args)
		}
	}
}

// TestSoakInterrupted: an interrupt ends the soak within a round's wait,
// with its summary and no error.
func TestSoakInterrupted(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := Run(ctx, []string{"-duration", "1m", "-loss", "0.02"}, &out, &out); err != nil {
		t.Fatalf("interrupted soak: %v\n%s", err, out.String())
	}
	if d := time.Since(start); d > 20*time.Second || !strings.Contains(out.String(), "soak: interrupted") {
		t.Fatalf("soak ended after %v:\n%s", d, out.String())
	}
}
