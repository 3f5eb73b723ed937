package daemon

import (
	"encoding/json"
	"os"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// A live capture (ndkxdp dump): admin_dump turns on a bounded ring that
// every engine's port offers its frames to (port.TapRing: a copy into a
// free slot, or a counted drop, never a wait), and a goroutine of the
// session streams the ring's frames to the client as EvFrames events
// until the client goes. One capture runs at a time.

// EvFrames carries captured frames: Raw is a []DumpFrame, Raw2 a
// DumpCounts.
const EvFrames = "frames"

// Bounds on a capture: the bytes kept of each frame, and the ring's
// memory.
const (
	DefaultSnap  = 256
	MaxSnap      = 10240
	dumpRingSize = 8 << 20
	dumpSlots    = 4096
	dumpBatch    = 40 << 10 // bytes of an event's frames as JSON (base64 data and fields), under proto.MaxMessage
)

// DumpFrame is one captured frame.
type DumpFrame struct {
	Time   int64  `json:"t"` // Unix nanoseconds
	Queue  int    `json:"q"`
	Out    bool   `json:"out,omitempty"`
	Length int    `json:"len"`
	Data   []byte `json:"data"`
}

// DumpCounts are the frames the engines offered to the capture so far
// and those it dropped (ring full or busy).
type DumpCounts struct {
	Seen    uint64 `json:"seen"`
	Dropped uint64 `json:"dropped"`
}

func (ss *session) dump(req *proto.AdminDump) error {
	// A capture holds other applications' payload bytes: only root or
	// the daemon's own user may take one, not every member of the
	// socket's group.
	if uid := ss.cred.Uid; uid != 0 && uid != uint32(os.Getuid()) {
		return statusErr(ndk.StatusAccessViolation, "a capture shows every application's traffic: uid %d may not take one (root or the daemon's user may)", uid)
	}
	p, err := ss.srv.provider()
	if err != nil {
		return err
	}
	snap := int(req.Len)
	if snap == 0 {
		snap = DefaultSnap
	}
	if snap < 64 || snap > MaxSnap {
		return statusErr(ndk.StatusInvalidParameter, "snap length %d outside [64, %d]", snap, MaxSnap)
	}
	queues := max(len(p.Ports()), 1)
	r := port.NewTapRing(queues, min(dumpSlots, dumpRingSize/snap/queues), snap)
	if !p.StartTap(r) {
		return statusErr(ndk.StatusSharingViolation, "another capture runs on this daemon")
	}
	ss.log.Info("capture started", "snap", snap)
	go func() {
		defer func() {
			p.StopTap(r)
			ss.log.Info("capture stopped", "seen", r.Seen(), "dropped", r.Drops())
		}()
		var buf [256]port.TapFrame
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		var last DumpCounts
		for {
			select {
			case <-ss.ctx.Done():
				return
			case <-r.Wake():
			case <-tick.C:
			}
			// Bounded: at most a ring's worth of frames per wake-up.
			for range dumpSlots/len(buf) + 1 {
				n := r.Take(buf[:])
				if n == 0 {
					break
				}
				ss.sendFrames(r, buf[:n])
			}
			if c := (DumpCounts{Seen: r.Seen(), Dropped: r.Drops()}); c != last {
				last = c
				ss.sendFrames(r, nil)
			}
		}
	}()
	return nil
}

// sendFrames sends fs in events of at most dumpBatch bytes of JSON (an
// event with the counts alone when fs is empty).
func (ss *session) sendFrames(r *port.TapRing, fs []port.TapFrame) {
	for first := true; first || len(fs) > 0; first = false {
		var out []DumpFrame
		size := 0
		for len(fs) > 0 && (len(out) == 0 || size+encodedSize(fs[0]) <= dumpBatch) {
			f := fs[0]
			out = append(out, DumpFrame{Time: f.Time.UnixNano(), Queue: f.Queue, Out: f.Out, Length: f.Length, Data: f.Data})
			size += encodedSize(f)
			fs = fs[1:]
		}
		raw, _ := json.Marshal(out)
		raw2, _ := json.Marshal(DumpCounts{Seen: r.Seen(), Dropped: r.Drops()})
		ss.send(&proto.Message{Ev: EvFrames, Raw: raw, Raw2: raw2})
	}
}

// encodedSize bounds a frame's bytes in an event: its data in base64 and
// its fields.
func encodedSize(f port.TapFrame) int { return (len(f.Data)+2)/3*4 + 96 }
