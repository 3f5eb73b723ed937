package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// The classes of client input that end the client's own session and
// nothing else: each test shows the daemon still serving a well-behaved
// client afterwards, the hostile session closed, and the end counted
// under its reason; a control shows that the same input within what the
// client was given is served.

// ended waits for the hostile client's socket to close, the daemon's
// answer to input no correct client sends.
func (r *raw) ended(t *testing.T) {
	t.Helper()
	buf := make([]byte, proto.MaxMessage)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_ = r.c.SetReadDeadline(deadline)
		n, _, _, _, err := r.c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return
		}
	}
	t.Fatal("the daemon did not end the hostile session")
}

// endedFor returns how many sessions the daemon ended for reason.
func (bd *bed) endedFor(t *testing.T, reason string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st daemon.Status
	if err := daemon.Query(ctx, bd.sock, daemon.OpAdminStatus, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ended[reason]
}

// TestHostileBitmapSlot: a post or arm bit for a QP slot beyond every slot
// the session was given indexes nothing of the daemon's: the session ends,
// the daemon and the other sessions go on. Control: a bit of a freed slot
// (a post racing a close, which a correct client may make) is ignored.
func TestHostileBitmapSlot(t *testing.T) {
	bd := newBed(t)
	for _, bitmap := range []struct {
		name string
		off  int
	}{{"post", proto.PostBitmap}, {"arm", proto.ArmBitmap}} {
		t.Run(bitmap.name, func(t *testing.T) {
			before := bd.endedFor(t, "ring")
			r := dialRaw(t, bd.sock)
			pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
			q := r.qp(pd.H)
			gone := r.qp(pd.H)
			r.ok(&proto.Request{Op: proto.OpCloseQP, H: gone.h})
			// Control: the freed slot's bit, then the live QP's.
			w, bit := proto.SlotWord(gone.slot)
			r.sess.Word64(bitmap.off + 8*w).Or(bit)
			r.post(q)
			r.bell.Ring()
			r.ok(&proto.Request{Op: proto.OpCreatePD})
			if n := bd.endedFor(t, "ring"); n != before {
				t.Fatalf("a freed slot's bit ended the session (%d ended)", n-before)
			}
			// The last bit of the first word: slot 63 of a session given 2.
			r.sess.Word64(bitmap.off).Or(1 << 63)
			r.bell.Ring()
			r.ended(t)
			bd.healthy(t)
			if n := bd.endedFor(t, "ring"); n != before+1 {
				t.Fatalf("sessions ended for ring input: %d, want %d", n, before+1)
			}
		})
	}
}
