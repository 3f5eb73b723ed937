// Package testhooks lets the module's tests reach into package ndk where
// no public API should: fault injection that only a test has a use for.
// Package ndk installs the hooks when it initializes, so a test that
// imports ndk can call them.
//
// It is not for use outside tests, and nothing here is stable.
//
// Example (test/cm):
//
//	a, _ := ndk.Open("eth1", ndk.Options{})
//	testhooks.SetMADFaults(a, func(mad []byte) (int, time.Duration) {
//		return 0, 0 // drop every MAD the adapter sends
//	})
package testhooks
