package cmatose

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

const (
	serverLines = "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	clientLines = "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
)

// run runs a server and a client over an in-memory network.
func run(t *testing.T, scfg, ccfg Config) (sout, cout string, serr, cerr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := &verbstest.Network{}
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var sb, cb bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- RunServer(ctx, scfg, l, &sb) }()
	cerr = RunClient(ctx, ccfg, n, DefaultPort, &cb)
	if cerr != nil {
		cancel()
	}
	serr = <-done
	return sb.String(), cb.String(), serr, cerr
}

// TestCmatose: server and client of several connections print
// cmatose.c's lines and end with status 0; -C 0 moves nothing; a client
// with nobody listening fails with status -1.
func TestCmatose(t *testing.T) {
	cfg := Config{Connections: 3, Count: 20, Size: 64}
	sout, cout, serr, cerr := run(t, cfg, cfg)
	if serr != nil || cerr != nil || sout != serverLines || cout != clientLines {
		t.Fatalf("server %v:\n%s\nclient %v:\n%s", serr, sout, cerr, cout)
	}
	none := Config{Count: -1}
	sout, cout, serr, cerr = run(t, none, none)
	if serr != nil || cerr != nil || sout != "cmatose: starting server\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n" ||
		cout != "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n" {
		t.Fatalf("-C 0: server %v:\n%s\nclient %v:\n%s", serr, sout, cerr, cout)
	}
	var out bytes.Buffer
	err := RunClient(context.Background(), Config{}, &verbstest.Network{}, DefaultPort, &out)
	var rej *verbs.RejectError
	if !errors.As(err, &rej) || !strings.HasSuffix(out.String(), "test complete\nreturn status -1\n") {
		t.Fatalf("no server: %v\n%s", err, out.String())
	}
	for _, bad := range []Config{{Connections: -1}, {Count: MaxCount + 1}, {Size: MaxSize + 1}} {
		if err := bad.Fill(); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
