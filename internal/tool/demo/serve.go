package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// demoServer is `demo -dev IF -serve`: it serves the phases of the demo's
// protocol (demo_wire.go) to one client connection at a time.
type demoServer struct {
	host *Host
	w    io.Writer
	// reqs holds the connect request waiting to be served; one more than
	// that is refused as busy.
	reqs chan *ndk.Connector
	runs int
}

// serveDemo listens on addr and serves phase after phase until ctx ends
// or count demos (0: no limit) have ended.
func serveDemo(ctx context.Context, host *Host, addr netip.AddrPort, count int, w io.Writer) error {
	s := &demoServer{host: host, w: w, reqs: make(chan *ndk.Connector, 1)}
	l, err := host.Adapter.CreateListener(func(c *ndk.Connector) {
		select {
		case s.reqs <- c:
		default:
			_ = c.Reject(rejectData("busy serving another client's phase; one client at a time"))
			c.Close()
		}
	})
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Listen(addr); err != nil {
		return fmt.Errorf("listen on %v: %w", addr, err)
	}
	fmt.Fprintf(w, "serving the demo's phases on %v: run `ndkxdp demo -dev IF -peer %v` on the peer (Ctrl-C ends)\n", addr, addr.Addr())
	for count == 0 || s.runs < count {
		cmdline.EnterPhase(ctx, "waiting for a client")
		select {
		case c := <-s.reqs:
			s.serve(ctx, c)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fmt.Fprintf(w, "served %d demos\n", s.runs)
	return nil
}

// servedPhase is the server's half of one phase: prepare sets up its
// memory and receives before the REP and gives the reply; body runs once
// connected, until the phase's end, and returns the line to print.
type servedPhase struct {
	reply   demoReply
	body    func(ctx context.Context, disconnected <-chan struct{}) (string, error)
	release func()
}

// serve serves the phase c asks for; what goes wrong is printed and ends
// that phase alone.
func (s *demoServer) serve(ctx context.Context, c *ndk.Connector) {
	defer c.Close()
	from := c.PeerAddress()
	var pd [ndk.MaxCallerData]byte
	_, _, n, err := c.GetConnectionData(pd[:])
	var req demoRequest
	if err == nil {
		req, err = decodeDemoRequest(pd[:n])
	}
	if err != nil {
		_ = c.Reject(rejectData(err.Error()))
		fmt.Fprintf(s.w, "refused %v: %v\n", from, err)
		return
	}
	cmdline.EnterPhase(ctx, "serving "+req.Op.String())
	line, err := s.serveAccepted(ctx, c, req)
	if err != nil {
		fmt.Fprintf(s.w, "%v from %v: %v\n", req.Op, from, err)
	} else {
		fmt.Fprintf(s.w, "%v from %v: %s\n", req.Op, from, line)
	}
	if req.Last {
		s.runs++
		fmt.Fprintf(s.w, "demo %d from %v ended\n", s.runs, from.Addr())
	}
}

func (s *demoServer) serveAccepted(ctx context.Context, c *ndk.Connector, req demoRequest) (string, error) {
	h := s.host
	if err := h.NewCQs(); err != nil {
		_ = c.Reject(rejectData(err.Error()))
		return "", err
	}
	qp, err := h.PD.CreateQP(demoQPConfig(h))
	if err != nil {
		_ = c.Reject(rejectData(err.Error()))
		return "", err
	}
	defer qp.Close()
	ph, err := s.prepare(qp, req)
	if err != nil {
		_ = c.Reject(rejectData(err.Error()))
		return "", err
	}
	defer ph.release()
	disconnected := make(chan struct{})
	var once sync.Once
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.Accept(actx, qp, demoReadLimit, demoReadLimit, ph.reply.encode(), func() { once.Do(func() { close(disconnected) }) })
	cancel()
	if err != nil {
		return "", fmt.Errorf("accept: %w", err)
	}
	// A client that leaves mid-phase (interrupted: it still sends its
	// DREQ) ends the body's waits at once.
	bctx, bcancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-disconnected:
			bcancel()
		case <-bctx.Done():
		}
	}()
	line, err := ph.body(bctx, disconnected)
	bcancel()
	if err != nil && ctx.Err() == nil {
		select {
		case <-disconnected:
			err = fmt.Errorf("the client disconnected before the phase's end (%w)", err)
		default:
		}
	}
	// The client ends every phase with a DREQ; one that went away ends
	// it by this bound.
	select {
	case <-disconnected:
	case <-time.After(10 * time.Second):
		if err == nil {
			err = fmt.Errorf("the client did not disconnect within 10 s after the phase")
		}
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		_ = c.Disconnect(dctx)
		dcancel()
	case <-ctx.Done():
	}
	return line, err
}

// phaseBound bounds a served phase: 30 s, and more for a long one at 10
// MB/s or 10,000 round trips a second, which any link the demo runs on
// beats.
func phaseBound(req demoRequest) time.Time {
	d := 30 * time.Second
	switch req.Op {
	case opPingPong:
		d += time.Duration(req.Count) * 100 * time.Microsecond
	default:
		d += time.Duration(uint64(req.Count)*uint64(req.Size)/10e6) * time.Second
	}
	return time.Now().Add(d)
}

// prepare sets up the server's half of req on qp.
func (s *demoServer) prepare(qp *ndk.QP, req demoRequest) (*servedPhase, error) {
	switch req.Op {
	case opSend:
		return s.prepareSend(qp, req)
	case opWrite:
		return s.prepareWrite(qp, req)
	case opRead:
		return s.prepareRead(req)
	}
	e, err := newEchoer(s.host, qp)
	if err != nil {
		return nil, err
	}
	return &servedPhase{release: e.release, body: func(ctx context.Context, disconnected <-chan struct{}) (string, error) {
		err := e.run(ctx.Done(), phaseBound(req))
		select {
		case <-disconnected:
			return "echoed until the client disconnected", nil // the flushed receive is the end
		default:
		}
		if err == nil {
			err = ctx.Err()
		}
		return "", err
	}}, nil
}

