package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// readNewc parses a newc archive the way the kernel does
// (init/initramfs.c), for checking cpioWriter.
type newcMember struct {
	name        string
	mode, nlink uint32
	uid, gid    uint32
	mtime       uint32
	rmaj, rmin  uint32
	data        []byte
}

func readNewc(b []byte) ([]newcMember, error) {
	var out []newcMember
	off := 0
	for {
		if off+cpioHeaderLen > len(b) {
			return nil, fmt.Errorf("truncated header at %d", off)
		}
		h := b[off : off+cpioHeaderLen]
		if string(h[:6]) != cpioMagic {
			return nil, fmt.Errorf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				panic(err) // test helper on our own output
			}
			return uint32(v)
		}
		m := newcMember{mode: field(1), uid: field(2), gid: field(3), nlink: field(4), mtime: field(5), rmaj: field(9), rmin: field(10)}
		size, namesize := int(field(6)), int(field(11))
		off += cpioHeaderLen
		if off+namesize > len(b) || namesize < 1 || b[off+namesize-1] != 0 {
			return nil, fmt.Errorf("bad name at %d", off)
		}
		m.name = string(b[off : off+namesize-1])
		off = (off + namesize + 3) &^ 3
		if off+size > len(b) {
			return nil, fmt.Errorf("%s: truncated data", m.name)
		}
		m.data = b[off : off+size]
		off = (off + size + 3) &^ 3
		if m.name == cpioTrailer {
			if off != len(b) {
				return nil, fmt.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out, nil
		}
		out = append(out, m)
	}
}

func TestCPIOWriterTree(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "usr/share/doc/x"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/share/doc/x/README"), []byte("docs"), 0o644))
	must(os.WriteFile(filepath.Join(root, "empty"), nil, 0o600))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))

	var buf bytes.Buffer
	w := newCPIOWriter(&buf, 1234)
	must(w.AddTree(root, func(rel string, isDir bool) bool { return rel != "usr/share/doc" }))
	must(w.Add(cpioEntry{Name: "dev/console", Mode: unix.S_IFCHR | 0o600, RdevMajor: 5, RdevMinor: 1}, nil))
	must(w.Close())
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not a multiple of 4", buf.Len())
	}
	ms, err := readNewc(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]newcMember{}
	var names []string
	for _, m := range ms {
		got[m.name] = m
		names = append(names, m.name)
		if m.mtime != 1234 {
			t.Errorf("%s: mtime %d", m.name, m.mtime)
		}
	}
	want := []string{"bin", "empty", "usr", "usr/bin", "usr/bin/tool", "usr/bin/tool2", "usr/share", "dev/console"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("members %q, want %q (lexical, doc excluded)", names, want)
	}
	if m := got["usr/bin/tool"]; string(m.data) != "#!/bin/sh\necho hi\n" || m.mode != unix.S_IFREG|0o755 {
		t.Errorf("tool: mode %o data %q", m.mode, m.data)
	}
	if m := got["usr/bin/tool2"]; string(m.data) != "#!/bin/sh\necho hi\n" || m.nlink != 1 {
		t.Errorf("hard link must be an independent copy: nlink %d data %q", m.nlink, m.data)
	}
	if m := got["bin"]; m.mode&unix.S_IFMT != unix.S_IFLNK || string(m.data) != "usr/bin" {
		t.Errorf("symlink: mode %o target %q", m.mode, m.data)
	}
	if m := got["usr"]; m.mode&unix.S_IFMT != unix.S_IFDIR || m.nlink != 2 {
		t.Errorf("dir: mode %o nlink %d", m.mode, m.nlink)
	}
	if m := got["dev/console"]; m.mode != unix.S_IFCHR|0o600 || m.rmaj != 5 || m.rmin != 1 {
		t.Errorf("console: mode %o rdev %d:%d", m.mode, m.rmaj, m.rmin)
	}
	if m := got["empty"]; len(m.data) != 0 || m.mode != unix.S_IFREG|0o600 {
		t.Errorf("empty: mode %o %d bytes", m.mode, len(m.data))
	}

	// Same tree, same bytes.
	var again bytes.Buffer
	w = newCPIOWriter(&again, 1234)
	must(w.AddTree(root, func(rel string, isDir bool) bool { return rel != "usr/share/doc" }))
	must(w.Add(cpioEntry{Name: "dev/console", Mode: unix.S_IFCHR | 0o600, RdevMajor: 5, RdevMinor: 1}, nil))
	must(w.Close())
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("packing the same tree twice gave different archives")
	}
}

