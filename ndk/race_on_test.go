//go:build race

package ndk

// raceDetector says the tests run under the race detector, which slows the
// engines several-fold and unevenly: timing ratios are reported, not held.
const raceDetector = true
