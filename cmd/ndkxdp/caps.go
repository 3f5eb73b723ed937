package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// capability is a Linux capability a command needs, and why.
type capability struct {
	bit  uint
	name string
	why  string
}

// The capabilities the tools need (capabilities(7)). AF_XDP sockets need
// CAP_NET_RAW (the kernel's xsk_create checks it), and the verifier takes
// the XDP program's packet-pointer arithmetic only with CAP_PERFMON
// (bpf_allow_ptr_leaks); a user may think of both as CAP_NET_ADMIN's and
// CAP_BPF's, which do not cover them.
var (
	capNetAdmin = capability{12, "CAP_NET_ADMIN", "attach XDP programs, configure links"}
	capNetRaw   = capability{13, "CAP_NET_RAW", "open AF_XDP sockets"}
	capIPCLock  = capability{14, "CAP_IPC_LOCK", "lock the packet buffers (UMEM) in memory"}
	capSysAdmin = capability{21, "CAP_SYS_ADMIN", "create network namespaces"}
	capPerfmon  = capability{38, "CAP_PERFMON", "have the verifier accept the XDP program's pointer arithmetic"}
	capBPF      = capability{39, "CAP_BPF", "load the XDP program and its maps"}
)

// toolCaps are what a tool on an existing interface needs; the commands
// that build their own veth pair (demo, perf baseline) also need
// CAP_SYS_ADMIN.
var (
	toolCaps = []capability{capNetAdmin, capNetRaw, capIPCLock, capBPF, capPerfmon}
	pairCaps = []capability{capNetAdmin, capNetRaw, capIPCLock, capBPF, capPerfmon, capSysAdmin}
)

// requireCaps checks the process's effective capabilities before anything
// touches the system, and names each one missing.
func requireCaps(need []capability) error {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	defer f.Close()
	eff, err := effectiveCaps(f)
	if err != nil {
		return err
	}
	return missingCaps(eff, need)
}

// effectiveCaps reads the CapEff line of a /proc/PID/status file.
func effectiveCaps(r io.Reader) (uint64, error) {
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

// missingCaps names the capabilities of need that eff lacks, each with
// what it is for, and says how to grant them.
func missingCaps(eff uint64, need []capability) error {
	var miss, names []string
	for _, c := range need {
		names = append(names, strings.ToLower(c.name))
		if eff&(1<<c.bit) == 0 {
			miss = append(miss, fmt.Sprintf("%s (to %s)", c.name, c.why))
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

// capNames lists the names of caps for a message.
func capNames(caps []capability) string {
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}
