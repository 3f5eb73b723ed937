package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

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
// every kernel module not in keepMods, plus /init (initScript) and
// /dev/console, as a zstd-compressed newc archive. It returns the
// uncompressed size.
func packInitramfs(ctx context.Context, rootfs string, keepMods map[string]bool, initScript []byte, out string) (int64, error) {
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
		werr = cw.Add(cpioEntry{Name: "init", Mode: unix.S_IFREG | 0o755, Size: int64(len(initScript))}, strings.NewReader(string(initScript)))
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
