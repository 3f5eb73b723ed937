package ndk

import (
	"errors"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// serverBackend is the daemon's seam into ndk (ndk/internal/hook): the
// daemon serves clients' memory, local operations and CQs through it.
type serverBackend struct{}

var _ hook.Backend[*Adapter, *PD, *MR, *MW, *CQ, *QP] = serverBackend{}

func init() { hook.Install[*Adapter, *PD, *MR, *MW, *CQ, *QP](serverBackend{}) }

func (serverBackend) RegisterAt(pd *PD, va uint64, buf []byte, flags uint32, invalidatable bool) (*MR, error) {
	return pd.register(va, buf, MRFlag(flags), invalidatable)
}

func (serverBackend) Bind(qp *QP, ctx any, mw *MW, mrToken uint32, addr, length uint64, flags, remote uint32) error {
	return qp.be.(*inprocQP).bindToken(ctx, mrToken, mw, addr, length, OpFlag(flags), remote)
}

func (serverBackend) FastRegister(qp *QP, ctx any, mr *MR, va uint64, buf []byte, flags, local, remote uint32) error {
	return qp.be.(*inprocQP).fastRegisterAt(ctx, mr, va, buf, OpFlag(flags), memreg.Tokens{Local: local, Remote: remote})
}

func (serverBackend) Invalidate(qp *QP, ctx any, token, flags uint32) error {
	return qp.invalidate(ctx, token, OpFlag(flags))
}

func (serverBackend) KeyBits(a *Adapter) int { return int(a.regions.KeyBits()) }

func (serverBackend) WindowHandle(mw *MW) uint32 { return mw.handle }

func (serverBackend) PopCQ(q *CQ, dst []hook.Entry) int {
	core := q.core()
	var e cq.Entry
	n := 0
	for n < len(dst) && core.Pop(&e) {
		dst[n] = hook.Entry{
			Status: uint32(e.Status), Bytes: e.BytesTransferred, Type: uint32(e.Type),
			ProviderErrorCode: e.ProviderErrorCode, TypeSpecific: e.TypeSpecificCompletionOutput,
			QPContext: e.QPContext, RequestContext: e.RequestContext,
			Solicited:    e.Solicited || e.Status != StatusSuccess,
			HasImmediate: e.HasImmediate, Immediate: e.Immediate,
		}
		n++
	}
	return n
}

func (serverBackend) QPFailed(q *QP) bool {
	e := q.engine()
	return e != nil && e.State() >= rc.StateError
}

func (serverBackend) QPQueued(q *QP) (uint64, uint64) {
	if e := q.engine(); e != nil {
		return e.Queued()
	}
	return 0, 0
}

func (serverBackend) SetReceiveRefill(q *QP, f func() bool) {
	if e := q.engine(); e != nil {
		e.SetReceiveRefill(f)
	}
}

func (serverBackend) Provider(a *Adapter) *inproc.Provider {
	p, _ := a.provider().(*inproc.Provider)
	return p
}

func (serverBackend) Engine(a *Adapter) (*hook.Engine, error) {
	p, ok := a.provider().(*inproc.Provider)
	if !ok {
		return nil, errors.New("adapter has no AF_XDP engine")
	}
	// The engines and ports stay as they are while the adapter is open:
	// take them now, so that what the engine itself calls here (the
	// relay's pass) never waits for the provider's lock, which a control
	// call may hold while it waits for the engine.
	engines, ports := p.Engines(), p.Ports()
	if len(engines) == 0 || len(ports) == 0 {
		return nil, errors.New("adapter has no engine")
	}
	e, bell := engines[0], ports[0]
	return &hook.Engine{
		Add:    func(x hook.Poller) error { return e.AddPoller(x) },
		Remove: func(x hook.Poller) error { return e.RemovePoller(x) },
		Ring:   bell.Doorbell,
		PlacedWrites: func(q int) uint64 {
			if q < 0 || q >= len(engines) {
				return 0
			}
			return engines[q].PlacedWrites()
		},
	}, nil
}
