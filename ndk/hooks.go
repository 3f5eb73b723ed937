package ndk

import (
	"errors"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
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
}

func init() {
	hook.EngineOf = func(adapter any) (*hook.Engine, error) {
		a := adapter.(*Adapter)
		p, ok := a.prov.(*inproc.Provider)
		if !ok {
			return nil, errors.New("adapter has no AF_XDP engine")
		}
		seg, efd, err := p.EngineBell(0)
		if err != nil {
			return nil, err
		}
		e, err := p.Engine(0)
		if err != nil {
			return nil, err
		}
		return &hook.Engine{
			BellFD: seg.FD(), EventFD: efd, BellSize: seg.Size(),
			Add:    func(x hook.Poller) error { return e.AddPoller(x) },
			Remove: func(x hook.Poller) error { return e.RemovePoller(x) },
			Ring:   func() { p.Doorbell(0) },
			PlacedWrites: func(q int) uint64 {
				if e, err := p.Engine(q); err == nil {
					return e.PlacedWrites()
				}
				return 0
			},
		}, nil
	}
}
