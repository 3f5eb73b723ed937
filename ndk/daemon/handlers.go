package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// The daemon's side of the control protocol: one handler per operation,
// typed by the operation's request and reply (proto/ops.go), and what
// session.serve must know of it before it runs. An operation missing
// here is answered "no such request", whatever the client's state.
var handlers = table(
	on((*session).hello, beforeHello, takesFDs),
	on((*session).arena, takesFDs),
	on((*session).cancelRequest, beforeHello, silent),
	on((*session).stats),

	on((*session).createCQ),
	on((*session).closeCQ),
	on((*session).resizeCQ),
	on((*session).moderateCQ),

	on((*session).createPD),
	on((*session).closePD),
	on((*session).register),
	on((*session).deregister),
	on((*session).createMW),
	on((*session).closeMW),
	on((*session).initFastMR),

	on((*session).createSRQ),
	on((*session).modifySRQ),
	on((*session).srqLen),
	on((*session).closeSRQ),

	on((*session).createQP),
	on((*session).closeQP),
	on((*session).flushQP),
	on((*session).connectOOB, blocks),

	// The UD extension (ud.go); a UD QP is create_qp's.
	on((*session).serveUD),
	on((*session).udAnswered),
	on((*session).closeUDService),
	on((*session).resolveUD, blocks),
	on((*session).nextHop),
	on((*session).joinMulticast),
	on((*session).leaveMulticast),

	on((*session).createConnector),
	on((*session).connect, blocks),
	on((*session).completeConnect, blocks),
	on((*session).accept, blocks),
	on((*session).reject, blocks),
	on((*session).disconnect, blocks),
	on((*session).connData),
	on((*session).closeConnector),
	on((*session).createListener),
	on((*session).listen),
	on((*session).pauseListener),
	on((*session).closeListener),
	on((*session).createEndpoint),
	on((*session).closeEndpoint),

	on((*session).adminStatus, admin),
	on((*session).adminInfo, admin),
	on((*session).adminStats, admin),
	on((*session).adminQPs, admin),
	on((*session).adminDump, admin),
)

// call is one request being served: the context it runs under, the
// descriptors it brought (in; closed on arrival unless its handler
// takesFDs, which then owns them) and those that go with its reply
// (out).
type call struct {
	ctx     context.Context
	in, out []int
}

// handler is one operation: how serve treats it, and its decoder, which
// turns the message into the work to do.
type handler struct {
	op          string
	blocks      bool // may wait on the network: runs on a goroutine of its own under the request's Deadline, and OpCancel gives it up
	admin       bool // an operator's request: needs no hello, makes nothing, and the session is not counted a client for it
	beforeHello bool // a client may send it before its hello
	takesFDs    bool // owns the descriptors that came with it
	silent      bool // has no answer
	decode      func(msg []byte) (work, error)
}

type work func(ss *session, c *call) (reply any, err error)

type option func(*handler)

func blocks(h *handler)      { h.blocks = true }
func admin(h *handler)       { h.admin, h.beforeHello = true, true }
func beforeHello(h *handler) { h.beforeHello = true }
func takesFDs(h *handler)    { h.takesFDs = true }
func silent(h *handler)      { h.silent = true }

// on makes the handler of f's request type: its operation is the one the
// request type names, and the decoder reads the message into a fresh
// request for f.
func on[R, P any, Q interface {
	*R
	proto.Call[P]
}](f func(*session, *call, Q) (*P, error), opts ...option) handler {
	h := handler{op: Q(new(R)).Op()}
	for _, o := range opts {
		o(&h)
	}
	h.decode = func(msg []byte) (work, error) {
		q := Q(new(R))
		if err := json.Unmarshal(msg, q); err != nil {
			return nil, fmt.Errorf("%s: %w", h.op, err)
		}
		return func(ss *session, c *call) (any, error) {
			p, err := f(ss, c, q)
			if p == nil {
				return nil, err // no typed nil in the interface: an empty reply
			}
			return p, err
		}, nil
	}
	return h
}

func table(hs ...handler) map[string]handler {
	m := make(map[string]handler, len(hs))
	for _, h := range hs {
		if _, dup := m[h.op]; dup {
			panic("daemon: two handlers for " + h.op)
		}
		m[h.op] = h
	}
	return m
}

// errNoSuchRequest answers an operation the daemon does not know.
func errNoSuchRequest(op string) error {
	return statusErr(ndk.StatusInvalidDeviceRequest, "no such request %q: a client of another ndkxdp release, or not a client", op)
}

// cancelRequest gives up a blocking request of the session's.
func (ss *session) cancelRequest(_ *call, r *proto.Cancel) (*proto.None, error) {
	ss.mu.Lock()
	if c := ss.cancels[r.Target]; c != nil {
		c()
	}
	ss.mu.Unlock()
	return nil, nil
}
