package interop

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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

// guestSendInv is the source of ndkxdp-sendinv, the guest's SEND with
// Invalidate client (perftest has no such verb), compiled at image build.
//
//go:embed guest/sendinv.c
var guestSendInv []byte

// SendInvPath is where the image has ndkxdp-sendinv.
const SendInvPath = "/usr/local/bin/ndkxdp-sendinv"

// guestImm is the source of ndkxdp-imm, the guest's SEND and RDMA WRITE
// with immediate client and server (the image's perftest has neither
// --write_with_imm nor --send_with_imm), compiled at image build.
//
//go:embed guest/imm.c
var guestImm []byte

// ImmPath is where the image has ndkxdp-imm.
const ImmPath = "/usr/local/bin/ndkxdp-imm"

// guestTools are the guest's own tools: their names (the source is
// NAME.c) and where the image has them.
var guestTools = []struct {
	name, path string
	src        []byte
}{
	{"sendinv", SendInvPath, guestSendInv},
	{"imm", ImmPath, guestImm},
}

// toolPackages build the guest's own tools (guestTools) in a separate
// root that the image does not keep: the compiler stays out of the
// initramfs, and the tool links against the same Debian libraries the
// image has.
var toolPackages = []string{"gcc", "libc6-dev", "libibverbs-dev", "librdmacm-dev"}

// imageFormat changes whenever the way an image is assembled changes, so
// that caches built by older code are not reused.
const imageFormat = "ndkxdp-interop-image-2"

// DefaultSuite is the Debian release the peer is built from: Debian 12,
// whose stock kernel (6.1) ships rdma_rxe and sch_netem as modules.
const DefaultSuite = "bookworm"

// Debian13Suite is the second Soft-RoCE peer's release (ImageConfig{Suite:
// Debian13Suite}, same packages): Debian 13, kernel 6.12's rxe, rdma-core
// 56 and perftest 25.01.
const Debian13Suite = "trixie"

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
	// Sources are apt source lines ("deb URI SUITE COMPONENT") to build
	// from instead of the host's apt sources that name Suite; they must
	// name every suite the packages come from (a package may name its
	// release, "linux-image-amd64/trixie-backports").
	Sources []string
	// Systemd builds the daemon host image instead of the Soft-RoCE peer:
	// systemd is PID 1 and the agent one of its services (systemd.go).
	// Its Suite defaults to SystemdSuite and its Packages to
	// SystemdPackages.
	Systemd bool
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
	Systemd       bool     `json:"systemd,omitempty"`
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
		if out.Systemd {
			out.Suite = SystemdSuite
		}
	}
	if out.Packages == nil {
		out.Packages = DefaultPackages
		if out.Systemd {
			out.Packages = SystemdPackages
		}
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
// exclusions, the guest's tools with their build packages, and the apt
// sources it is fetched from.
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
	for _, g := range guestTools {
		put(g.name, g.src)
	}
	put("tool-packages", []byte(strings.Join(toolPackages, "\n")))
	put("modules", []byte(strings.Join(modulesOf(cfg), "\n")))
	if cfg.Systemd {
		put("systemd-init", systemdInit)
		put("agent-unit", agentUnit)
	}
	put("dpkg-excludes", []byte(strings.Join(dpkgExcludes, "\n")))
	put("pack-excludes", []byte(strings.Join(packExcludes, "\n")))
	for _, f := range sources {
		if strings.HasPrefix(f, "deb ") {
			put("source line", []byte(f))
			continue
		}
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
	if len(cfg.Sources) > 0 {
		for _, l := range cfg.Sources {
			if f := strings.Fields(l); len(f) < 4 || f[0] != "deb" || strings.ContainsAny(l, "\n") {
				return nil, fmt.Errorf("interop image: apt source %q: want \"deb URI SUITE COMPONENT...\"", l)
			}
		}
		sources = cfg.Sources
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
