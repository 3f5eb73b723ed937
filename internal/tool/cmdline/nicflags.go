package cmdline

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// NICFlags are what a tool that attaches to a real NIC needs: how many of
// its queues, where the XDP program runs, how the AF_XDP sockets bind, and
// busy polling, and where the engines run. With -daemon they belong to the
// daemon and are refused.
type NICFlags struct {
	Queues, XDPMode, ZeroCopy, BusyPoll, EngineCPUs string
}

// Register adds the flags to fs.
func (n *NICFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&n.Queues, "queues", "1", `receive queues of -dev to bind: a count, or "all" (frames RSS puts on any of them are served)`)
	fs.StringVar(&n.XDPMode, "xdp-mode", "auto", "XDP attach mode: auto, driver or generic")
	fs.StringVar(&n.ZeroCopy, "zero-copy", "preferred", "AF_XDP bind mode: preferred (zero-copy where the driver has it), required or off")
	fs.StringVar(&n.BusyPoll, "busy-poll", "", "SO_BUSY_POLL per poll with SO_PREFER_BUSY_POLL (e.g. 50us; default off)")
	fs.StringVar(&n.EngineCPUs, "engine-cpus", "", `pin the engines' threads to these CPUs, as taskset -c lists them ("2,3" or "2-5"): queue i's engine on the i-th, round-robin (default: unpinned)`)
}

// set reports whether any NIC flag differs from its default.
func (n *NICFlags) Set() bool {
	return n.Queues != "1" || n.XDPMode != "auto" || n.ZeroCopy != "preferred" || n.BusyPoll != "" || n.EngineCPUs != ""
}

// check validates the flags before anything touches the system; daemon
// is the -daemon socket, if any.
func (n *NICFlags) Check(daemon string) error {
	if daemon != "" && n.Set() {
		return Usagef("-queues, -xdp-mode, -zero-copy, -busy-poll and -engine-cpus set how the daemon attaches: give them to `ndkxdp daemon`, not with -daemon")
	}
	if n.Queues != "all" {
		if q, err := strconv.Atoi(n.Queues); err != nil || q < 1 || q > 64 {
			return Usagef("-queues %q: want all or 1-64", n.Queues)
		}
	}
	var o ndk.Options
	return n.Apply(&o, "")
}

// apply puts the flags into o; dev resolves -queues all (in the
// interface's namespace, at open time).
func (n *NICFlags) Apply(o *ndk.Options, dev string) error {
	m, err := AdapterOptions(n.XDPMode, "adaptive")
	if err != nil {
		return Usagef("%v", err)
	}
	o.XDPMode = m.XDPMode
	if o.ZeroCopy, err = ZeroCopyMode(n.ZeroCopy); err != nil {
		return Usagef("%v", err)
	}
	if o.BusyPoll, err = BusyPoll(n.BusyPoll); err != nil {
		return Usagef("%v", err)
	}
	if o.EngineCPUs, err = CPUList(n.EngineCPUs); err != nil {
		return Usagef("-engine-cpus %v", err)
	}
	switch {
	case n.Queues == "all" && dev != "":
		if o.Queues, err = RxQueues(dev); err != nil {
			return err
		}
	case n.Queues != "all":
		o.Queues, _ = strconv.Atoi(n.Queues)
		if dev != "" {
			return CheckQueues(dev, o.Queues)
		}
	}
	return nil
}

// CheckQueues refuses more queues than dev has in use, before a bind
// past them fails with a bare EINVAL.
func CheckQueues(dev string, want int) error {
	have, err := RxQueues(dev)
	if err != nil || want <= have {
		return nil // the bind will say what is wrong
	}
	return Usagef("-queues %d: %s has %d receive queue(s) in use (EINVAL); give at most %d, or all (`ethtool -l %s` shows its channels, `ethtool -L %s combined N` sets them; a veth has as many as `ip link add ... numrxqueues N` gave it)",
		want, dev, have, have, dev, dev)
}

// RxQueues counts the interface's receive queues in use: the daemon
// binds a socket on each, so that frames RSS puts on any queue are served.
func RxQueues(dev string) (int, error) {
	n, err := loader.RxQueues(dev)
	return min(n, 64), err
}

// ZeroCopyMode reads -zero-copy.
func ZeroCopyMode(s string) (ndk.ZeroCopyMode, error) {
	switch s {
	case "", "preferred":
		return ndk.ZeroCopyPreferred, nil
	case "required":
		return ndk.ZeroCopyRequired, nil
	case "off":
		return ndk.ZeroCopyOff, nil
	}
	return 0, fmt.Errorf("-zero-copy %q: want preferred, required or off", s)
}

// BusyPoll reads -busy-poll: a duration up to 1s, or off.
func BusyPoll(s string) (time.Duration, error) {
	if s == "" || s == "0" || s == "off" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Microsecond || d > time.Second {
		return 0, fmt.Errorf("-busy-poll %q: want a duration from 1us to 1s, or off", s)
	}
	return d, nil
}

// AdapterOptions reads -xdp-mode and -polling.
func AdapterOptions(mode, polling string) (ndk.Options, error) {
	var o ndk.Options
	switch mode {
	case "auto":
		o.XDPMode = ndk.XDPAuto
	case "driver":
		o.XDPMode = ndk.XDPDriver
	case "generic":
		o.XDPMode = ndk.XDPGeneric
	default:
		return o, Usagef("unknown -xdp-mode %q (want auto, driver or generic)", mode)
	}
	switch polling {
	case "auto":
		o.Polling = ndk.PollAuto
	case "adaptive":
		o.Polling = ndk.PollAdaptive
	case "busy":
		o.Polling = ndk.PollBusy
	case "progress":
		o.Polling = ndk.PollProgress
	default:
		return o, Usagef("unknown -polling %q (want auto, adaptive, busy or progress)", polling)
	}
	return o, nil
}

// CPUList reads a CPU list as taskset -c and cpuset.cpus write one:
// numbers and ranges, comma-separated ("0,2-4" is 0, 2, 3, 4). "" is none.
func CPUList(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b >= 4096 {
			return nil, fmt.Errorf("%q: want CPU numbers and ranges such as 0,2-4", s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// FormatCPUList writes cpus as CPUList reads them, ranges joined.
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}
