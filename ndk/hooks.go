package ndk

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
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
	hook.PopCQ = func(c any, dst []hook.Entry) int {
		q := c.(*CQ)
		var e cq.Entry
		n := 0
		for n < len(dst) && q.core.Pop(&e) {
			dst[n] = hook.Entry{
				Status: e.Status, Bytes: e.BytesTransferred, Type: e.Type,
				ProviderErrorCode: e.ProviderErrorCode, TypeSpecific: e.TypeSpecificCompletionOutput,
				QPContext: e.QPContext, RequestContext: e.RequestContext,
				Solicited: e.Solicited || e.Status != ntstatus.Success,
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