func TestCPIOWriterRejects(t *testing.T) {
	for _, e := range []cpioEntry{
		{Name: "", Mode: unix.S_IFREG},
		{Name: "/abs", Mode: unix.S_IFREG},
		{Name: "a\x00b", Mode: unix.S_IFREG},
		{Name: "big", Mode: unix.S_IFREG, Size: 1 << 32},
	} {
		w := newCPIOWriter(io.Discard, 0)
		if err := w.Add(e, bytes.NewReader(nil)); err == nil {
			t.Errorf("Add(%q, size %d) accepted", e.Name, e.Size)
		}
	}
	w := newCPIOWriter(io.Discard, 0)
	if err := w.Add(cpioEntry{Name: "short", Mode: unix.S_IFREG, Size: 10}, strings.NewReader("abc")); err == nil {
		t.Error("a member shorter than its announced size was accepted")
	}
	if err := w.Close(); err == nil {
		t.Error("Close after a failed Add succeeded")
	}
}

// TestCPIOReadableByCPIO checks the archive against GNU cpio when present.
func TestCPIOReadableByCPIO(t *testing.T) {
	cpio := testenv.RequireTool(t, "cpio")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := newCPIOWriter(&buf, 0)
	if err := errors.Join(w.AddTree(root, nil), w.Close()); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(cpio, "-i", "--quiet", "-D", out)
	cmd.Stdin = &buf
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v: %s", err, b)
	}
	if b, err := os.ReadFile(filepath.Join(out, "f")); err != nil || string(b) != "data" {
		t.Fatalf("extracted f: %q %v", b, err)
	}
}

