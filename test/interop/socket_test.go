package interop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// testPerftestTCP runs every perftest test as perftest runs by default,
// without -R: control messages over TCP to port -p, the data QP
// connected out of band (socket.go in internal/tool/perftest). Against
// rxe's server our client runs as `ndkxdp perf` does by default (its
// rdma_cm REQ finds no listener, REJ reason 8, and it turns to TCP);
// against rxe's client our server takes TCP. rxe's side needs -x, its
// IPv4 GID's index: without it perftest takes GID 0, the link-local
// IPv6 one, and refuses our IPv4-mapped GID. -q and -c UD run too.
func testPerftestTCP(t *testing.T, p *peer) {
	const size = 4096
	type tcpCase struct {
		perfCase
		qps int
		ud  bool
	}
	var cases []tcpCase
	for _, c := range perfCases {
		cases = append(cases, tcpCase{perfCase: c, qps: 1})
	}
	// -q: each QP's address in its own handshake, connected after the
	// gather of all. -c UD: Q_Key 0x11111111, datagrams to the QPN the
	// handshake gave.
	sendBW, sendLat := perfCase{"ib_send_bw", perftest.Send, perftest.BW}, perfCase{"ib_send_lat", perftest.Send, perftest.Lat}
	cases = append(cases, tcpCase{perfCase: sendBW, qps: qpsInterop}, tcpCase{perfCase: perfCase{"ib_read_bw", perftest.Read, perftest.BW}, qps: qpsInterop},
		tcpCase{perfCase: sendBW, qps: 1, ud: true}, tcpCase{perfCase: sendLat, qps: 1, ud: true})
	for _, c := range cases {
		prm := c.params(size)
		prm.MTU, prm.QPs, prm.UD = p.dev.Adapter.PathMTU(), c.qps, c.ud
		if c.ud {
			prm.Size = min(size, prm.MTU)
		}
		args := fmt.Sprintf("-d rxe0 -x %d -F -n %d -p %d -q %d", p.vm.Guest.GIDIndex, prm.Iterations, prm.Port, c.qps)
		if c.kind == perftest.Lat {
			args = strings.TrimSuffix(args, " -q 1") // latency tests refuse any -q
		}
		if c.ud {
			args += " -c UD"
		}
		if c.verb != perftest.Atomic {
			args += fmt.Sprintf(" -s %d", prm.Size)
		}
		row := prm
		row.Iterations *= c.qps
		serverRow := !(c.verb != perftest.Send && c.verb != perftest.Write && c.kind == perftest.Lat)
		name := c.tool
		if c.qps > 1 {
			name += fmt.Sprintf("_q%d", c.qps)
		}
		if c.ud {
			name += "_ud"
		}
		tcpBothWays(t, p, name, prm, c.timeout(), c.tool+" "+args, func(t *testing.T, rxeServer bool, theirs, ours string, res perftest.Result) {
			// ib_read_lat's server prints no row: only the client measures.
			if serverRow || !rxeServer {
				requireRow(t, "rxe", theirs, theirs, row)
			}
			if serverRow || rxeServer {
				who, calib := "ndkxdp", ours
				if !rxeServer && prm.Kind == perftest.BW && prm.Verb != perftest.Send {
					who, calib = "ndkxdp's server (printing rxe's report)", theirs
				}
				requireRow(t, who, ours, calib, row)
			}
			requireOOBAddresses(t, theirs, ours, res)
		})
	}
	// -b: both sides run and each prints the sum; -D: each side times
	// its own run (bidir_test.go's checks).
	write := perfCase{"ib_write_bw", perftest.Write, perftest.BW}
	prm := write.params(size)
	prm.MTU, prm.Bidir = p.dev.Adapter.PathMTU(), true
	args := fmt.Sprintf("-d rxe0 -x %d -F -n %d -p %d -s %d -b", p.vm.Guest.GIDIndex, prm.Iterations, prm.Port, prm.Size)
	tcpBothWays(t, p, "ib_write_bw_b", prm, write.timeout(), write.tool+" "+args, func(t *testing.T, _ bool, theirs, ours string, res perftest.Result) {
		requireSameSum(t, theirs, ours, prm)
		requireOOBAddresses(t, theirs, ours, res)
	})
	prm = sendLat.params(2)
	prm.MTU, prm.Duration = p.dev.Adapter.PathMTU(), 2*time.Second
	args = fmt.Sprintf("-d rxe0 -x %d -F -D 2 -p %d", p.vm.Guest.GIDIndex, prm.Port)
	tcpBothWays(t, p, "ib_send_lat_D", prm, time.Minute, sendLat.tool+" "+args, func(t *testing.T, _ bool, theirs, ours string, res perftest.Result) {
		requireDurationRow(t, "rxe", theirs)
		requireDurationRow(t, "ndkxdp", ours)
		requireOOBAddresses(t, theirs, ours, res)
	})
}

