//go:build !race

package rc

// timeScale stretches the ACK timeouts of tests that must not time out by
// accident (4 under the race detector).
const timeScale = 1
