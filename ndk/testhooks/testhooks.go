package testhooks

import (
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
)

// MADFaults decides the fate of a connection-management datagram (a
// 256-byte IB CM MAD) an adapter sends: how many copies leave (0 drops
// it, 2 duplicates it) and after what delay. It may be called from
// several goroutines.
type MADFaults = func(mad []byte) (copies int, delay time.Duration)

// SetMADFaults makes f decide the fate of every MAD a, an adapter opened
// with ndk.Open, sends from now on; nil restores normal sending. It
// exists to test connection setup on a lossy network. A daemon-backed
// adapter's MADs leave from the daemon's adapter, where a hook here
// would do nothing: it panics for one, as for a closed adapter.
func SetMADFaults(a *ndk.Adapter, f MADFaults) {
	p := hook.Get[*ndk.Adapter, *ndk.PD, *ndk.MR, *ndk.MW, *ndk.CQ, *ndk.QP]().Provider(a)
	if p == nil {
		panic("testhooks: SetMADFaults needs an open adapter from ndk.Open (a daemon's own, not a client's)")
	}
	p.SetMADFaults(f)
}
