package ndk

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
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
}
