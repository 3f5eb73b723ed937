package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// build makes the peer image of cfg in a private directory under the
// cache, then renames it to the cache directory named hash, so readers
// never see a half-built image.
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
	what := "Soft-RoCE peer"
	if cfg.Systemd {
		what = "daemon host"
	}
	fmt.Fprintf(cfg.Progress, "interop: building the %s image %s (Debian %s, %d packages) in %s; this takes a minute or two\n",
		what, hash, cfg.Suite, len(cfg.Packages), cfg.CacheDir)
	stop := progressTicker(cfg.Progress, start, "building the peer image")
	defer stop()

	rootfs := filepath.Join(tmp, "rootfs")
	logPath := filepath.Join(tmp, "mmdebstrap.log")
	if err := mmdebstrap(ctx, cfg, sources, rootfs, logPath); err != nil {
		return nil, err
	}
	initScript := guestInit
	if !cfg.Systemd {
		if err := buildTools(ctx, cfg, sources, tmp, rootfs); err != nil {
			return nil, err
		}
	} else {
		if err := installAgentService(rootfs); err != nil {
			return nil, err
		}
		initScript = systemdInit
	}
	fmt.Fprintf(cfg.Progress, "interop: root file system ready after %.0fs; packing the initramfs\n", time.Since(start).Seconds())
	release, keepMods, err := takeKernel(rootfs, tmp, modulesOf(cfg))
	if err != nil {
		return nil, err
	}
	m, err := packImage(ctx, cfg, rootfs, tmp, release, keepMods, initScript, start)
	if err != nil {
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
		hash, m.BuildSeconds, release, float64(m.InitrdBytes)/1e6, float64(m.UnpackedBytes)/1e6)
	img, err = loadImage(dir, hash)
	if err != nil {
		return nil, err
	}
	img.Built = true
	return img, nil
}

// packImage packs rootfs's initramfs into tmp and writes the image's
// manifest beside it.
func packImage(ctx context.Context, cfg ImageConfig, rootfs, tmp, release string, keepMods map[string]bool, initScript []byte, start time.Time) (*Manifest, error) {
	versions, err := exec.CommandContext(ctx, "chroot", rootfs, "dpkg-query", "-W", "-f", "${Package} ${Version}\n").Output()
	if err != nil {
		return nil, fmt.Errorf("list installed packages: %w", err)
	}
	unpacked, err := packInitramfs(ctx, rootfs, keepMods, initScript, filepath.Join(tmp, "initrd.zst"))
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
		Systemd:       cfg.Systemd,
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
	return &m, nil
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
	if err := runMmdebstrap(ctx, args, cfg.Suite, rootfs, sources, logPath); err != nil {
		return fmt.Errorf("mmdebstrap %s: %w", cfg.Suite, err)
	}
	return nil
}

// runMmdebstrap runs mmdebstrap with args, the dpkg exclusions, suite,
// target and sources, its output in logPath; a failure carries the log's
// last lines.
func runMmdebstrap(ctx context.Context, args []string, suite, target string, sources []string, logPath string) error {
	for _, p := range dpkgExcludes {
		args = append(args, "--dpkgopt=path-exclude="+p)
	}
	args = append(args, suite, target)
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
		return fmt.Errorf("%w (last lines of its log:\n%s)", err, tail(logPath, 20))
	}
	return nil
}

// buildTools compiles the guest's tools (guestTools) in a root of their
// own, built with mmdebstrap from the same suite and sources plus
// toolPackages, and installs them into rootfs. The build root is deleted.
func buildTools(ctx context.Context, cfg ImageConfig, sources []string, tmp, rootfs string) error {
	broot := filepath.Join(tmp, "toolroot")
	args := []string{
		"--mode=root",
		"--variant=essential",
		"--include=" + strings.Join(toolPackages, ","),
	}
	for _, g := range guestTools {
		src := filepath.Join(tmp, g.name+".c")
		if err := os.WriteFile(src, g.src, 0o644); err != nil {
			return err
		}
		bin := "/tmp/ndkxdp-" + g.name
		args = append(args,
			"--customize-hook=upload "+src+" /tmp/"+g.name+".c",
			"--customize-hook=chroot \"$1\" gcc -O2 -Wall -Werror -o "+bin+" /tmp/"+g.name+".c -lrdmacm -libverbs",
			"--customize-hook=download "+bin+" "+filepath.Join(tmp, "ndkxdp-"+g.name))
	}
	if err := runMmdebstrap(ctx, args, cfg.Suite, broot, sources, filepath.Join(tmp, "tools.log")); err != nil {
		return fmt.Errorf("build the guest's tools (mmdebstrap %s with %s): %w", cfg.Suite, strings.Join(toolPackages, ", "), err)
	}
	if err := removeBuildDir(broot); err != nil {
		return err
	}
	for _, g := range guestTools {
		dst := filepath.Join(rootfs, filepath.FromSlash(strings.TrimPrefix(g.path, "/")))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := copyFile(filepath.Join(tmp, "ndkxdp-"+g.name), dst); err != nil {
			return err
		}
		if err := os.Chmod(dst, 0o755); err != nil {
			return err
		}
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

// takeKernel copies the one kernel in rootfs's /boot to dir/vmlinuz and
// returns its release and the modules roots, with those they depend on.
func takeKernel(rootfs, dir string, roots []string) (release string, keepMods map[string]bool, err error) {
	kernels, _ := filepath.Glob(filepath.Join(rootfs, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return "", nil, fmt.Errorf("expected one kernel in the image's /boot, found %d", len(kernels))
	}
	release = strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	if err := copyFile(kernels[0], filepath.Join(dir, "vmlinuz")); err != nil {
		return "", nil, err
	}
	modDir := filepath.Join("lib", "modules", release)
	depFile, err := os.ReadFile(filepath.Join(rootfs, "usr", modDir, "modules.dep"))
	if errors.Is(err, os.ErrNotExist) {
		depFile, err = os.ReadFile(filepath.Join(rootfs, modDir, "modules.dep"))
	}
	if err != nil {
		return "", nil, fmt.Errorf("read modules.dep of %s: %w", release, err)
	}
	// A module the kernel has built in needs no file (trixie builds
	// virtio_console in).
	builtin, _ := os.ReadFile(filepath.Join(rootfs, "usr", modDir, "modules.builtin"))
	roots = slices.DeleteFunc(slices.Clone(roots), func(m string) bool { return isBuiltin(builtin, m) })
	keepMods, err = moduleClosure(depFile, roots)
	if err != nil {
		return "", nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	return release, keepMods, nil
}

// isBuiltin reports whether a modules.builtin file lists module.
func isBuiltin(modulesBuiltin []byte, module string) bool {
	for line := range strings.Lines(string(modulesBuiltin)) {
		if moduleName(strings.TrimSpace(line)) == strings.ReplaceAll(module, "-", "_") {
			return true
		}
	}
	return false
}