func TestModuleClosure(t *testing.T) {
	dep := []byte(`kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz: kernel/net/ipv6/ip6_udp_tunnel.ko.xz kernel/net/ipv4/udp_tunnel.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/net/ipv6/ip6_udp_tunnel.ko.xz:
kernel/net/ipv4/udp_tunnel.ko.xz:
kernel/drivers/infiniband/core/ib_core.ko.xz:
kernel/arch/x86/crypto/crc32-pclmul.ko:
kernel/fs/ext4/ext4.ko: kernel/fs/jbd2/jbd2.ko
kernel/fs/jbd2/jbd2.ko:
`)
	got, err := moduleClosure(dep, []string{"rdma_rxe", "crc32-pclmul"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"crc32_pclmul", "ib_core", "ip6_udp_tunnel", "rdma_rxe", "udp_tunnel"}
	if len(got) != len(want) {
		t.Fatalf("closure %v, want %v", got, want)
	}
	for _, m := range want {
		if !got[m] {
			t.Errorf("closure lacks %s: %v", m, got)
		}
	}
	if _, err := moduleClosure(dep, []string{"virtio_net"}); err == nil || !strings.Contains(err.Error(), "virtio_net") {
		t.Errorf("a module missing from modules.dep gave %v", err)
	}
	if n := moduleName("kernel/arch/x86/crypto/crc32-pclmul.ko.zst"); n != "crc32_pclmul" {
		t.Errorf("moduleName: %q", n)
	}
}

func TestNamesSuite(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"deb http://mirror/debian bookworm main\n", true},
		{"deb [arch=amd64 signed-by=/k.gpg] http://mirror/debian bookworm main\n", true},
		{"# deb http://mirror/debian bookworm main\n", false},
		{"deb http://mirror/debian trixie main\n", false},
		{"deb http://mirror/debian bookworm-updates main\n", false},
		{"Types: deb\nURIs: http://mirror/debian\nSuites: bookworm bookworm-updates\nComponents: main\n", true},
		{"Types: deb\nURIs: http://mirror/debian\nSuites: trixie\n", false},
		{"", false},
	} {
		if got := namesSuite(tc.text, "bookworm"); got != tc.want {
			t.Errorf("namesSuite(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestInputHashFollowsInputs(t *testing.T) {
	base := (&ImageConfig{}).withDefaults()
	h0, err := inputHash(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := inputHash(base, nil); h != h0 {
		t.Fatal("hash not stable")
	}
	reordered := base
	reordered.Packages = append([]string{base.Packages[len(base.Packages)-1]}, base.Packages[:len(base.Packages)-1]...)
	if h, _ := inputHash(reordered, nil); h != h0 {
		t.Error("package order changed the hash")
	}
	more := base
	more.Packages = append(append([]string(nil), base.Packages...), "strace")
	suite := base
	suite.Suite = "trixie"
	src := filepath.Join(t.TempDir(), "x.list")
	if err := os.WriteFile(src, []byte("deb http://mirror/debian bookworm main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hMore, _ := inputHash(more, nil)
	hSuite, _ := inputHash(suite, nil)
	hSrc, _ := inputHash(base, []string{src})
	for name, h := range map[string]string{"package": hMore, "suite": hSuite, "apt sources": hSrc} {
		if h == h0 {
			t.Errorf("changing the %s kept the hash", name)
		}
	}
	if _, err := inputHash(base, []string{filepath.Join(t.TempDir(), "missing.list")}); err == nil {
		t.Error("a missing sources file was hashed")
	}
	// The guest's tools: their source and the packages that build them.
	// guestTools holds the sources the hash reads.
	src0, pk0 := guestTools[0].src, toolPackages
	defer func() { guestTools[0].src, toolPackages = src0, pk0 }()
	guestTools[0].src = append(append([]byte(nil), src0...), '\n')
	hTool, _ := inputHash(base, nil)
	guestTools[0].src, toolPackages = src0, append(append([]string(nil), pk0...), "make")
	hToolPkgs, _ := inputHash(base, nil)
	for name, h := range map[string]string{"sendinv source": hTool, "tool packages": hToolPkgs} {
		if h == h0 {
			t.Errorf("changing the %s kept the hash", name)
		}
	}
}

func TestEnsureImageRejectsBadPackage(t *testing.T) {
	for _, p := range []string{"", "a,b", "a b"} {
		_, err := EnsureImage(context.Background(), ImageConfig{Packages: []string{p}, CacheDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "bad package name") {
			t.Errorf("package %q: %v", p, err)
		}
	}
}

func TestLockFileExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := lockFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if _, err := lockFile(ctx, path); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v, want a deadline error", err)
	}
	unlock()
	unlock2, err := lockFile(context.Background(), path)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}

func TestRemoveBuildDirRefusesMounts(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	inner := filepath.Join(dir, "rootfs", "proc")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	keep := filepath.Join(inner, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := removeBuildDir(dir)
	if _, serr := os.Stat(keep); serr != nil {
		t.Errorf("a file inside a mount was deleted: %v", serr)
	}
	if uerr := unix.Unmount(inner, 0); uerr != nil {
		t.Fatalf("unmount: %v", uerr)
	}
	if err == nil || !strings.Contains(err.Error(), "mounted inside") {
		t.Fatalf("removeBuildDir with a mount inside: %v", err)
	}
	if err := removeBuildDir(dir); err != nil {
		t.Fatalf("after unmount: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory still there: %v", err)
	}
}

func TestCPUHasVirt(t *testing.T) {
	for _, tc := range []struct {
		info string
		want bool
	}{
		{"processor\t: 0\nflags\t\t: fpu vme sse2 vmx ept\n", true},
		{"processor\t: 0\nflags\t\t: fpu svm npt\n", true},
		{"processor\t: 0\nflags\t\t: fpu hypervisor sse4_2\n", false},
		{"processor\t: 0\nflags\t\t: fpu vmxx\n", false},
		{"", false},
	} {
		if got := cpuHasVirt(tc.info); got != tc.want {
			t.Errorf("cpuHasVirt(%q) = %v, want %v", tc.info, got, tc.want)
		}
	}
}

func TestParseSysfsGID(t *testing.T) {
	g, err := parseSysfsGID("0000:0000:0000:0000:0000:ffff:c612:0102")
	if err != nil || g.Addr().String() != "198.18.1.2" {
		t.Fatalf("%v %v", g, err)
	}
	for _, bad := range []string{"", "0000:0000", "0000:0000:0000:0000:0000:ffff:c612:010", "0000:0000:0000:0000:0000:ffff:c612:01022", "0000:0000:0000:0000:0000:ffff:c612:zz02"} {
		if _, err := parseSysfsGID(bad); err == nil {
			t.Errorf("parseSysfsGID(%q) accepted", bad)
		}
	}
}
