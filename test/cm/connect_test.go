package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/testhooks"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestConnectExchangeDisconnect connects, exchanges data both ways and
// disconnects from one side, over IPv4 and IPv6: the disconnecting side's
// Disconnect returns after the peer's DREP, the other side gets its
// disconnect event once, and both QPs leave the connected state.
func TestConnectExchangeDisconnect(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		for _, tc := range []struct {
			name          string
			v6            bool
			passiveCloses bool
		}{
			{"IPv4/active-disconnects", false, false},
			{"IPv4/passive-disconnects", false, true},
			{"IPv6/active-disconnects", true, false},
			{"IPv6/passive-disconnects", true, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p, a, b := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
				dstIP := p.B.IPv4
				if tc.v6 {
					dstIP = p.B.IPv6
				}
				srv := serve(t, b, netip.AddrPortFrom(dstIP, 4791), []byte("from the listener"))
				cl := dial(t, a, netip.AddrPortFrom(dstIP, 4791), []byte("from the connector"))
				sc := srv.next(t)

				if !bytes.HasPrefix(sc.data, []byte("from the connector\x00")) || len(sc.data) != ndk.MaxCallerData {
					t.Fatalf("REQ private data %q (%d bytes)", sc.data, len(sc.data))
				}
				rep := make([]byte, ndk.MaxCalleeData)
				in, out, n, err := cl.c.GetConnectionData(rep)
				if err != nil || n != ndk.MaxCalleeData || !bytes.HasPrefix(rep, []byte("from the listener\x00")) {
					t.Fatalf("REP private data %q (%d), %v", rep[:20], n, err)
				}
				if in != 4 || out != 4 {
					t.Fatalf("effective read limits %d/%d, want 4/4", in, out)
				}
				wantLocal := p.A.IPv4
				if tc.v6 {
					wantLocal = p.A.IPv6
				}
				local, peer := cl.c.LocalAddress(), sc.c.PeerAddress()
				if local != peer || local.Addr() != wantLocal {
					t.Fatalf("active local address %v, passive sees peer %v", local, peer)
				}
				if sc.c.LocalAddress() != netip.AddrPortFrom(dstIP, 4791) || cl.c.PeerAddress() != sc.c.LocalAddress() {
					t.Fatalf("passive local %v, active peer %v", sc.c.LocalAddress(), cl.c.PeerAddress())
				}

				exchange(t, a, b, cl.qp, sc.rb, []byte("ping over RC"))
				exchange(t, b, a, sc.qp, cl.rb, []byte("pong over RC"))

				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				quitter, other := cl.c, sc.c
				otherEvent, ownEvent := sc.disconnected, cl.disconnected
				if tc.passiveCloses {
					quitter, other = sc.c, cl.c
					otherEvent, ownEvent = cl.disconnected, sc.disconnected
				}
				if err := quitter.Disconnect(ctx); err != nil {
					t.Fatalf("disconnect: %v", err)
				}
				closed(t, "the peer's disconnect event", otherEvent, 5*time.Second)
				notClosed(t, "the disconnecting side got a disconnect event", ownEvent, 100*time.Millisecond)
				// The peer's own Disconnect after the event succeeds (its QP
				// drained), and a second one is refused.
				if err := other.Disconnect(ctx); err != nil {
					t.Fatalf("disconnect after the event: %v", err)
				}
				if err := quitter.Disconnect(ctx); !errors.Is(err, ndk.ErrConnectionInvalid) {
					t.Fatalf("second disconnect: %v", err)
				}
				if cl.qp.Connected() || sc.qp.Connected() {
					t.Fatal("a QP is still connected")
				}
				// Requests posted after the disconnect are cancelled.
				if err := cl.qp.Send("late", cl.rb.sgl(8), 0); err != nil {
					t.Fatal(err)
				}
				if r := waitResultAny(t, a.ICQ); r.Status != ndk.StatusCancelled {
					t.Fatalf("send after disconnect completed %v", r.Status)
				}
				for _, c := range []*ndk.Connector{cl.c, sc.c} {
					c.Close()
					closed(t, "connector close", c.Closed(), 5*time.Second)
				}
				s := a.Adapter.CMStats()
				if s.Sent[rocev2.AttrREQ] != 1 || s.Received[rocev2.AttrREP] != 1 {
					t.Fatalf("active side sent %d REQs and received %d REPs, want 1 each (stats %+v)", s.Sent[rocev2.AttrREQ], s.Received[rocev2.AttrREP], s)
				}
			})
		}
	})
}

func waitResultAny(t testing.TB, c *ndk.CQ) ndk.ResultEx {
	t.Helper()
	var r [1]ndk.ResultEx
	for deadline := time.Now().Add(5 * time.Second); c.GetResultsEx(r[:]) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no completion within 5s")
		}
	}
	return r[0]
}

