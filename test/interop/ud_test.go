package interop

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/udaddy"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

const udaddyCount = 10

// runUD runs rdma-core's udaddy (UD datagrams over rdma_cm's
// RDMA_PS_UDP) against ndkxdp's, and perftest's `ib_send_bw -c UD -R`
// and `ib_send_lat -c UD -R` against ndkxdp perf's, each side as server
// and as client: a part of every peer's full case set (runCases), so at
// both MTUs against Debian 12 and at path MTU 1024 against Debian 13.
// Pinned rxe behaviours: rxe's SIDR_REP gives Q_Key 0x01234567
// (RDMA_UDP_QKEY); rxe's datagrams arrive with the GRH rxe's receiver
// expects, so ndkxdp's answers go to the QPN and address they name; and
// rxe's udaddy server builds its reply address from the GRH ndkxdp's
// engine wrote (ibv_create_ah_from_wc accepts our IPv4 header checksum)
// and answers the QPN our SEND_WITH_IMM named.
func runUD(t *testing.T, p *peer) {
	t.Run("perftest", func(t *testing.T) { testSendBWUD(t, p) })
	t.Run("perftest_all_sizes", func(t *testing.T) { testSendBWUDAll(t, p) })
	t.Run("udaddy", func(t *testing.T) { testUdaddy(t, p) })
}

// testUdaddy runs udaddy at its default size and at the whole path MTU,
// each side as server and as client.
func testUdaddy(t *testing.T, p *peer) {
	for _, size := range []int{udaddy.DefaultSize, p.dev.Adapter.PathMTU()} {
		cfg := udaddy.Config{Count: udaddyCount, Size: size}
		t.Run(fmt.Sprintf("rxe_server/%dB", size), func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 2*time.Minute)
			var ours bytes.Buffer
			var st udaddy.Stats
			guest := p.guestServer(t, ctx, fmt.Sprintf("udaddy -b %v -C %d -S %d", GuestIPv4, udaddyCount, size), udaddy.DefaultPort, func() (err error) {
				st, err = udaddy.RunClient(ctx, p.dev.Adapter, netip.AddrPortFrom(GuestIPv4, udaddy.DefaultPort), cfg, &ours)
				return err
			})
			t.Logf("rxe's udaddy server:\n%sndkxdp's client:\n%s", guest, ours.String())
			if st.Sent != udaddyCount || st.Received != udaddyCount || st.PeerAddr != GuestIPv4 {
				t.Fatalf("ndkxdp's client: %+v", st)
			}
			if st.Peer.QKey != ndk.RDMAUDPQKey {
				t.Fatalf("rxe's SIDR_REP Q_Key %#x, want RDMA_UDP_QKEY %#x", st.Peer.QKey, ndk.RDMAUDPQKey)
			}
			for _, want := range []string{"sending replies", "data transfers complete", "return status 0"} {
				if !strings.Contains(guest, want) {
					t.Fatalf("rxe's udaddy server did not say %q:\n%s", want, guest)
				}
			}
		})
		t.Run(fmt.Sprintf("rxe_client/%dB", size), func(t *testing.T) {
			p.capture(t)
			rxeUdaddyClient(t, p, cfg, "")
		})
	}
	// -c 3: three UD QPs on the client, each resolving the server and
	// exchanging -C datagrams; rxe's server makes a QP a request, ours
	// answers all three from its one.
	conns := udaddy.Config{Count: udaddyCount, Size: udaddy.DefaultSize, Connections: 3}
	t.Run("connections/rxe_server", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		var ours bytes.Buffer
		var st udaddy.Stats
		guest := p.guestServer(t, ctx, fmt.Sprintf("udaddy -b %v -c 3 -C %d", GuestIPv4, udaddyCount), udaddy.DefaultPort, func() (err error) {
			st, err = udaddy.RunClient(ctx, p.dev.Adapter, netip.AddrPortFrom(GuestIPv4, udaddy.DefaultPort), conns, &ours)
			return err
		})
		t.Logf("rxe's udaddy server:\n%sndkxdp's client:\n%s", guest, ours.String())
		if st.Sent != 3*udaddyCount || st.Received != 3*udaddyCount {
			t.Fatalf("ndkxdp's client: %+v, want %d each way", st, 3*udaddyCount)
		}
		if !strings.Contains(guest, "data transfers complete") || !strings.Contains(guest, "return status 0") {
			t.Fatalf("rxe's udaddy server did not complete:\n%s", guest)
		}
	})
	t.Run("connections/rxe_client", func(t *testing.T) {
		p.capture(t)
		rxeUdaddyClient(t, p, conns, "")
	})
	// rxe's client with -t: its datagrams carry the TOS, and our
	// server's answers take it (ndk.UDReplyTo, as rxe's own server's
	// ibv_create_ah_from_wc does).
	t.Run("rxe_client_tos", func(t *testing.T) {
		p.capture(t)
		before := len(p.framesNow(t))
		rxeUdaddyClient(t, p, udaddy.Config{Count: udaddyCount, Size: udaddy.DefaultSize}, fmt.Sprintf(" -t %d", reqTOS))
		theirs, ours := map[uint8]int{}, map[uint8]int{}
		for _, f := range p.framesNow(t)[before:] {
			var pkt rocev2.Packet
			if rocev2.Parse(f.Data, &pkt) != nil || pkt.BTH.DestQP == rocev2.GSIQP || pkt.BTH.Opcode != rocev2.UDSendOnlyImm && pkt.BTH.Opcode != rocev2.UDSendOnly {
				continue
			}
			if f.Outgoing {
				ours[pkt.IP.TOS]++
			} else {
				theirs[pkt.IP.TOS]++
			}
		}
		t.Logf("datagrams' TOS: rxe's %v, ours %v", theirs, ours)
		if theirs[reqTOS] != udaddyCount || ours[reqTOS] != udaddyCount || len(ours) != 1 {
			t.Errorf("rxe's datagrams carried TOS %v and ours %v, want %d each of %#x", theirs, ours, udaddyCount, reqTOS)
		}
	})
}

