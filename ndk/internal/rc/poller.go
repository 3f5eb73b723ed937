package rc

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

// AddPoller makes p run in the engine's loop from its next turn.
func (e *Engine) AddPoller(p Poller) error {
	return e.do(func() { e.pollers = append(e.pollers, p) })
}

// RemovePoller takes p out of the loop; when it returns, p is not running
// and never runs again on this engine.
func (e *Engine) RemovePoller(p Poller) error {
	return e.do(func() {
		for i, x := range e.pollers {
			if x == p {
				e.pollers = append(e.pollers[:i], e.pollers[i+1:]...)
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
