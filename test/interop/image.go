package interop

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
)

// guestInit is PID 1 of the peer VM and its command agent.
//
//go:embed guest/init
var guestInit []byte

// imageFormat changes whenever the way an image is assembled changes, so
// that caches built by older code are not reused.
const imageFormat = "ndkxdp-interop-image-1"

// DefaultSuite is the Debian release the peer is built from: Debian 12,
// whose stock kernel (6.1) ships rdma_rxe and sch_netem as modules.
const DefaultSuite = "bookworm"

// DefaultPackages is what the peer runs: the kernel (rdma_rxe), kmod to load
// it, rdma-core with the rxe provider, the verbs and rdma_cm tools, perftest,
// iproute2 (ip, rdma, tc) and ping. mount is not Essential in Debian 12.
var DefaultPackages = []string{
	"linux-image-amd64",
	"kmod",
	"rdma-core",
	"ibverbs-providers",
	"ibverbs-utils",
	"rdmacm-utils",
	"perftest",
	"iproute2",
	"iputils-ping",
	"mount",
}

// guestModules are the kernel modules the initramfs keeps, with everything
// modules.dep says they need. Nothing autoloads in the guest (no udev): the
// init script loads these by name.
var guestModules = []string{
	"virtio_pci", "virtio_net", "virtio_console", // the NIC and the agent channel
	"rdma_rxe", "rdma_ucm", "ib_uverbs", "ib_umad", // Soft-RoCE and its user-space interfaces
	"sch_netem",                     // loss injection
	"crc32_generic", "crc32_pclmul", // the "crc32" shash rxe computes the ICRC with
}

// dpkgExcludes keep documentation and translations out of the image.
var dpkgExcludes = []string{
	"/usr/share/doc/*",
	"/usr/share/man/*",
	"/usr/share/info/*",
	"/usr/share/locale/*",
	"/usr/share/lintian/*",
}

// packExcludes are paths (relative to the root, slash-separated, matched by
// prefix) left out of the initramfs: the kernel is booted from outside, and
// caches, the hardware database and package indexes are not used at run time.
var packExcludes = []string{
	"boot/",
	"var/cache/",
	"var/lib/apt/",
	"var/log/",
	"usr/lib/udev/hwdb.bin",
	"usr/lib/udev/hwdb.d/",
	"etc/udev/hwdb.bin",
}

// ImageConfig says which peer image to build and where to keep it.
type ImageConfig struct {
	// Suite is the Debian release; empty means DefaultSuite.
	Suite string
	// Packages are installed on top of the Essential set; nil means
	// DefaultPackages.
	Packages []string
	// CacheDir holds one directory per image, named by the hash of its
	// inputs. Empty means $NDKXDP_INTEROP_CACHE, or /var/cache/ndkxdp/interop.
	CacheDir string
	// Progress receives a line when a build starts, while it runs and when it
	// ends; nil means os.Stderr.
	Progress io.Writer
	// BuildTimeout bounds a build; 0 means 15 minutes.
	BuildTimeout time.Duration
}

// DefaultCacheDir is where images are kept unless NDKXDP_INTEROP_CACHE or
// ImageConfig.CacheDir says otherwise.
const DefaultCacheDir = "/var/cache/ndkxdp/interop"

// Image is a built peer image: a kernel and an initramfs.
type Image struct {
	Dir    string // cache directory of this image
	Hash   string // hash of the inputs, the directory's name
	Kernel string // path of the kernel (bzImage)
	Initrd string // path of the zstd-compressed initramfs
	Manifest
	// Built is true when this call built the image, false when it came from
	// the cache.
	Built bool
}

// Manifest records what went into an image; it is stored beside it as
// manifest.json.
type Manifest struct {
	Format        string   `json:"format"`
	Suite         string   `json:"suite"`
	Packages      []string `json:"packages"`
	KernelRelease string   `json:"kernel_release"`
	Modules       []string `json:"modules"`
	InitrdBytes   int64    `json:"initrd_bytes"`
	UnpackedBytes int64    `json:"unpacked_bytes"`
	BuildSeconds  float64  `json:"build_seconds"`
	// Versions lists every installed package as "name version".
	Versions []string `json:"versions"`
}

func (c *ImageConfig) withDefaults() ImageConfig {
	out := *c
	if out.Suite == "" {
		out.Suite = DefaultSuite
	}
	if out.Packages == nil {
		out.Packages = DefaultPackages
	}
	if out.CacheDir == "" {
		out.CacheDir = os.Getenv("NDKXDP_INTEROP_CACHE")
	}
	if out.CacheDir == "" {
		out.CacheDir = DefaultCacheDir
	}
	if out.Progress == nil {
		out.Progress = os.Stderr
	}
	if out.BuildTimeout == 0 {
		out.BuildTimeout = 15 * time.Minute
	}
	return out
}

