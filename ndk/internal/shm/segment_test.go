package shm

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func newTestSegment(t testing.TB, size int) *Segment {
	t.Helper()
	s, err := NewSegment(t.Name(), size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dupFD returns a new descriptor for fd, as a peer's would be.
func dupFD(t testing.TB, fd int) int {
	t.Helper()
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSegmentSharedMapping(t *testing.T) {
	s := newTestSegment(t, 100)
	if got := s.Size(); got != unix.Getpagesize() {
		t.Fatalf("Size = %d, want one page (%d)", got, unix.Getpagesize())
	}
	seals, err := unix.FcntlInt(uintptr(s.FD()), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if seals&requiredSeals != requiredSeals {
		t.Fatalf("seals %#x, want %#x set", seals, requiredSeals)
	}
	if err := unix.Ftruncate(s.FD(), 0); err == nil {
		t.Fatal("ftruncate of a sealed segment to 0 succeeded")
	}

	peer, err := MapSegment(dupFD(t, s.FD()), s.Size())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	s.Bytes()[42] = 7
	if got := peer.Bytes()[42]; got != 7 {
		t.Fatalf("peer sees %d at offset 42, want 7", got)
	}
	peer.Bytes()[s.Size()-1] = 9
	if got := s.Bytes()[s.Size()-1]; got != 9 {
		t.Fatalf("creator sees %d at the last byte, want 9", got)
	}
	if err := peer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := peer.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestNewSegmentRefusesBadSizes(t *testing.T) {
	for _, size := range []int64{0, -1, MaxSegmentSize + 1} {
		if int64(int(size)) != size {
			continue // does not fit an int here
		}
		if s, err := NewSegment("bad", int(size)); err == nil {
			s.Close()
			t.Errorf("NewSegment(%d) succeeded", size)
		}
	}
}

// TestMapSegmentRefusesHostileDescriptors plays a peer that sends
// descriptors which would let it fault our mapping later, or are not
// segments at all.
func TestMapSegmentRefusesHostileDescriptors(t *testing.T) {
	page := unix.Getpagesize()
	memfd := func(t *testing.T, flags, size int, seals int) int {
		fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|flags)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			t.Fatal(err)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	}
	tests := []struct {
		name  string
		fd    func(t *testing.T) int
		claim int
		want  string
	}{
		{"unsealable", func(t *testing.T) int { return memfd(t, 0, page, 0) }, page, "not sealed against shrinking"},
		{"unsealed", func(t *testing.T) int { return memfd(t, unix.MFD_ALLOW_SEALING, page, 0) }, page, "not sealed against shrinking"},
		{"grow-only seal", func(t *testing.T) int { return memfd(t, unix.MFD_ALLOW_SEALING, page, unix.F_SEAL_GROW) }, page, "not sealed against shrinking"},
		{"smaller than claimed", func(t *testing.T) int {
			return memfd(t, unix.MFD_ALLOW_SEALING, page, unix.F_SEAL_SHRINK)
		}, 2 * page, "holds 4096 bytes, 8192 claimed"},
		{"write-sealed", func(t *testing.T) int {
			return memfd(t, unix.MFD_ALLOW_SEALING, page, unix.F_SEAL_SHRINK|unix.F_SEAL_WRITE)
		}, page, "sealed against writing"},
		{"pipe", func(t *testing.T) int {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			unix.Close(p[1])
			return p[0]
		}, page, "read seals"},
		{"zero claim", func(t *testing.T) int {
			return memfd(t, unix.MFD_ALLOW_SEALING, page, unix.F_SEAL_SHRINK)
		}, 0, "size must be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fd := tc.fd(t)
			s, err := MapSegment(fd, tc.claim)
			if err == nil {
				s.Close()
				t.Fatal("MapSegment succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
				t.Fatalf("descriptor still open after a refused MapSegment (F_GETFD: %v)", err)
			}
		})
	}
}

func TestMapSegmentMapsOnlyTheClaim(t *testing.T) {
	s := newTestSegment(t, 4*unix.Getpagesize())
	peer, err := MapSegment(dupFD(t, s.FD()), unix.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if got := peer.Size(); got != unix.Getpagesize() {
		t.Fatalf("Size = %d, want the claimed %d", got, unix.Getpagesize())
	}
}
