package interop

import (
	"fmt"
	"os"
	"strings"
)

// Accel is the qemu accelerator a VM runs under.
type Accel string

// Accelerators.
const (
	// AccelKVM runs the guest on the CPU's virtualization extensions.
	AccelKVM Accel = "kvm"
	// AccelTCG emulates the CPU in software: slower, but it runs anywhere.
	AccelTCG Accel = "tcg"
)

// DetectAccel picks the accelerator for this machine and says why.
// NDKXDP_INTEROP_ACCEL=kvm|tcg overrides the choice. KVM is chosen only when
// /dev/kvm opens and the CPU advertises VMX or SVM: a /dev/kvm without them
// (a paravirtual KVM inside a VM without nested virtualization) opens, but
// cannot boot an unmodified kernel. Boot also falls back to TCG when a KVM
// boot fails, and remembers that (see Config.Accel).
func DetectAccel() (Accel, string) {
	switch v := os.Getenv("NDKXDP_INTEROP_ACCEL"); v {
	case "kvm", "tcg":
		return Accel(v), "NDKXDP_INTEROP_ACCEL=" + v
	case "":
	default:
		return AccelTCG, fmt.Sprintf("NDKXDP_INTEROP_ACCEL=%q is neither kvm nor tcg; using tcg", v)
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return AccelTCG, fmt.Sprintf("/dev/kvm unusable (%v)", err)
	}
	f.Close()
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return AccelTCG, fmt.Sprintf("cannot read /proc/cpuinfo (%v)", err)
	}
	if !cpuHasVirt(string(cpuinfo)) {
		return AccelTCG, "/dev/kvm exists but the CPU has neither vmx nor svm (paravirtual KVM cannot boot a stock kernel)"
	}
	return AccelKVM, "/dev/kvm usable and the CPU has hardware virtualization"
}

// cpuHasVirt reports whether the first "flags" line of /proc/cpuinfo lists
// vmx (Intel VT-x) or svm (AMD-V).
func cpuHasVirt(cpuinfo string) bool {
	for line := range strings.Lines(cpuinfo) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "flags" {
			continue
		}
		for _, f := range strings.Fields(v) {
			if f == "vmx" || f == "svm" {
				return true
			}
		}
		return false
	}
	return false
}
