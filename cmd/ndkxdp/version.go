package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
)

// version is set at link time (-ldflags "-X main.version=..."); without
// it the module version of the build is printed.
var version = ""

const versionSynopsis = "usage: ndkxdp version\n\nPrints the module version, the VCS revision it was built from, the Go\nversion, and which kernel features ndkxdp needs this kernel has."

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("version", versionSynopsis, stderr)
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	fmt.Fprint(stdout, buildText(debug.ReadBuildInfo()))
	fmt.Fprint(stdout, kernelText())
	return nil
}

// versionString is this binary's version as the daemon reports it to
// `status` and `info`: the link-time version, or the module's, and the
// VCS revision it was built from.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	v := version
	if v == "" && ok {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
			if s.Key == "vcs.modified" && s.Value == "true" {
				v += "+modified"
			}
		}
	}
	return v
}

// buildText is the version, revision and Go toolchain of this binary.
func buildText(bi *debug.BuildInfo, ok bool) string {
	v, rev, modified, built := version, "unknown", "", ""
	goVersion := runtime.Version()
	if ok {
		goVersion = bi.GoVersion
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			case "vcs.time":
				built = ", " + s.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("ndkxdp %s\nrevision: %s%s%s\ngo: %s %s/%s\n", v, rev, modified, built, goVersion, runtime.GOOS, runtime.GOARCH)
}

// kernelText is the kernel release and the features ndkxdp uses, each as
// found, missing, or unknown (probing BPF needs CAP_BPF).
func kernelText() string {
	var b strings.Builder
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		fmt.Fprintf(&b, "kernel: %s\n", unix.ByteSliceToString(u.Release[:]))
	}
	for _, f := range []struct {
		name  string
		probe func() error
	}{
		{"XDP programs", func() error { return features.HaveProgramType(ebpf.XDP) }},
		{"XSKMAP (AF_XDP steering)", func() error { return features.HaveMapType(ebpf.XSKMap) }},
		{"bpf_redirect_map from XDP", func() error { return features.HaveProgramHelper(ebpf.XDP, asm.FnRedirectMap) }},
		{"AF_XDP sockets", probeXSK},
		{"AF_XDP multi-buffer (path MTU 4096)", probeMultiBuffer},
	} {
		fmt.Fprintf(&b, "  %-38s %s\n", f.name+":", featureState(f.probe()))
	}
	return b.String()
}

func featureState(err error) string {
	switch {
	case err == nil:
		return "yes"
	case errors.Is(err, ebpf.ErrNotSupported):
		return "no"
	case errors.Is(err, unix.EPERM):
		return "unknown (probing needs CAP_BPF)"
	}
	return "unknown (" + err.Error() + ")"
}

func probeXSK() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	switch err {
	case nil:
		unix.Close(fd)
		return nil
	case unix.EAFNOSUPPORT:
		return ebpf.ErrNotSupported
	case unix.EPERM:
		return fmt.Errorf("needs CAP_NET_RAW to tell")
	}
	return err
}

// probeMultiBuffer goes by the kernel version: XDP_USE_SG for AF_XDP
// arrived in Linux 6.6.
func probeMultiBuffer() error {
	v, err := features.LinuxVersionCode()
	if err != nil {
		return err
	}
	if v < 6<<16|6<<8 {
		return ebpf.ErrNotSupported
	}
	return nil
}
