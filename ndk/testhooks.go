package ndk

import (
	"github.com/ndkxdp/ndkxdp/internal/testhooks"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
)

// The MAD fault hook is for tests (test/cm), not the public API.
func init() {
	testhooks.InstallMADFaults(func(adapter any, f testhooks.MADFaults) {
		a := adapter.(*Adapter)
		p, ok := a.prov.(*inproc.Provider)
		if !ok {
			// A daemon-backed adapter's MADs leave from the daemon's
			// adapter: a hook here would silently do nothing.
			panic("testhooks: SetMADFaults needs an adapter from ndk.Open (a daemon's own, not a client's)")
		}
		p.SetMADFaults(f)
	})
}
