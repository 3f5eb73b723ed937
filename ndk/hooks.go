package ndk

import (
	"errors"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// The daemon serves clients' memory and CQs through these (ndk/daemon).
func init() {
	hook.RegisterAt = func(pd any, va uint64, buf []byte, flags uint32, invalidatable bool) (any, error) {
		mr, err := pd.(*PD).register(va, buf, MRFlag(flags), invalidatable)
		if err != nil {
			return nil, err
		}
		return mr, nil
	}
	hook.Bind = func(qp, ctx, mw any, mrToken uint32, addr, length uint64, flags, remote uint32) error {
		return qp.(*QP).bind(ctx, mrToken, mw.(*MW), addr, length, OpFlag(flags), remote)
	}
	hook.FastRegister = func(qp, ctx, mr any, va uint64, buf []byte, flags, local, remote uint32) error {
		return qp.(*QP).fastRegister(ctx, mr.(*MR), va, buf, OpFlag(flags), memreg.Tokens{Local: local, Remote: remote})
	}
	hook.Invalidate = func(qp, ctx any, token, flags uint32) error {
		return qp.(*QP).invalidate(ctx, token, OpFlag(flags))
	}
	hook.KeyBits = func(adapter any) int { return int(adapter.(*Adapter).regions.KeyBits()) }
	hook.WindowHandle = func(mw any) uint32 { return mw.(*MW).handle }
	hook.Provider = func(a any) any {
		if p := a.(*Adapter).prov; p != nil {
			return p
		}
		return nil
	}
	hook.PopCQ = func(c any, dst []hook.Entry) int {
		q := c.(*CQ)
		var e cq.Entry
		n := 0
		for n < len(dst) && q.core.Pop(&e) {
			dst[n] = hook.Entry{
				Status: uint32(e.Status), Bytes: e.BytesTransferred, Type: uint32(e.Type),
				ProviderErrorCode: e.ProviderErrorCode, TypeSpecific: e.TypeSpecificCompletionOutput,
				QPContext: e.QPContext, RequestContext: e.RequestContext,
				Solicited: e.Solicited || e.Status != StatusSuccess,
			}
			n++
		}
		return n
	}
	hook.QPFailed = func(qp any) bool {
		q := qp.(*QP)
		return q.rc != nil && q.rc.State() >= rc.StateError
	}
	hook.QPQueued = func(qp any) (uint64, uint64) {
		if q := qp.(*QP); q.rc != nil {
			return q.rc.Queued()
		}
		return 0, 0
	}
	hook.RingDeferred = func(qp any) {
		if q := qp.(*QP); q.rc != nil {
			q.rc.RingDeferred()
		}
	}
}

func init() {
	hook.EngineOf = func(adapter any) (*hook.Engine, error) {
		a := adapter.(*Adapter)
		p, ok := a.prov.(*inproc.Provider)
		if !ok {
			return nil, errors.New("adapter has no AF_XDP engine")
		}
		// The engines and ports stay as they are while the adapter is open:
		// take them now, so that what the engine itself calls here (the
		// relay's pass) never waits for the provider's lock, which a
		// control call may hold while it waits for the engine.
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
}