// TestRejectWithPrivateData: the listener rejects; Connect fails with
// CONNECTION_REFUSED and GetConnectionData holds the REJ's private data.
func TestRejectWithPrivateData(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, b := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
		asked := make(chan []byte, 1)
		rejected := make(chan error, 1)
		l, err := b.Adapter.CreateListener(func(c *ndk.Connector) {
			_, _, n, _ := c.GetConnectionData(nil)
			d := make([]byte, n)
			c.GetConnectionData(d)
			asked <- d
			rejected <- c.Reject([]byte("no room at the inn"))
			c.Close()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := l.Listen(netip.AddrPortFrom(p.B.IPv4, 7000)); err != nil {
			t.Fatal(err)
		}
		cl, err := tryDial(t, a, netip.AddrPort{}, netip.AddrPortFrom(p.B.IPv4, 7000), []byte("may I?"))
		var re *ndk.RejectError
		if !errors.Is(err, ndk.ErrConnectionRefused) || !errors.As(err, &re) || re.Reason != rocev2.RejConsumerDefined || !bytes.HasPrefix(re.PrivateData, []byte("no room at the inn\x00")) {
			t.Fatalf("connect: %v, want CONNECTION_REFUSED with a RejectError of reason 28 and the listener's private data", err)
		}
		// Reject's return may follow the REJ's arrival (through a daemon,
		// its reply is a message of its own): wait for it before the
		// test ends and closes the adapter.
		if err := <-rejected; err != nil {
			t.Fatal(err)
		}
		if d := <-asked; !bytes.HasPrefix(d, []byte("may I?\x00")) {
			t.Fatalf("listener saw %q", d[:8])
		}
		rej := make([]byte, ndk.MaxRejectData)
		if _, _, n, err := cl.c.GetConnectionData(rej); err != nil || n != ndk.MaxRejectData || !bytes.HasPrefix(rej, []byte("no room at the inn\x00")) {
			t.Fatalf("REJ private data %q (%d), %v", rej[:20], n, err)
		}
		if err := cl.c.CompleteConnect(nil); !errors.Is(err, ndk.ErrConnectionRefused) {
			t.Fatalf("CompleteConnect after a rejection: %v", err)
		}
	})
}

// TestRefusedAndUnreachable: nobody listens on the port; the address has
// no route; nobody answers ARP for it.
func TestRefusedAndUnreachable(t *testing.T) {
	// Each case's error reads the same in both modes.
	texts := map[string]string{}
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, _ := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
		for _, tc := range []struct {
			name string
			dst  netip.AddrPort
			want error
		}{
			{"no-listener", netip.AddrPortFrom(p.B.IPv4, 5555), ndk.ErrConnectionRefused},
			{"no-listener-IPv6", netip.AddrPortFrom(p.B.IPv6, 5555), ndk.ErrConnectionRefused},
			{"no-route", netip.MustParseAddrPort("198.19.7.7:5555"), ndk.ErrNetworkUnreachable},
			{"no-neighbour", netip.MustParseAddrPort("198.18.0.77:5555"), ndk.ErrHostUnreachable},
			{"multicast", netip.MustParseAddrPort("239.1.1.1:5555"), ndk.ErrInvalidAddress},
			{"no-port", netip.AddrPortFrom(p.B.IPv4, 0), ndk.ErrInvalidAddress},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := tryDial(t, a, netip.AddrPort{}, tc.dst, nil)
				if !errors.Is(err, tc.want) {
					t.Fatalf("connect to %v: %v, want %v", tc.dst, err, tc.want)
				}
				// The text names the operation and the status once, and
				// reads the same in both modes (the daemon's reply carries
				// the detail and the cause apart).
				if n := strings.Count(err.Error(), "(STATUS_"); n != 1 {
					t.Errorf("connect to %v: %q names a status %d times", tc.dst, err, n)
				}
				if prev, ok := texts[tc.name]; ok && prev != err.Error() {
					t.Errorf("connect to %v: %q, in the other mode %q", tc.dst, err, prev)
				}
				texts[tc.name] = err.Error()
				// Nobody listening is REJ reason 8, which a client that
				// waits for a server retries on (perftest -R).
				var re *ndk.RejectError
				if tc.want == ndk.ErrConnectionRefused && (!errors.As(err, &re) || re.Reason != rocev2.RejInvalidServiceID) {
					t.Fatalf("connect to %v: %v, want a RejectError of reason 8", tc.dst, err)
				}
			})
		}
		// A source address that is not the adapter's.
		_, err := tryDial(t, a, netip.MustParseAddrPort("198.18.0.9:0"), netip.AddrPortFrom(p.B.IPv4, 5555), nil)
		if !errors.Is(err, ndk.ErrInvalidAddress) && !errors.Is(err, ndk.ErrNetworkUnreachable) {
			t.Fatalf("connect from a foreign address: %v", err)
		}
	})
}

