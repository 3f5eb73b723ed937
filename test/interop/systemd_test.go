package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// daemonFiles builds ndkxdp statically and stages it with the unit and
// the example config under dir in the guest, for the test to install
// them as the README tells operators to.
func daemonFiles(t *testing.T, dir string) []File {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ndkxdp")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/ndkxdp/ndkxdp/cmd/ndkxdp")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/ndkxdp: %v\n%s", err, out)
	}
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return []File{
		{Path: dir + "/ndkxdp", Mode: 0o755, Data: read(bin)},
		{Path: dir + "/packaging/ndkxdp@.service", Mode: 0o644, Data: read("../../packaging/ndkxdp@.service")},
		{Path: dir + "/packaging/ndkxdp.json.example", Mode: 0o644, Data: read("../../packaging/ndkxdp.json.example")},
	}
}

func TestDaemonUnderSystemdOnVirtio(t *testing.T) {
	requireVMTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	img, err := EnsureImage(ctx, ImageConfig{Systemd: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s: Debian %s, kernel %s, built in %.0fs (this run: %v)", img.Hash, img.Suite, img.KernelRelease, img.BuildSeconds, img.Built)
	const stage = "/root/ndkxdp-install"
	vm := bootVM(t, 3*time.Minute, Config{Image: img, Queues: 2, CPUs: 2, MemoryMB: 1024, Files: daemonFiles(t, stage)})
	out, errOut, code, err := vm.Run(ctx, "uname -r; ls -la "+stage+"; ethtool -l eth0; ethtool -i eth0; systemctl is-system-running; systemctl --failed --no-legend")
	t.Logf("exit %d err %v\n%s\n%s", code, err, out, errOut)
}
