// Package testhooks lets the module's tests reach into an adapter where no
// public API should: fault injection that only a test has a use for. No
// program imports it: CI checks that the ndkxdp binary links no package
// named test* or *testhooks, as it links no package testing.
//
// Example (test/cm):
//
//	a, _ := ndk.Open("eth1", ndk.Options{})
//	testhooks.SetMADFaults(a, func(mad []byte) (int, time.Duration) {
//		return 0, 0 // drop every MAD the adapter sends
//	})
package testhooks
