package testhooks

import "time"

// MADFaults decides the fate of a connection-management datagram (a
// 256-byte IB CM MAD) an adapter sends: how many copies leave (0 drops
// it, 2 duplicates it) and after what delay. It may be called from
// several goroutines.
type MADFaults = func(mad []byte) (copies int, delay time.Duration)

var setMADFaults func(adapter any, f MADFaults)

// SetMADFaults makes f decide the fate of every MAD adapter, an
// *ndk.Adapter opened with ndk.Open, sends from now on; nil restores
// normal sending. It exists to test connection setup on a lossy network.
func SetMADFaults(adapter any, f MADFaults) {
	if setMADFaults == nil {
		panic("testhooks: package ndk is not linked in")
	}
	setMADFaults(adapter, f)
}

// InstallMADFaults is called by package ndk with its implementation of
// SetMADFaults.
func InstallMADFaults(set func(adapter any, f MADFaults)) { setMADFaults = set }
