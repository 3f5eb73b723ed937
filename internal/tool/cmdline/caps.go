package cmdline

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Capability is a Linux capability a command needs, and why.
type Capability struct {
	Bit  uint
	Name string
	Why  string
}

// The capabilities the tools need (capabilities(7)). AF_XDP sockets need
// CAP_NET_RAW (the kernel's xsk_create checks it), and the verifier takes
// the XDP program's packet-pointer arithmetic only with CAP_PERFMON
// (bpf_allow_ptr_leaks); a user may think of both as CAP_NET_ADMIN's and
// CAP_BPF's, which do not cover them.
var (
	CapNetAdmin = Capability{12, "CAP_NET_ADMIN", "attach XDP programs, configure links"}
	CapNetRaw   = Capability{13, "CAP_NET_RAW", "open AF_XDP sockets"}
	CapIPCLock  = Capability{14, "CAP_IPC_LOCK", "lock the packet buffers (UMEM) in memory"}
	CapSysAdmin = Capability{21, "CAP_SYS_ADMIN", "create network namespaces"}
	CapPerfmon  = Capability{38, "CAP_PERFMON", "have the verifier accept the XDP program's pointer arithmetic"}
	CapBPF      = Capability{39, "CAP_BPF", "load the XDP program and its maps"}
)

// ToolCaps are what a tool on an existing interface needs; the commands
// that build their own veth pair (demo, perf baseline) also need
// CAP_SYS_ADMIN.
var (
	ToolCaps = []Capability{CapNetAdmin, CapNetRaw, CapIPCLock, CapBPF, CapPerfmon}
	PairCaps = []Capability{CapNetAdmin, CapNetRaw, CapIPCLock, CapBPF, CapPerfmon, CapSysAdmin}
)

// RequireCaps checks the process's effective capabilities before anything
// touches the system, and names each one missing.
func RequireCaps(need []Capability) error {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	defer f.Close()
	eff, err := EffectiveCaps(f)
	if err != nil {
		return err
	}
	return MissingCaps(eff, need)
}

// EffectiveCaps reads the CapEff line of a /proc/PID/status file.
func EffectiveCaps(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("read capabilities: CapEff %q: %w", v, err)
			}
			return caps, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return 0, fmt.Errorf("read capabilities: no CapEff line in /proc/self/status")
}

// MissingCaps names the capabilities of need that eff lacks, each with
// what it is for, and says how to grant them.
func MissingCaps(eff uint64, need []Capability) error {
	var miss, names []string
	for _, c := range need {
		names = append(names, strings.ToLower(c.Name))
		if eff&(1<<c.Bit) == 0 {
			miss = append(miss, fmt.Sprintf("%s (to %s)", c.Name, c.Why))
		}
	}
	if len(miss) == 0 {
		return nil
	}
	return fmt.Errorf("missing capabilities: %s; run as root, or grant them: sudo setcap %s+ep %s",
		strings.Join(miss, ", "), strings.Join(names, ","), executable())
}

func executable() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "ndkxdp"
}

// CapNames lists the names of caps for a message.
func CapNames(caps []Capability) string {
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}
