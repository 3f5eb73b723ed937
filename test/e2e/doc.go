// Package e2e holds end-to-end tests over a veth pair between two network
// namespaces: the steering program, the loader and AF_XDP sockets working
// together, in driver and in generic XDP mode. They need root; see
// internal/testenv for how they skip or fail.
package e2e
