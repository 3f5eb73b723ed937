// Package testenv decides whether a test that needs privileges, tools or data
// may run here, and what to do when it cannot.
//
// Outside strict mode a missing prerequisite skips the test with a message
// that says what is missing. With NDKXDP_STRICT=1 (which CI sets) the same
// condition fails the test: nothing may silently skip in CI.
//
// It is test-only: _test.go files and the packages under test/ import it.
// It imports testing, which the ndkxdp binary must not link (.ci/run
// checks), so no other package may import it.
package testenv
