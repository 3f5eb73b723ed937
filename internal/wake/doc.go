// Package wake holds the system calls of ndkxdp's sleeping and waking:
// eventfd doorbells and ppoll(2) that sleeps through signals, shared by
// the engine's port (ndk/internal/port) and the daemon's shared-memory
// doorbells (ndk/internal/shm). They are raw system calls because
// x/sys/unix's wrappers take slices or allocate, and these run on every
// sleep and every wake-up.
package wake