// sendVerdict sends the verdict on err from buf, registered as mr at off.
func sendVerdict(qp *ndk.QP, mr *ndk.MR, buf []byte, off int, err error) error {
	v := demoNote{}
	if err != nil {
		v = demoNote{Failed: true, Text: err.Error()}
	}
	v.put(buf)
	sge, serr := mr.SGE(off, demoNoteLen)
	if serr == nil {
		serr = qp.Send(nil, []ndk.SGE{sge}, ndk.OpFlagSilentSuccess)
	}
	if err == nil {
		err = serr
	}
	return err
}

// serverMemory gives n bytes of the host's memory, then a verdict's and a
// note's, registered as one MR with flags.
func (s *demoServer) serverMemory(n int, flags ndk.MRFlag) ([]byte, *ndk.MR, error) {
	mem, err := s.host.Adapter.Memory(n + 2*demoNoteLen)
	if err != nil {
		return nil, nil, fmt.Errorf("memory: %w", err)
	}
	mr, err := s.host.PD.RegisterMR(mem, flags|ndk.MRFlagAllowLocalRead|ndk.MRFlagAllowLocalWrite)
	return mem, mr, err
}

// prepareSend posts the receives of a SEND phase, whose body checks every
// message as the embedded demo's receiver does and sends the verdict.
func (s *demoServer) prepareSend(qp *ndk.QP, req demoRequest) (*servedPhase, error) {
	n, size := int(req.Count), int(req.Size)
	st := newSendStream(nil, s.host, nil, qp, n, size)
	mem, mr, err := s.serverMemory(size*demoQueueDepth, 0)
	if err != nil {
		return nil, err
	}
	st.dst, st.dmr = mem[:size*demoQueueDepth], mr
	for slot := range demoQueueDepth {
		if err := st.post(slot); err != nil {
			mr.Deregister()
			return nil, err
		}
	}
	return &servedPhase{release: func() { mr.Deregister() }, body: func(ctx context.Context, _ <-chan struct{}) (string, error) {
		err := st.receive(ctx)
		if err := sendVerdict(qp, mr, mem[len(st.dst):], len(st.dst), err); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d messages of %d bytes, contents verified", n, size), nil
	}}, nil
}

// prepareWrite gives the client rdmaSlots slots to WRITE into; the body
// waits for the client's count, checks the slots and sends the verdict.
func (s *demoServer) prepareWrite(qp *ndk.QP, req demoRequest) (*servedPhase, error) {
	n, size := int(req.Count), int(req.Size)
	mem, mr, err := s.serverMemory(size*rdmaSlots, ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		return nil, err
	}
	slots, verdict, done := mem[:size*rdmaSlots], mem[size*rdmaSlots:size*rdmaSlots+demoNoteLen], mem[size*rdmaSlots+demoNoteLen:]
	sge, err := mr.SGE(len(slots)+demoNoteLen, demoNoteLen)
	if err == nil {
		err = qp.Receive(nil, []ndk.SGE{sge})
	}
	if err != nil {
		mr.Deregister()
		return nil, err
	}
	return &servedPhase{reply: demoReply{Addr: mr.Addr(), Token: mr.RemoteToken()}, release: func() { mr.Deregister() },
		body: func(ctx context.Context, _ <-chan struct{}) (string, error) {
			var r ndk.Result
			if err := WaitOne(ctx, s.host.RCQ, &r, phaseBound(req)); err != nil {
				return "", fmt.Errorf("waiting for the client's count of WRITEs: %w", err)
			}
			note, err := decodeDemoNote(done[:min(int(r.BytesTransferred), len(done))])
			switch {
			case err != nil:
			case note.Value != uint64(n):
				err = fmt.Errorf("the client says it made %d WRITEs, it asked for %d", note.Value, n)
			default:
				s.host.Adapter.Stats() // orders this goroutine after the engine placed the bytes
				if !bytes.Equal(slots, writtenSlots(n, size)) {
					err = fmt.Errorf("the memory does not hold the last of the %d WRITEs in every slot", n)
				}
			}
			if err := sendVerdict(qp, mr, verdict, len(slots), err); err != nil {
				return "", err
			}
			return fmt.Sprintf("%d x %d bytes written, contents verified", n, size), nil
		}}, nil
}

// prepareRead fills rdmaSlots slots for the client to READ; the body
// waits for the client's disconnect, the end of a READ phase (the client
// checks what it read).
func (s *demoServer) prepareRead(req demoRequest) (*servedPhase, error) {
	size := int(req.Size)
	mem, mr, err := s.serverMemory(size*rdmaSlots, ndk.MRFlagAllowRemoteRead)
	if err != nil {
		return nil, err
	}
	readFill(mem[:size*rdmaSlots], size)
	return &servedPhase{reply: demoReply{Addr: mr.Addr(), Token: mr.RemoteToken()}, release: func() { mr.Deregister() },
		body: func(ctx context.Context, disconnected <-chan struct{}) (string, error) {
			select {
			case <-disconnected:
			case <-time.After(time.Until(phaseBound(req))):
				return "", fmt.Errorf("the client still READs after the phase's bound")
			case <-ctx.Done():
				select {
				case <-disconnected: // which ended ctx
				default:
					return "", ctx.Err()
				}
			}
			return fmt.Sprintf("%d x %d bytes to read, served", req.Count, size), nil
		}}, nil
}