// testPerftestZ runs perftest's -z (control through rdma_cm, data QPs
// connected out of band) against rxe, both ways: ib_write_bw and
// ib_send_lat.
func testPerftestZ(t *testing.T, p *peer) {
	for _, c := range []perfCase{{"ib_write_bw", perftest.Write, perftest.BW}, {"ib_send_lat", perftest.Send, perftest.Lat}} {
		prm := c.params(4096)
		prm.MTU, prm.Comm = p.dev.Adapter.PathMTU(), perftest.CommRDMACMControl
		cmd := fmt.Sprintf("%s -z -d rxe0 -x %d -F -n %d -s %d -p %d", c.tool, p.vm.Guest.GIDIndex, prm.Iterations, prm.Size, prm.Port)
		zBothWays(t, p, c.tool, prm, c.timeout(), cmd, func(t *testing.T, rxeServer bool, theirs, ours string, res perftest.Result) {
			requireRow(t, "rxe", theirs, theirs, prm)
			calib := ours
			if !rxeServer && c.kind == perftest.BW && c.verb != perftest.Send {
				calib = theirs // our write bw server prints rxe's row
			}
			requireRow(t, "ndkxdp", ours, calib, prm)
			requireOOBAddresses(t, theirs, ours, res)
		})
	}
}

// zBothWays runs rxe's perftest cmd with -z against ours with prm (its
// Comm CommRDMACMControl), rxe as server and then as client, and checks
// each run's outputs and our result with check.
func zBothWays(t *testing.T, p *peer, name string, prm perftest.Params, timeout time.Duration, cmd string, check func(t *testing.T, rxeServer bool, theirs, ours string, res perftest.Result)) {
	t.Run(name+"/rxe_server", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, timeout)
		var res perftest.Result
		theirs = p.guestServer(t, ctx, cmd, perfPort, func() (err error) {
			res, err = perftest.RunClient(ctx, prm, &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4}, &ours)
			return err
		})
		t.Logf("rxe server:\n%s\nndkxdp client:\n%s", theirs, ours.String())
		check(t, true, theirs, ours.String(), res)
	})
	t.Run(name+"/rxe_client", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, timeout)
		var res perftest.Result
		theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) (err error) {
			res, err = perftest.RunServer(ctx, prm, l, &ours)
			return err
		}, fmt.Sprintf("%s %v", cmd, HostIPv4))
		t.Logf("rxe client:\n%s\nndkxdp server:\n%s", theirs, ours.String())
		check(t, false, theirs, ours.String(), res)
	})
}

