package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Strict reports whether NDKXDP_STRICT=1 is set.
func Strict() bool { return os.Getenv("NDKXDP_STRICT") == "1" }

// Unavailable skips the test, or fails it in strict mode, with the reason.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Strict() {
		t.Fatalf("NDKXDP_STRICT=1: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot stops the test unless it runs with the capabilities ndkxdp
// needs (CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN for namespaces); in practice
// that means root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if unix.Geteuid() != 0 {
		Unavailable(t, "needs root (network namespaces, XDP attach, BPF); run as root or with NDKXDP_STRICT unset to skip")
	}
}

// RequireTool stops the test unless the named program is on PATH.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, "needs %q on PATH: %v", name, err)
	}
	return p
}

// RequireFile stops the test unless path exists, and returns it.
func RequireFile(t testing.TB, path string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Unavailable(t, "needs %s: %v", path, err)
	}
	return path
}

var (
	ndkxdpOnce sync.Once
	ndkxdpPath string
	ndkxdpErr  error
)

// Ndkxdp builds cmd/ndkxdp once per test binary and returns its path,
// for tests that run the command as a process.
func Ndkxdp(t testing.TB) string {
	t.Helper()
	ndkxdpOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ndkxdp-test-bin-")
		if err != nil {
			ndkxdpErr = err
			return
		}
		ndkxdpPath = filepath.Join(dir, "ndkxdp")
		out, err := exec.Command("go", "build", "-o", ndkxdpPath, "github.com/ndkxdp/ndkxdp/cmd/ndkxdp").CombinedOutput()
		if err != nil {
			ndkxdpErr = fmt.Errorf("go build ./cmd/ndkxdp: %v\n%s", err, out)
		}
	})
	if ndkxdpErr != nil {
		t.Fatal(ndkxdpErr)
	}
	return ndkxdpPath
}
