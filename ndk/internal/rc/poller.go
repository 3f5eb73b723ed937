package rc

import (
	"errors"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
)

// Poller is work that runs on an engine's goroutine, in every turn of its
// loop: the daemon's relay, which moves its clients' posts from shared
// rings onto QPs and completions back, without a goroutine of its own
// between the client and the engine. Poll returns how much it did (the
// engine counts it as work, which keeps it spinning); Idle runs just
// before the engine sleeps, so the poller can arrange to be woken (its
// wake-ups ring the engine's port doorbell). Both must be quick and must
// not block: they hold up every QP of the engine.
type Poller interface {
	Poll() int
	Idle()
}

// Waker is a Poller with a doorbell of its own: the engine's sleep also
// ends when WakeFD, an eventfd, becomes readable, and the port resets it.
// A daemon client rings its session's relay this way, so that no word or
// descriptor that wakes the engine is shared between two clients.
type Waker interface {
	Poller
	WakeFD() int
}

// watcher is a port that can sleep on other eventfds besides its own
// (port.XSK).
type watcher interface {
	Watch(efd int)
	Unwatch(efd int)
}

// AddPoller makes p run in the engine's loop from its next turn. A Waker
// needs a port that can watch its descriptor.
func (e *Engine) AddPoller(p Poller) error {
	var w watcher
	if _, ok := p.(Waker); ok {
		if w, ok = port.Inner(e.port).(watcher); !ok {
			return errors.New("rc: the engine's port cannot sleep on a poller's doorbell")
		}
	}
	return e.do(func() {
		e.pollers = append(e.pollers, p)
		if w != nil {
			w.Watch(p.(Waker).WakeFD())
		}
	})
}

// RemovePoller takes p out of the loop; when it returns, p is not running
// and never runs again on this engine, and a Waker's descriptor is no
// longer watched (it may be closed).
func (e *Engine) RemovePoller(p Poller) error {
	return e.do(func() {
		for i, x := range e.pollers {
			if x == p {
				e.pollers = append(e.pollers[:i], e.pollers[i+1:]...)
				if k, ok := p.(Waker); ok {
					port.Inner(e.port).(watcher).Unwatch(k.WakeFD())
				}
				return
			}
		}
	})
}

func (e *Engine) runPollers() int {
	n := 0
	for _, p := range e.pollers {
		n += p.Poll()
	}
	return n
}