// rxeUdaddyClient runs rxe's `udaddy -s` (with extra flags) against
// ndkxdp's udaddy server and checks that both sides moved every datagram.
func rxeUdaddyClient(t *testing.T, p *peer, cfg udaddy.Config, extra string) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	var ours bytes.Buffer
	var st udaddy.Stats
	serving := make(chan struct{})
	done := make(chan error, 1)
	scfg := cfg
	scfg.Serving = func() { close(serving) }
	go func() {
		done <- p.vm.Host.Do(func() (err error) {
			st, err = udaddy.RunServer(ctx, p.dev.Adapter, netip.AddrPortFrom(HostIPv4, udaddy.DefaultPort), scfg, &ours)
			return err
		})
	}()
	select {
	case <-serving:
	case err := <-done:
		t.Fatalf("ndkxdp's server: %v\n%s", err, ours.String())
	}
	out, errOut, code, err := p.vm.Run(ctx, fmt.Sprintf("udaddy -s %v -c %d -C %d -S %d%s", HostIPv4, max(cfg.Connections, 1), cfg.Count, cfg.Size, extra))
	serr := <-done
	t.Logf("rxe's udaddy client:\n%s%sndkxdp's server:\n%s", out, errOut, ours.String())
	if err != nil || code != 0 || serr != nil {
		t.Fatalf("rxe's client: exit %d (%v); ndkxdp's server: %v", code, err, serr)
	}
	if n := cfg.Count * max(cfg.Connections, 1); st.Received != n || st.Sent != n || st.PeerAddr != GuestIPv4 {
		t.Fatalf("ndkxdp's server: %+v, want %d each way", st, n)
	}
	if !strings.Contains(out, "data transfers complete") {
		t.Fatalf("rxe's udaddy client did not complete:\n%s", out)
	}
}

// ConnectUD lets ndkxdpConnector open perftest's UD data connection.
func (c *ndkxdpConnector) ConnectUD(ctx context.Context, port uint16, cp verbs.ConnParams) (verbs.Endpoint, error) {
	return (&ndkverbs.Connector{Dev: c.p.dev, Peer: GuestIPv4}).ConnectUD(ctx, port, cp)
}

func testSendBWUD(t *testing.T, p *peer) {
	for _, c := range []perfCase{{"ib_send_bw", perftest.Send, perftest.BW}, {"ib_send_lat", perftest.Send, perftest.Lat}} {
		// A small datagram and the whole path MTU.
		for _, size := range []int{64, p.dev.Adapter.PathMTU()} {
			testPerftestUD(t, p, c, size)
		}
	}
}

