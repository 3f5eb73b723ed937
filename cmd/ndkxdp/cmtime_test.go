package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestCmtimeCommands: `ndkxdp cmtime` server and client on a veth pair,
// rdma-core 44's protocol and -oob's, the client in process and through a
// daemon: both end 0 and print a table per round; bad flags are usage
// errors.
func TestCmtimeCommands(t *testing.T) {
	for _, args := range [][]string{{"-c", "0"}, {"-c", "257"}, {"-p", "0"}} {
		var ue *cmdline.UsageError
		if _, err := parseCmtime(append(args, "-dev", "lo"), io.Discard, io.Discard); !errors.As(err, &ue) {
			t.Errorf("cmtime %v: %v, want a usage error", args, err)
		}
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	for _, c := range []struct {
		name   string
		oob    bool
		daemon bool
	}{{"rdma-core_44", false, false}, {"oob", true, false}, {"oob_client_through_a_daemon", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			extra := []string{"-c", "20", "-p", "7475"}
			if c.oob {
				extra = append(extra, "-oob")
			}
			client := []string{"-dev", p.A.Link}
			if c.daemon {
				client = []string{"-daemon", serveDaemonOn(t, p.A)}
			}
			cout, sout := runIn(t, p.B, append([]string{"cmtime", "-dev", p.B.Link}, extra...),
				p.A, append(append([]string{"cmtime", "-s", srv}, extra...), client...))
			rounds := 1
			if c.oob {
				rounds = 3
			}
			if n := strings.Count(cout, "connect      :"); n != rounds {
				t.Errorf("client printed %d connect rows, want %d:\n%s", n, rounds, cout)
			}
			if n := strings.Count(sout, "accept       :"); n != rounds {
				t.Errorf("server printed %d accept rows, want %d:\n%s", n, rounds, sout)
			}
		})
	}
}
