package interop

import (
	_ "embed"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The daemon host image (ImageConfig.Systemd) is where ndkxdp's daemon
// runs as operators run it: systemd is PID 1, udev names and loads the
// devices, and the daemon is a unit (packaging/ndkxdp@.service). The test
// agent is a service of its own (guest/ndkxdp-agent.service running
// guest/init), so tests drive the guest as they drive the peer. No rxe:
// eth0 belongs to the daemon.

// SystemdSuite is the Debian release of the daemon host image: Debian 13,
// whose kernel (6.12) has AF_XDP zero-copy in virtio_net (6.1 has none).
const SystemdSuite = Debian13Suite

// SystemdPackages are the daemon host image's packages: the kernel,
// systemd and udev (the unit binds to eth0's device unit, which only udev
// makes), kmod, iproute2, ethtool (the NIC's channels) and passwd (the
// operator's groupadd of the socket's group). The daemon is
// a static binary that needs no library; it comes in at boot
// (Config.Files), so that a change to it does not rebuild the image.
var SystemdPackages = []string{
	"linux-image-amd64",
	"systemd",
	"udev",
	"kmod",
	"iproute2",
	"ethtool",
	"mount",
	"passwd",
}

// BackportsSources are Debian 13's archive with its backports, for a
// daemon host with a newer kernel than 6.12 (BackportsSystemdPackages):
// 6.12's virtio_net has AF_XDP zero-copy code that it never offers
// (doc.go, Zero copy on virtio-net).
var BackportsSources = []string{
	"deb http://deb.debian.org/debian trixie main",
	"deb http://deb.debian.org/debian trixie-updates main",
	"deb http://deb.debian.org/debian-security trixie-security main",
	"deb http://deb.debian.org/debian trixie-backports main",
}

// BackportsSystemdPackages are SystemdPackages with the kernel from
// trixie-backports.
func BackportsSystemdPackages() []string {
	out := slices.Clone(SystemdPackages)
	for i, p := range out {
		if p == "linux-image-amd64" {
			out[i] = p + "/trixie-backports"
		}
	}
	return out
}

// systemdModules are the modules the daemon host image keeps: the NIC and
// the agent's channel.
var systemdModules = []string{"virtio_pci", "virtio_net", "virtio_console"}

// systemdInit is the daemon host image's /init: systemd, which finds no
// /etc/initrd-release and so runs the initramfs as the system itself.
var systemdInit = []byte("#!/bin/sh\nexec /usr/lib/systemd/systemd \"$@\"\n")

// agentUnit runs the agent (guest/init) under systemd.
//
//go:embed guest/ndkxdp-agent.service
var agentUnit []byte

// agentPath is where the daemon host image has the agent script.
const agentPath = "/usr/local/sbin/ndkxdp-agent"

func modulesOf(cfg ImageConfig) []string {
	if cfg.Systemd {
		return systemdModules
	}
	return guestModules
}

// installAgentService puts the agent and its unit into rootfs, enabled.
func installAgentService(rootfs string) error {
	files := []struct {
		path string
		mode os.FileMode
		data []byte
	}{
		{agentPath, 0o755, guestInit},
		{"/etc/systemd/system/ndkxdp-agent.service", 0o644, agentUnit},
	}
	for _, f := range files {
		dst := filepath.Join(rootfs, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, f.data, f.mode); err != nil {
			return fmt.Errorf("install the agent service: %w", err)
		}
	}
	wants := filepath.Join(rootfs, "etc", "systemd", "system", "multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	if err := os.Symlink("../ndkxdp-agent.service", filepath.Join(wants, "ndkxdp-agent.service")); err != nil {
		return fmt.Errorf("enable the agent service: %w", err)
	}
	return nil
}

// File is a file Boot adds to the guest's root file system.
type File struct {
	Path string // absolute
	Mode os.FileMode
	Data []byte
}

// writeInitrd writes the initramfs a boot with files uses: an
// uncompressed newc archive of files (and their directories), then the
// image's own. The kernel unpacks concatenated archives in turn (as it
// does early microcode before a distribution's initramfs).
func writeInitrd(dst, imageInitrd string, files []File) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	cw := newCPIOWriter(out, 0)
	var dirs []string
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return fmt.Errorf("guest file %q: want an absolute clean path", f.Path)
		}
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	// Parents before children.
	slices.SortStableFunc(dirs, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for _, d := range dirs {
		if err := cw.Add(cpioEntry{Name: d[1:], Mode: unix.S_IFDIR | 0o755}, nil); err != nil {
			return err
		}
	}
	for _, f := range files {
		e := cpioEntry{Name: f.Path[1:], Mode: unix.S_IFREG | uint32(f.Mode.Perm()), Size: int64(len(f.Data))}
		if err := cw.Add(e, strings.NewReader(string(f.Data))); err != nil {
			return err
		}
	}
	if err := cw.Close(); err != nil {
		return err
	}
	in, err := os.Open(imageInitrd)
	if err != nil {
		return err
	}
	defer in.Close()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("append %s: %w", imageInitrd, err)
	}
	return out.Close()
}
