package wake

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPollSleepsThroughSignals: signals to the process during a 50 ms
// wait on an idle eventfd neither end it early nor make it return EINTR.
func TestPollSleepsThroughSignals(t *testing.T) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				syscall.Kill(syscall.Getpid(), syscall.SIGURG) // the runtime's own preemption signal
			}
		}
	}()
	fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
	ts := unix.NsecToTimespec(int64(50 * time.Millisecond))
	start := time.Now()
	n, errno := Poll(fds, &ts)
	if d := time.Since(start); n != 0 || errno != 0 || d < 50*time.Millisecond {
		t.Fatalf("idle Poll returned %d, %v after %v; want 0, no error, after 50ms", n, errno, d)
	}
}

// TestEventfdWakesPoll: a write wakes a Poll on the eventfd, and a read
// returns and resets the count.
func TestEventfdWakesPoll(t *testing.T) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	var one, got [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	go func() {
		time.Sleep(5 * time.Millisecond)
		EventfdWrite(efd, &one)
		EventfdWrite(efd, &one)
	}()
	fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
	if n, errno := Poll(fds, nil); n != 1 || errno != 0 || fds[0].Revents&unix.POLLIN == 0 {
		t.Fatalf("Poll after a write: %d, %v, revents %#x", n, errno, fds[0].Revents)
	}
	time.Sleep(5 * time.Millisecond)
	if errno := EventfdRead(efd, &got); errno != 0 || binary.NativeEndian.Uint64(got[:]) != 2 {
		t.Fatalf("read %v, count %d; want 2", errno, binary.NativeEndian.Uint64(got[:]))
	}
	if errno := EventfdRead(efd, &got); errno != unix.EAGAIN {
		t.Fatalf("second read: %v, want EAGAIN (the count was reset)", errno)
	}
}
