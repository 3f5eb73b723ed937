package ndk

import "github.com/ndkxdp/ndkxdp/ndk/internal/rc"

// inprocSRQ is the in-process provider's SRQ (backend.go): the engines'
// shared ring (rc.SRQ), and the goroutine that calls the consumer back.
type inprocSRQ struct {
	s       *SRQ
	rc      *rc.SRQ
	stop    chan struct{} // ends the notification goroutine
	stopped chan struct{} // closed when it has ended
}

// notifications calls the consumer's callback for each limit event, one at
// a time, until the SRQ closes.
func (b *inprocSRQ) notifications() {
	defer close(b.stopped)
	for {
		select {
		case <-b.stop:
			return
		case <-b.rc.Events():
			if b.s.notify != nil {
				b.s.notify(StatusSuccess)
			}
		}
	}
}

func (b *inprocSRQ) receive(ctx any, sgl []SGE) error {
	if st := b.rc.PostReceive(ctx, engineSGL(sgl)); st != StatusSuccess {
		return postError("receive", st)
	}
	return nil
}

func (b *inprocSRQ) modify(depth, notifyThreshold int) error {
	switch st := b.rc.Modify(depth, notifyThreshold); st {
	case StatusSuccess:
		return nil
	case StatusInvalidHandle:
		return errorf(StatusInvalidHandle, "modify srq", "srq closed")
	default:
		return errorf(StatusInvalidParameter, "modify srq", "depth %d / threshold %d: depth must be within [queued %d, capacity %d], threshold within [0, depth]",
			depth, notifyThreshold, b.rc.Len(), b.rc.Cap())
	}
}

func (b *inprocSRQ) capacity() int { return b.rc.Cap() }

func (b *inprocSRQ) length() int { return b.rc.Len() }

func (b *inprocSRQ) close() {
	s := b.s
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.mu.Unlock()
	b.halt()
	s.mu.Lock()
	idle := s.users == 0
	s.mu.Unlock()
	if idle {
		s.pd.mu.Lock()
		s.finishLocked()
		s.pd.mu.Unlock()
	}
}

// halt refuses posts, drops what is queued and waits for the notification
// goroutine to end; once per SRQ, after closing was set.
func (b *inprocSRQ) halt() {
	b.rc.Close()
	close(b.stop)
	<-b.stopped
}

// stopLocked is the PD's (and so the adapter's) close of the SRQ with its
// QPs: it completes at once; pd.mu is held.
func (b *inprocSRQ) stopLocked() {
	s := b.s
	s.mu.Lock()
	already := s.closing
	s.closing = true
	s.users = 0
	s.mu.Unlock()
	if !already {
		b.halt()
	}
	s.finishLocked()
}
