package ndk

import (
	"github.com/ndkxdp/ndkxdp/internal/testhooks"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
)

// The MAD fault hook is for tests (test/cm), not the public API.
func init() {
	testhooks.InstallMADFaults(func(adapter any, f testhooks.MADFaults) {
		a := adapter.(*Adapter)
		if p, ok := a.prov.(*inproc.Provider); ok {
			p.SetMADFaults(f)
		}
	})
}
