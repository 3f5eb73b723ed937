package afxdp

import (
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// TestRegisterRaisesMemlock registers UMEMs on a thread without
// CAP_IPC_LOCK (capabilities are per thread), so the kernel charges them
// to RLIMIT_MEMLOCK, and checks that registration raises a low soft limit
// and explains a hard limit that is too low. No device is involved:
// XDP_UMEM_REG happens before bind.
func TestRegisterRaisesMemlock(t *testing.T) {
	testenv.RequireRoot(t)
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Max != unix.RLIM_INFINITY && saved.Max < 2<<20 {
		testenv.Unavailable(t, "hard RLIMIT_MEMLOCK %d is below the 2 MiB this test registers", saved.Max)
	}

	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	dropped := caps
	dropped[0].Effective &^= 1 << unix.CAP_IPC_LOCK
	if err := unix.Capset(&hdr, &dropped[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("drop CAP_IPC_LOCK: %v", err)
	}
	defer func() {
		if err := unix.Capset(&hdr, &caps[0]); err != nil {
			t.Errorf("restore capabilities: %v", err)
			return // stay locked: the thread dies with the test goroutine
		}
		runtime.UnlockOSThread()
	}()
	defer func() {
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &saved); err != nil {
			t.Errorf("restore RLIMIT_MEMLOCK: %v", err)
		}
	}()
	if hasCapIPCLock() {
		t.Fatal("CAP_IPC_LOCK still effective after dropping it")
	}

	register := func(frames uint32) error {
		u, err := NewUMEM(UMEMConfig{NumFrames: frames})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		return u.register(fd)
	}

	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 64 << 10, Max: saved.Max}); err != nil {
		t.Fatal(err)
	}
	if err := register(512); err != nil { // 2 MiB
		t.Fatalf("register 2 MiB with a 64 KiB soft limit: %v", err)
	}
	var now unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &now); err != nil {
		t.Fatal(err)
	}
	if now.Cur != saved.Max {
		t.Fatalf("soft RLIMIT_MEMLOCK = %d after registering, want it raised to the hard limit %d", now.Cur, saved.Max)
	}

	if saved.Max != unix.RLIM_INFINITY {
		frames := uint32(saved.Max/DefaultFrameSize) + 1
		err := register(frames)
		if err == nil || !strings.Contains(err.Error(), "hard RLIMIT_MEMLOCK") {
			t.Fatalf("register %d frames above the hard limit %d: %v, want an error naming the hard limit", frames, saved.Max, err)
		}
	}
}
