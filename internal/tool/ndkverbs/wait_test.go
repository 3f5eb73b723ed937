package ndkverbs

import (
	"context"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// TestWaitMissesNothing plays ib_write_lat's and then ib_send_lat's
// ping-pong, blocking in Wait after every empty Peek or Poll, so the
// window between a WRITE's placement or a completion and the arm is hit
// over and over: a wake-up lost there
// leaves one side blocked for good, and the test's deadline fails it.
// Wait also returns at once for a peer that has gone.
func TestWaitMissesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, srv := connectedPair(ctx, t)
	const rounds = 3000
	type side struct {
		ep  verbs.Endpoint
		buf verbs.Region
	}
	var s [2]side
	for i, ep := range []verbs.Endpoint{cli, srv} {
		r, err := ep.Register(make([]byte, 64), verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = side{ep, r}
		for range 4 {
			if err := ep.Receive(2, mustSeg(t, r, 32, 8)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, send := range []bool{false, true} {
		errc := make(chan error, 2)
		for i := range s {
			me, peer := s[i], s[1-i]
			go func() { errc <- pingPong(ctx, me.ep, me.buf, peer.buf, i == 0, send, rounds) }()
		}
		for range s {
			if err := <-errc; err != nil {
				t.Fatalf("send %v: %v", send, err)
			}
		}
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	for {
		if _, err := srv.Poll(make([]verbs.Completion, 4)); err != nil {
			break
		}
		if err := srv.Wait(wctx); err != nil {
			t.Fatalf("Wait after the peer closed: %v", err)
		}
	}
	srv.Close()
}

func mustSeg(t *testing.T, r verbs.Region, off, n int) verbs.Segment {
	s, err := r.Seg(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pingPong is a ping-pong of WRITEs of the round number into the peer's
// byte 0, or of SENDs, the client first.
func pingPong(ctx context.Context, ep verbs.Endpoint, mine, theirs verbs.Region, first, send bool, rounds int) error {
	var out [4]verbs.Completion
	sends, recvs, writes := 0, 0, 0
	awaitByte := func(want byte) error {
		for ep.Peek(mine, 0) != want {
			if err := ep.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	poll := func(cond func() bool) error {
		for !cond() {
			k, err := ep.Poll(out[:])
			if err != nil {
				return err
			}
			for _, c := range out[:k] {
				switch {
				case c.Err != nil:
					return c.Err
				case c.Op == verbs.OpSend:
					sends++
				case c.Op == verbs.OpWrite:
					writes++
				case c.Op == verbs.OpReceive:
					recvs++
					if err := ep.Receive(2, mustSegNoT(mine, 32, 8)); err != nil {
						return err
					}
				}
			}
			if k == 0 {
				if err := ep.Wait(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	src := mustSegNoT(mine, 8, 1)
	await := func(r int) error {
		if send {
			return poll(func() bool { return recvs >= r })
		}
		return awaitByte(byte(r))
	}
	for r := 1; r <= rounds; r++ {
		if !first || r > 1 {
			if err := await(r - boolInt(first)); err != nil {
				return err
			}
		}
		src.Bytes()[0] = byte(r)
		var err error
		if send {
			err = ep.Send(3, src, true)
		} else {
			err = ep.Write(1, src, theirs.Addr, theirs.RKey, true)
		}
		if err != nil {
			return err
		}
		if err := poll(func() bool { return writes+sends >= r }); err != nil {
			return err
		}
	}
	if first { // the peer's last round
		if err := await(rounds); err != nil {
			return err
		}
	}
	return nil
}

func mustSegNoT(r verbs.Region, off, n int) verbs.Segment {
	s, _ := r.Seg(off, n)
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestWaitSeesWriteSincePeek: a WRITE placed between an empty Peek and
// Wait's arm sends no token; Wait must see it in the count and return at
// once rather than block (the lost wake-up that stalls ib_write_lat).
func TestWaitSeesWriteSincePeek(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli, ep := connectedPair(ctx, t)
	srv := ep.(*Endpoint)
	if srv == nil {
		t.FailNow()
	}
	defer cli.Close()
	defer srv.Close()
	target, err := srv.Register(make([]byte, 8), verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	src, err := cli.Register([]byte{42}, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if v := srv.Peek(target, 0); v != 0 {
		t.Fatalf("byte %d before the write", v)
	}
	before := srv.qp.PeerWrites()
	if err := cli.Write(1, mustSeg(t, src, 0, 1), target.Addr, target.RKey, true); err != nil {
		t.Fatal(err)
	}
	for srv.qp.PeerWrites() == before { // placed, and not Peeked
		if ctx.Err() != nil {
			t.Fatal("the WRITE was never placed")
		}
	}
	for len(srv.wake) > 0 { // no token from earlier events
		<-srv.wake
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	if err := srv.Wait(wctx); err != nil {
		t.Fatalf("Wait after a WRITE placed since the last Peek: %v", err)
	}
	if v := srv.Peek(target, 0); v != 42 {
		t.Fatalf("byte %d after the write, want 42", v)
	}
}

// connectedPair connects a client endpoint to a server endpoint over two
// adapters on a veth pair (out-of-band, one outstanding READ each way).
func connectedPair(ctx context.Context, t *testing.T) (cli, srv verbs.Endpoint) {
	t.Helper()
	a, b := newSides(t, 1500)
	n := &oobNet{client: a, server: b}
	n.listen(1)
	cp := verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1}
	got := make(chan verbs.Endpoint, 1)
	go func() {
		ep, err := oobListener{n, 1}.Accept(ctx, cp)
		if err != nil {
			t.Error(err)
		}
		got <- ep
	}()
	cli, err := n.Connect(ctx, 1, cp)
	if err != nil {
		t.Fatal(err)
	}
	if srv = <-got; srv == nil {
		t.FailNow()
	}
	return cli, srv
}