// TestListenerClosedWhileConnectionsLive: closing the listener refuses new
// requests at once, leaves its connection working, keeps the port taken
// until the connection's connector closes, and completes only then.
func TestListenerClosedWhileConnectionsLive(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, b := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
		addr := netip.AddrPortFrom(p.B.IPv4, 6000)
		srv := serve(t, b, addr, nil)
		cl := dial(t, a, addr, nil)
		sc := srv.next(t)

		srv.l.Close()
		notClosed(t, "listener close completed while its connector is open", srv.l.Closed(), 200*time.Millisecond)
		if _, err := tryDial(t, a, netip.AddrPort{}, addr, nil); !errors.Is(err, ndk.ErrConnectionRefused) {
			t.Fatalf("connect to a closed listener: %v", err)
		}
		exchange(t, a, b, cl.qp, sc.rb, []byte("still here"))

		l2, err := b.Adapter.CreateListener(func(c *ndk.Connector) { c.Close() })
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Close()
		if err := l2.Listen(addr); !errors.Is(err, ndk.ErrSharingViolation) {
			t.Fatalf("listen on a port a live connector holds: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := cl.c.Disconnect(ctx); err != nil {
			t.Fatal(err)
		}
		sc.c.Close()
		closed(t, "listener close after its connector closed", srv.l.Closed(), 5*time.Second)
		if err := l2.Listen(addr); err != nil {
			t.Fatalf("listen after the last connector closed: %v", err)
		}
	})
}

// TestPortZeroPausedAndShared: a listener on port 0 gets an ephemeral
// port; paused connect events refuse; two connectors share one endpoint.
func TestPortZeroPausedAndShared(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, b := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
		srv := serve(t, b, netip.AddrPortFrom(p.B.IPv4, 0), nil)
		addr := srv.l.LocalAddress()
		if addr.Addr() != p.B.IPv4 || addr.Port() < 49152 {
			t.Fatalf("port 0 listener on %v", addr)
		}
		srv.l.ControlConnectEvents(true)
		if _, err := tryDial(t, a, netip.AddrPort{}, addr, nil); !errors.Is(err, ndk.ErrConnectionRefused) {
			t.Fatalf("connect to a paused listener: %v", err)
		}
		srv.l.ControlConnectEvents(false)

		se, err := a.Adapter.CreateSharedEndpoint(netip.AddrPortFrom(p.A.IPv4, 0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Adapter.CreateSharedEndpoint(se.LocalAddress()); !errors.Is(err, ndk.ErrSharingViolation) {
			t.Fatalf("second endpoint on %v: %v", se.LocalAddress(), err)
		}
		if _, err := a.Adapter.CreateSharedEndpoint(netip.MustParseAddrPort("198.18.0.99:0")); !errors.Is(err, ndk.ErrInvalidAddress) {
			t.Fatalf("endpoint on a foreign address: %v", err)
		}
		// Two connections share the endpoint's address and port; only the
		// 4-tuple must differ, so a second one to the same listener is refused.
		srv2 := serve(t, b, netip.AddrPortFrom(p.B.IPv4, 0), nil)
		var clients []*ndk.Connector
		for i, s := range []*server{srv, srv2, srv} {
			c, err := a.Adapter.CreateConnector()
			if err != nil {
				t.Fatal(err)
			}
			q := a.qp()
			err = c.ConnectWithSharedEndpoint(context.Background(), q, se, s.l.LocalAddress(), 1, 1, nil)
			if i == 2 {
				if !errors.Is(err, ndk.ErrAddressAlreadyExists) {
					t.Fatalf("a second connection with the same 4-tuple: %v", err)
				}
				c.Close()
				break
			}
			if err != nil {
				t.Fatalf("connection %d over the shared endpoint: %v", i, err)
			}
			if err := c.CompleteConnect(nil); err != nil {
				t.Fatal(err)
			}
			if c.LocalAddress() != se.LocalAddress() {
				t.Fatalf("connector local %v, endpoint %v", c.LocalAddress(), se.LocalAddress())
			}
			s.next(t)
			clients = append(clients, c)
		}
		// Its address stays taken while connectors use it.
		se.Close()
		if _, err := a.Adapter.CreateSharedEndpoint(se.LocalAddress()); !errors.Is(err, ndk.ErrSharingViolation) {
			t.Fatalf("endpoint reused while connectors hold it: %v", err)
		}
		for _, c := range clients {
			c.Close()
			closed(t, "connector close", c.Closed(), 5*time.Second)
		}
		se2, err := a.Adapter.CreateSharedEndpoint(se.LocalAddress())
		if err != nil {
			t.Fatalf("endpoint after its connectors closed: %v", err)
		}
		se2.Close()
	})
}

// TestConnectCancelled: a context that ends while the REQ goes unanswered
// returns CANCELLED and releases the connector.
func TestConnectCancelled(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, b := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
		testhooks.SetMADFaults(b.Served, func([]byte) (int, time.Duration) { return 0, 0 })
		l, err := b.Adapter.CreateListener(func(c *ndk.Connector) { c.Close() })
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := l.Listen(netip.AddrPortFrom(p.B.IPv4, 6001)); err != nil {
			t.Fatal(err)
		}
		c, err := a.Adapter.CreateConnector()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err = c.Connect(ctx, a.qp(), netip.AddrPort{}, netip.AddrPortFrom(p.B.IPv4, 6001), 1, 1, nil)
		if !errors.Is(err, ndk.ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("connect with an ended context: %v", err)
		}
		closed(t, "connector close after cancellation", c.Closed(), 5*time.Second)
	})
}
