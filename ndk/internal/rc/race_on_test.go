//go:build race

package rc

// timeScale stretches the ACK timeouts of tests that must not time out by
// accident: the race detector slows the engines several-fold.
const timeScale = 4
