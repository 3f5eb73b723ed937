package interop

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/udaddy"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// udaddySizes: udaddy's default and the whole path MTU (1024 at the
// shared VM's MTU 1500).
var udaddySizes = []int{udaddy.DefaultSize, 1024}

const udaddyCount = 10

// TestInteropUD runs rdma-core's udaddy (UD datagrams over rdma_cm's
// RDMA_PS_UDP) against ndkxdp's, each side as server and as client.
// Pinned rxe behaviours: rxe's SIDR_REP gives Q_Key 0x01234567
// (RDMA_UDP_QKEY); rxe's datagrams arrive with the GRH rxe's receiver
// expects, so ndkxdp's answers go to the QPN and address they name; and
// rxe's udaddy server builds its reply address from the GRH ndkxdp's
// engine wrote (ibv_create_ah_from_wc accepts our IPv4 header checksum)
// and answers the QPN our SEND_WITH_IMM named.
func TestInteropUD(t *testing.T) {
	p := attach(t, sharedVM(t))
	for _, size := range udaddySizes {
		if size > int(p.dev.Adapter.PathMTU()) {
			continue
		}
		cfg := udaddy.Config{Count: udaddyCount, Size: size}
		t.Run(fmt.Sprintf("udaddy/rxe_server/%dB", size), func(t *testing.T) {
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
		t.Run(fmt.Sprintf("udaddy/rxe_client/%dB", size), func(t *testing.T) {
			p.capture(t)
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
			out, errOut, code, err := p.vm.Run(ctx, fmt.Sprintf("udaddy -s %v -C %d -S %d", HostIPv4, udaddyCount, size))
			serr := <-done
			t.Logf("rxe's udaddy client:\n%s%sndkxdp's server:\n%s", out, errOut, ours.String())
			if err != nil || code != 0 || serr != nil {
				t.Fatalf("rxe's client: exit %d (%v); ndkxdp's server: %v", code, err, serr)
			}
			if st.Received != udaddyCount || st.Sent != udaddyCount || st.PeerAddr != GuestIPv4 {
				t.Fatalf("ndkxdp's server: %+v", st)
			}
			if !strings.Contains(out, "data transfers complete") {
				t.Fatalf("rxe's udaddy client did not complete:\n%s", out)
			}
		})
	}
}