// aptSources returns the host's apt source files that name suite. The image
// is built from the same mirrors the host uses; when none names the suite,
// mmdebstrap falls back to its own default.
func aptSources(suite string) ([]string, error) {
	files := []string{"/etc/apt/sources.list"}
	for _, pat := range []string{"/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read apt sources: %w", err)
		}
		if namesSuite(string(b), suite) {
			out = append(out, f)
		}
	}
	return out, nil
}

// namesSuite reports whether an apt source file has an active entry for
// suite, in one-line or deb822 style.
func namesSuite(text, suite string) bool {
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		switch {
		case fields[0] == "deb":
			if slices.Contains(fields[1:], suite) {
				return true
			}
		case strings.EqualFold(fields[0], "Suites:"):
			if slices.Contains(fields[1:], suite) {
				return true
			}
		}
	}
	return false
}

// inputHash names an image by everything that decides its content: the
// assembly format, suite, packages, the guest init, the module set, the
// exclusions and the apt sources it is fetched from.
func inputHash(cfg ImageConfig, sources []string) (string, error) {
	h := sha256.New()
	put := func(k string, v []byte) {
		fmt.Fprintf(h, "%s %d\n", k, len(v))
		h.Write(v)
	}
	put("format", []byte(imageFormat))
	put("suite", []byte(cfg.Suite))
	pkgs := slices.Clone(cfg.Packages)
	slices.Sort(pkgs)
	put("packages", []byte(strings.Join(pkgs, "\n")))
	put("init", guestInit)
	put("modules", []byte(strings.Join(guestModules, "\n")))
	put("dpkg-excludes", []byte(strings.Join(dpkgExcludes, "\n")))
	put("pack-excludes", []byte(strings.Join(packExcludes, "\n")))
	for _, f := range sources {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("hash apt sources: %w", err)
		}
		put("source "+f, b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// EnsureImage returns the peer image for cfg, building it first unless the
// cache already holds it. Builders running at the same time wait for each
// other; a build goes to a temporary directory that is renamed into place
// only when complete, so a killed build never leaves a half image behind.
// Building needs root, mmdebstrap and zstd, and takes about a minute with a
// warm package mirror.
func EnsureImage(ctx context.Context, cfg ImageConfig) (*Image, error) {
	cfg = cfg.withDefaults()
	for _, p := range cfg.Packages {
		if p == "" || strings.ContainsAny(p, ", \t\n") {
			return nil, fmt.Errorf("interop image: bad package name %q", p)
		}
	}
	sources, err := aptSources(cfg.Suite)
	if err != nil {
		return nil, fmt.Errorf("interop image: %w", err)
	}
	hash, err := inputHash(cfg, sources)
	if err != nil {
		return nil, fmt.Errorf("interop image: %w", err)
	}
	dir := filepath.Join(cfg.CacheDir, hash)
	if img, err := loadImage(dir, hash); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("interop image: create cache: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.BuildTimeout)
	defer cancel()
	unlock, err := lockFile(ctx, filepath.Join(cfg.CacheDir, hash+".lock"))
	if err != nil {
		return nil, fmt.Errorf("interop image %s: %w", hash, err)
	}
	defer unlock()
	// Another builder may have finished while this one waited.
	if img, err := loadImage(dir, hash); err == nil {
		return img, nil
	}
	removeStaleBuilds(cfg.CacheDir)
	img, err := build(ctx, cfg, sources, hash)
	if err != nil {
		return nil, fmt.Errorf("interop image %s: %w", hash, err)
	}
	return img, nil
}

func loadImage(dir, hash string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	img := &Image{Dir: dir, Hash: hash, Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.zst")}
	if err := json.Unmarshal(b, &img.Manifest); err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", dir, err)
	}
	for _, f := range []string{img.Kernel, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can end
// the wait.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for another build holding %s: %w", path, context.Cause(ctx))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

const buildPrefix = ".build-"

// removeStaleBuilds deletes temporary build directories left by builders
// that died. The caller holds the image lock, and a build directory carries
// its builder's PID in its name.
func removeStaleBuilds(cacheDir string) {
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), buildPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || vethpair.ProcessAlive(pid) {
			continue
		}
		_ = removeBuildDir(filepath.Join(cacheDir, e.Name()))
	}
}

// removeBuildDir deletes a build directory unless something is still
// mounted inside it: mmdebstrap mounts /proc, /sys and /dev into the chroot
// while it runs, and a builder killed at that moment leaves them mounted.
// Deleting through such a mount would delete the host's files.
func removeBuildDir(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(mounts)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == abs || strings.HasPrefix(f[4], abs+"/")) {
			return fmt.Errorf("not removing %s: %s is mounted inside it (unmount it, then delete the directory)", dir, f[4])
		}
	}
	return os.RemoveAll(dir)
}

func build(ctx context.Context, cfg ImageConfig, sources []string, hash string) (img *Image, err error) {
	for _, tool := range []string{"mmdebstrap", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("building the peer image needs %s (scripts/setup-debian.sh installs it): %w", tool, err)
		}
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(cfg.CacheDir, fmt.Sprintf("%s%d-", buildPrefix, os.Getpid()))
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := removeBuildDir(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}()
	fmt.Fprintf(cfg.Progress, "interop: building the Soft-RoCE peer image %s (Debian %s, %d packages) in %s; this takes a minute or two\n",
		hash, cfg.Suite, len(cfg.Packages), cfg.CacheDir)
	stop := progressTicker(cfg.Progress, start, "building the peer image")
	defer stop()

	rootfs := filepath.Join(tmp, "rootfs")
	logPath := filepath.Join(tmp, "mmdebstrap.log")
	if err := mmdebstrap(ctx, cfg, sources, rootfs, logPath); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "interop: root file system ready after %.0fs; packing the initramfs\n", time.Since(start).Seconds())
	kernels, _ := filepath.Glob(filepath.Join(rootfs, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return nil, fmt.Errorf("expected one kernel in the image's /boot, found %d", len(kernels))
	}
	release := strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	if err := copyFile(kernels[0], filepath.Join(tmp, "vmlinuz")); err != nil {
		return nil, err
	}
	modDir := filepath.Join("lib", "modules", release)
	depFile, err := os.ReadFile(filepath.Join(rootfs, "usr", modDir, "modules.dep"))
	if errors.Is(err, os.ErrNotExist) {
		depFile, err = os.ReadFile(filepath.Join(rootfs, modDir, "modules.dep"))
	}
	if err != nil {
		return nil, fmt.Errorf("read modules.dep of %s: %w", release, err)
	}
	keepMods, err := moduleClosure(depFile, guestModules)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	versions, err := exec.CommandContext(ctx, "chroot", rootfs, "dpkg-query", "-W", "-f", "${Package} ${Version}\n").Output()
	if err != nil {
		return nil, fmt.Errorf("list installed packages: %w", err)
	}
	unpacked, err := packInitramfs(ctx, rootfs, keepMods, filepath.Join(tmp, "initrd.zst"))
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(filepath.Join(tmp, "initrd.zst"))
	if err != nil {
		return nil, err
	}
	mods := make([]string, 0, len(keepMods))
	for m := range keepMods {
		mods = append(mods, m)
	}
	slices.Sort(mods)
	m := Manifest{
		Format:        imageFormat,
		Suite:         cfg.Suite,
		Packages:      cfg.Packages,
		KernelRelease: release,
		Modules:       mods,
		InitrdBytes:   st.Size(),
		UnpackedBytes: unpacked,
		BuildSeconds:  time.Since(start).Seconds(),
		Versions:      strings.Split(strings.TrimSpace(string(versions)), "\n"),
	}
	mj, err := json.MarshalIndent(&m, "", "\t")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "manifest.json"), append(mj, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := removeBuildDir(rootfs); err != nil {
		return nil, err
	}
	_ = os.Remove(logPath)
	// MkdirTemp made it private; the finished image is for everyone.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.CacheDir, hash)
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("move the finished image into place: %w", err)
	}
	fmt.Fprintf(cfg.Progress, "interop: peer image %s built in %.0fs (kernel %s, initramfs %.1f MB, %.1f MB unpacked)\n",
		hash, m.BuildSeconds, release, float64(m.InitrdBytes)/1e6, float64(unpacked)/1e6)
	img, err = loadImage(dir, hash)
	if err != nil {
		return nil, err
	}
	img.Built = true
	return img, nil
}

