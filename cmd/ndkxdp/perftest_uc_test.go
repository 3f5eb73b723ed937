package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestPerfUC runs perftest's send and write tests with -c UC over a veth
// pair, with the control messages over TCP and through rdma_cm (-z; -R
// refuses UC, as perftest does), each with report rows on both sides. Over TCP every RoCEv2 frame in the
// server's capture is the test's, and each is a UC SEND or RDMA WRITE
// without AckReq: nothing comes back to acknowledge them.
func TestPerfUC(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	for _, tc := range []struct {
		test string
		more []string
	}{
		// A send test's messages are one packet each: 300 of them fit the
		// receiver's rings even if its engine stalls, and nothing would
		// resend what they lost (the default 64 KiB messages, 64 packets
		// each, overran them on a loaded machine; perftest's server then
		// waits for the lost ones, as perftest's does).
		{"send_bw", []string{"-comm", "tcp", "-s", "1024"}},
		{"write_bw", []string{"-comm", "tcp", "-s", "4096"}},
		{"send_lat", []string{"-comm", "tcp"}},
		{"write_lat", []string{"-comm", "tcp"}},
		// -z: the control messages through rdma_cm, the UC data QPs
		// connected out of band; without -comm the sides talk TCP.
		{"send_bw", []string{"-z", "-s", "1024"}},
		{"write_lat", []string{"-z"}},
		{"write_bw", []string{"-q", "2"}},
	} {
		t.Run(tc.test+strings.Join(tc.more, ""), func(t *testing.T) {
			capture := filepath.Join(t.TempDir(), "server.pcap")
			common := slices.Concat([]string{"perf", tc.test, "-c", "UC", "-n", "300"}, tc.more)
			cout, sout := runBoth(t, p,
				slices.Concat(common, []string{"-capture", capture, "-dev", p.B.Link}),
				slices.Concat(common, []string{srv, "-dev", p.A.Link}))
			t.Logf("client:\n%s\nserver:\n%s", cout, sout)
			if len(perfRows(cout)) == 0 || len(perfRows(sout)) == 0 {
				t.Fatal("no report rows")
			}
			if !strings.Contains(sout, "unreliable connection (-c UC") {
				t.Fatalf("the server does not say it runs UC:\n%s", sout)
			}
			c, err := pcapfile.ReadFile(capture)
			if err != nil {
				t.Fatal(err)
			}
			uc := 0
			for _, pk := range c.Packets {
				var pkt rocev2.Packet
				if rocev2.Parse(pk.Data, &pkt) != nil {
					continue
				}
				if pkt.BTH.Opcode.Transport() == rocev2.TransportUC {
					uc++
					if pkt.BTH.AckReq {
						t.Fatalf("%v asks for an ACK", pkt.BTH.Opcode)
					}
				} else if slices.Contains(tc.more, "tcp") {
					t.Fatalf("a %v frame in a UC run whose control is over TCP", pkt.BTH.Opcode)
				}
			}
			if uc < 300 {
				t.Fatalf("%d UC frames in the capture, want the 300 iterations' at least", uc)
			}
		})
	}
	// A server that waits for more SENDs than arrive (here: more than the
	// client sends) says how many came once none did for UCStall, where
	// perftest's would wait for good.
	t.Run("lost", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var sout, serr, cout, cerr bytes.Buffer
		done := make(chan error, 1)
		go func() {
			done <- p.B.Do(func() error {
				return run(ctx, []string{"perf", "send_bw", "-c", "UC", "-s", "1024", "-n", "200", "-comm", "tcp", "-p", "18520", "-dev", p.B.Link}, &sout, &serr)
			})
		}()
		time.Sleep(300 * time.Millisecond)
		_ = p.A.Do(func() error {
			return run(ctx, []string{"perf", "send_bw", "-c", "UC", "-s", "1024", "-n", "100", "-comm", "tcp", "-p", "18520", "-timeout", "20s", srv, "-dev", p.A.Link}, &cout, &cerr)
		})
		start := time.Now()
		err := <-done
		if !errors.Is(err, perftest.ErrUCLost) || !strings.Contains(err.Error(), "100 of 200 SENDs arrived") {
			t.Fatalf("server: %v, want ErrUCLost after 100 of 200\n%s%s", err, sout.String(), serr.String())
		}
		if waited := time.Since(start); waited > perftest.UCStall+5*time.Second {
			t.Fatalf("the server took %v after the client ended", waited)
		}
	})
}