// testPerftestUD runs one perftest -c UD case both ways. Each side prints
// its own row: send_bw's server counts what it received, and both sides
// of send_lat time their round trips.
func testPerftestUD(t *testing.T, p *peer, c perfCase, size int) {
	prm := c.params(size)
	prm.MTU = p.dev.Adapter.PathMTU()
	prm.UD = true
	args := c.tool + " -c UD " + guestArgs(prm)
	t.Run(fmt.Sprintf("%s_ud/%dB/rxe_server", c.tool, size), func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, c.timeout())
		out := p.guestServer(t, ctx, args, perfPort, func() error {
			_, err := perftest.RunClient(ctx, prm, &ndkxdpConnector{p}, &ours)
			return err
		})
		theirs = out
		t.Logf("rxe server:\n%sndkxdp client:\n%s", out, ours.String())
		requireRow(t, "ndkxdp's client", ours.String(), ours.String(), prm)
		requireRow(t, "rxe's server", out, out, prm)
	})
	t.Run(fmt.Sprintf("%s_ud/%dB/rxe_client", c.tool, size), func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, c.timeout())
		out := p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
			_, err := perftest.RunServer(ctx, prm, l, &ours)
			return err
		}, sidrRetry(args+" "+HostIPv4.String()))
		theirs = out
		t.Logf("rxe client:\n%sndkxdp server:\n%s", out, ours.String())
		requireRow(t, "rxe's client", out, out, prm)
		requireRow(t, "ndkxdp's server", ours.String(), ours.String(), prm)
	})
}

// testSendBWUDAll runs ib_send_bw -c UD -a both ways: each side prints a
// row for every size from 2 bytes to the path MTU (send_bw.c:
// size_max_pow from the MTU for UD), and none beyond.
func testSendBWUDAll(t *testing.T, p *peer) {
	prm := perftest.Params{Verb: perftest.Send, Kind: perftest.BW, AllSizes: true, Iterations: 5, Port: perfPort, UD: true,
		ConnectRetry: perftest.Retry{Attempts: 100, Interval: 100 * time.Millisecond}, MTU: p.dev.Adapter.PathMTU()}
	args := fmt.Sprintf("ib_send_bw -c UD -R -d rxe0 -F -a -n 5 -p %d", perfPort)
	rows := func(t *testing.T, who, out string) {
		t.Helper()
		last := prm
		for size := 2; size <= prm.MTU; size *= 2 {
			last.Size = size
			requireRow(t, fmt.Sprintf("%s (%d bytes)", who, size), out, out, last)
		}
		if n, want := strings.Count(reportLines(out), "\n"), bitsLen(prm.MTU)-1; n != want {
			t.Errorf("%s printed %d rows, want %d (2 bytes to the MTU)", who, n, want)
		}
	}
	t.Run("ib_send_bw_ud_a/rxe_server", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, 2*time.Minute)
		theirs = p.guestServer(t, ctx, args, perfPort, func() error {
			_, err := perftest.RunClient(ctx, prm, &ndkxdpConnector{p}, &ours)
			return err
		})
		t.Logf("rxe server:\n%sndkxdp client:\n%s", reportLines(theirs), reportLines(ours.String()))
		rows(t, "ndkxdp's client", ours.String())
		rows(t, "rxe's server", theirs)
	})
	t.Run("ib_send_bw_ud_a/rxe_client", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, 2*time.Minute)
		theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
			_, err := perftest.RunServer(ctx, prm, l, &ours)
			return err
		}, sidrRetry(args+" "+HostIPv4.String()))
		t.Logf("rxe client:\n%sndkxdp server:\n%s", reportLines(theirs), reportLines(ours.String()))
		rows(t, "rxe's client", theirs)
		rows(t, "ndkxdp's server", ours.String())
	})
}

// bitsLen is the number of bits n needs (log2 of a power of two, plus 1).
func bitsLen(n int) int {
	b := 0
	for ; n > 0; n >>= 1 {
		b++
	}
	return b
}

// sidrRetry wraps a UD client command of rxe's perftest so that it runs
// again, up to 50 times 0.2s apart, while rdma_cm says the service is
// unreachable, and not once it got further. ndkxdp's perftest server
// answers SIDR for its port from its AcceptUD on (ServeUD), which runs
// after the test started the client: a SIDR_REQ that comes first is
// answered, as Linux's CM answers one for an unbound service, with status
// 1 (service not supported), which rxe's perftest reports as
// RDMA_CM_EVENT_UNREACHABLE and then dies of (exit 139; Debian 13's
// perftest met it in a CI run).
func sidrRetry(cmd string) string {
	return fmt.Sprintf(`for i in $(seq 50); do out=$(%s 2>&1); rc=$?; printf '%%s\n' "$out"; [ $rc -eq 0 ] && exit 0; case "$out" in *RDMA_CM_EVENT_UNREACHABLE*) sleep 0.2 ;; *) exit $rc ;; esac; done; exit 1`, cmd)
}