// progressTicker prints how long a step has been running every 15 s, so
// that a slow build is visibly alive.
func progressTicker(w io.Writer, start time.Time, what string) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "interop: still %s (%.0fs)\n", what, time.Since(start).Seconds())
			}
		}
	}()
	return func() { close(done) }
}

func mmdebstrap(ctx context.Context, cfg ImageConfig, sources []string, rootfs, logPath string) error {
	args := []string{
		"--mode=root",
		"--variant=essential",
		"--include=" + strings.Join(cfg.Packages, ","),
		// linux-image pulls in initramfs-tools, whose initrd the peer
		// never uses: skip generating it (it takes most of a minute).
		"--essential-hook=chroot \"$1\" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs && ln -s /bin/true \"$1/usr/sbin/update-initramfs\"",
	}
	for _, p := range dpkgExcludes {
		args = append(args, "--dpkgopt=path-exclude="+p)
	}
	args = append(args, cfg.Suite, rootfs)
	args = append(args, sources...)
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap %s: %w (last lines of its log:\n%s)", cfg.Suite, err, tail(logPath, 20))
	}
	return nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// moduleClosure returns the modules (by name, with "-" folded to "_") that
// roots need according to a modules.dep file, roots included. Every root
// must be listed.
func moduleClosure(modulesDep []byte, roots []string) (map[string]bool, error) {
	deps := make(map[string][]string)
	sc := bufio.NewScanner(strings.NewReader(string(modulesDep)))
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name := moduleName(mod)
		deps[name] = nil
		for _, d := range strings.Fields(rest) {
			deps[name] = append(deps[name], moduleName(d))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	keep := make(map[string]bool)
	todo := make([]string, 0, len(roots))
	for _, r := range roots {
		todo = append(todo, strings.ReplaceAll(r, "-", "_"))
	}
	for len(todo) > 0 {
		m := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if keep[m] {
			continue
		}
		d, ok := deps[m]
		if !ok {
			return nil, fmt.Errorf("module %s is not in modules.dep", m)
		}
		keep[m] = true
		todo = append(todo, d...)
	}
	return keep, nil
}

// moduleName turns "kernel/lib/crc32-pclmul.ko.xz" into "crc32_pclmul".
func moduleName(path string) string {
	base := filepath.Base(path)
	base, _, _ = strings.Cut(base, ".ko")
	return strings.ReplaceAll(base, "-", "_")
}

// packInitramfs writes the initramfs: rootfs minus packExcludes and minus
// every kernel module not in keepMods, plus /init and /dev/console, as a
// zstd-compressed newc archive. It returns the uncompressed size.
func packInitramfs(ctx context.Context, rootfs string, keepMods map[string]bool, out string) (int64, error) {
	f, err := os.Create(out)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	zst := exec.CommandContext(ctx, "zstd", "-q", "-T0", "-10", "-c")
	zst.Stdout = f
	var stderr strings.Builder
	zst.Stderr = &stderr
	pipe, err := zst.StdinPipe()
	if err != nil {
		return 0, err
	}
	if err := zst.Start(); err != nil {
		return 0, fmt.Errorf("start zstd: %w", err)
	}
	counter := &countingWriter{w: pipe}
	// A fixed mtime: the archive depends on the tree only.
	cw := newCPIOWriter(counter, 0)
	keep := func(rel string, isDir bool) bool {
		for _, p := range packExcludes {
			if strings.HasPrefix(rel, p) || (isDir && rel+"/" == p) {
				return false
			}
		}
		if rel == "init" || rel == "dev/console" {
			return false // added below
		}
		if !isDir && strings.Contains(rel, ".ko") && strings.Contains(rel, "lib/modules/") {
			return keepMods[moduleName(rel)]
		}
		return true
	}
	werr := cw.AddTree(rootfs, keep)
	if werr == nil {
		werr = cw.Add(cpioEntry{Name: "init", Mode: unix.S_IFREG | 0o755, Size: int64(len(guestInit))}, strings.NewReader(string(guestInit)))
	}
	if werr == nil {
		// The kernel opens /dev/console for PID 1 before init can mount
		// devtmpfs (init/main.c console_on_rootfs).
		werr = cw.Add(cpioEntry{Name: "dev/console", Mode: unix.S_IFCHR | 0o600, RdevMajor: 5, RdevMinor: 1}, nil)
	}
	if werr == nil {
		werr = cw.Close()
	}
	cerr := pipe.Close()
	if err := zst.Wait(); err != nil {
		return 0, fmt.Errorf("zstd: %w: %s", err, stderr.String())
	}
	if err := errors.Join(werr, cerr); err != nil {
		return 0, fmt.Errorf("pack initramfs: %w", err)
	}
	return counter.n, f.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
