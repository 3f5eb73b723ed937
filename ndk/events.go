package ndk

import (
	"os"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// daemonEvents is a daemon-backed adapter's event reader: a goroutine
// that sleeps on the client's eventfd and delivers what the daemon's relay
// puts into the session's event ring (CQ notifications, fired write arms)
// with no message on the socket between.
type daemonEvents struct {
	bell    *shm.Doorbell
	file    *os.File // the bell's eventfd, in the runtime's netpoller
	ring    *shm.Consumer
	stopped atomic.Bool
	done    chan struct{}
}

func (r *daemonLink) startEvents(efd int) error {
	bell, err := shm.NewDoorbell(r.sess, proto.EventBell, efd)
	if err != nil {
		return err
	}
	// On failure the caller closes efd, which the bell would otherwise.
	ring, err := shm.NewConsumer(r.sess, proto.EventRing)
	if err != nil {
		return err
	}
	f, err := bell.File()
	if err != nil {
		return err
	}
	r.ev = &daemonEvents{bell: bell, file: f, ring: ring, done: make(chan struct{})}
	go r.readEvents()
	return nil
}

func (r *daemonLink) readEvents() {
	ev := r.ev
	defer close(ev.done)
	var e proto.Event
	for {
		for b := ev.ring.Peek(); b != nil; b = ev.ring.Peek() {
			e.Decode(b)
			ev.ring.Release()
			r.deliver(&e)
		}
		if ev.stopped.Load() || ev.ring.Err() != nil {
			return
		}
		// WaitFile returns at once for a ring since the last wait; the
		// drain above then sees its event.
		if ev.bell.WaitFile(ev.file) != nil {
			return
		}
	}
}

// deliver hands one event to the object it names.
func (r *daemonLink) deliver(e *proto.Event) {
	r.mu.RLock()
	c, q := r.cqs[e.H], r.qps[e.H]
	r.mu.RUnlock()
	switch e.Kind {
	case proto.EventCQ:
		if c != nil {
			c.notifyQueue(Status(e.Status))
		}
	case proto.EventPeerWrite:
		if q != nil {
			q.peerWrite()
		}
	}
}

// stopEvents ends the event reader: it wakes it through its own doorbell.
func (r *daemonLink) stopEvents() {
	ev := r.ev
	if ev == nil {
		return
	}
	ev.stopped.Store(true)
	ev.bell.Ring()
	<-ev.done
	ev.file.Close()
	ev.bell.Close()
}