// tcpBothWays runs rxe's perftest cmd (without -R and the server's
// address) against ours with prm, rxe as server (ours the default
// client: rdma_cm's REQ rejected, then TCP) and then as client (ours a
// server over TCP only), and checks each run's outputs and our result
// with check.
func tcpBothWays(t *testing.T, p *peer, name string, prm perftest.Params, timeout time.Duration, cmd string, check func(t *testing.T, rxeServer bool, theirs, ours string, res perftest.Result)) {
	t.Run(name+"/rxe_server", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, timeout)
		proc, err := p.vm.Start(ctx, "exec "+cmd)
		if err != nil {
			t.Fatal(err)
		}
		defer proc.Kill()
		if err := waitTCPListen(ctx, p.vm, perfPort); err != nil {
			out, errOut, _ := proc.Output(ctx)
			t.Fatalf("%s does not listen: %v\n%s%s", cmd, err, out, errOut)
		}
		var res perftest.Result
		cerr := p.vm.Host.Do(func() (err error) {
			res, err = perftest.RunClient(ctx, prm, &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4}, &ours)
			return err
		})
		if cerr != nil {
			_ = proc.Kill()
		}
		out, errOut, code, err := proc.Wait(ctx)
		// stderr too: perftest says there when its clock calibration
		// failed (under TCG), which explains a void measure.
		theirs = out + errOut
		t.Logf("rxe server:\n%sndkxdp client:\n%s", theirs, ours.String())
		if cerr != nil || err != nil || code != 0 {
			t.Fatalf("ndkxdp's client: %v; rxe's server: exit %d (%v)", cerr, code, err)
		}
		check(t, true, theirs, ours.String(), res)
	})
	t.Run(name+"/rxe_client", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, timeout)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		l := ndkverbs.Unbound(p.dev, ndkverbs.Depths{})
		defer l.Close()
		done := make(chan error, 1)
		var res perftest.Result
		tcp := prm
		tcp.Comm = perftest.CommTCP
		go func() {
			done <- p.vm.Host.Do(func() (err error) {
				res, err = perftest.RunServer(sctx, tcp, l, &ours)
				return err
			})
		}()
		if err := waitHostTCPListen(ctx, p, perfPort, done); err != nil {
			t.Fatal(err)
		}
		out, errOut, code, err := p.vm.Run(ctx, cmd+" "+HostIPv4.String())
		theirs = out + errOut
		if err != nil || code != 0 {
			cancel()
		}
		serr := <-done
		t.Logf("rxe client:\n%sndkxdp server:\n%s", theirs, ours.String())
		if err != nil || code != 0 || serr != nil {
			t.Fatalf("rxe's client: exit %d (%v); ndkxdp's server: %v", code, err, serr)
		}
		check(t, false, theirs, ours.String(), res)
	})
}

// requireOOBAddresses fails unless rxe printed, as its remote
// addresses, the QPN and PSN of each QP our side connected, and ours
// printed rxe's local ones: over TCP the QPs connect with exactly what
// the handshakes gave.
func requireOOBAddresses(t *testing.T, theirs, ours string, res perftest.Result) {
	t.Helper()
	locals, peers := res.Locals, res.Peers
	if locals == nil {
		locals, peers = []perftest.Dest{res.Local}, []perftest.Dest{res.Peer}
	}
	// ctx_print_pingpong_data's %#06x: the 0x counts in the width.
	addr := func(d perftest.Dest) string { return fmt.Sprintf("QPN 0x%04x PSN 0x%04x", d.QPN, d.PSN) }
	for i := range locals {
		if want := addr(locals[i]); !strings.Contains(theirs, "remote address: LID 0000 "+want) {
			t.Errorf("rxe's remote addresses do not hold our QP %d's (%s):\n%s", i, want, theirs)
		}
		if peer := addr(peers[i]); !strings.Contains(theirs, "local address: LID 0000 "+peer) || !strings.Contains(ours, "remote address: LID 0000 "+peer) {
			t.Errorf("rxe's QP %d (%s) is not one it printed, or not one we printed:\n%s\n%s", i, peer, theirs, ours)
		}
	}
}

// waitHostTCPListen waits until a socket listens on TCP port in the host
// namespace (/proc/thread-self/net: the namespace of the thread that
// reads it), or the server ends first.
func waitHostTCPListen(ctx context.Context, p *peer, port uint16, done <-chan error) error {
	pattern := fmt.Sprintf(":%04X 00000000000000000000000000000000:0000 0A", port)
	pattern4 := fmt.Sprintf(":%04X 00000000:0000 0A", port)
	for {
		var found bool
		err := p.vm.Host.Do(func() error {
			for _, f := range []string{"/proc/thread-self/net/tcp6", "/proc/thread-self/net/tcp"} {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				found = found || strings.Contains(string(b), pattern) || strings.Contains(string(b), pattern4)
			}
			return nil
		})
		switch {
		case err != nil:
			return err
		case found:
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("ndkxdp's server ended before it listened: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("no TCP listener on port %d in the host namespace: %w", port, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
