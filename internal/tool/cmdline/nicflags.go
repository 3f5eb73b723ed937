package cmdline

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// NICFlags are what a tool that attaches to a real NIC needs: how many of
// its queues, where the XDP program runs, how the AF_XDP sockets bind, and
// busy polling. With -daemon they belong to the daemon and are refused.
type NICFlags struct {
	Queues, XDPMode, ZeroCopy, BusyPoll string
}

// Register adds the flags to fs.
func (n *NICFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&n.Queues, "queues", "1", `receive queues of -dev to bind: a count, or "all" (frames RSS puts on any of them are served)`)
	fs.StringVar(&n.XDPMode, "xdp-mode", "auto", "XDP attach mode: auto, driver or generic")
	fs.StringVar(&n.ZeroCopy, "zero-copy", "preferred", "AF_XDP bind mode: preferred (zero-copy where the driver has it), required or off")
	fs.StringVar(&n.BusyPoll, "busy-poll", "", "SO_BUSY_POLL per poll with SO_PREFER_BUSY_POLL (e.g. 50us; default off)")
}

// set reports whether any NIC flag differs from its default.
func (n *NICFlags) Set() bool {
	return n.Queues != "1" || n.XDPMode != "auto" || n.ZeroCopy != "preferred" || n.BusyPoll != ""
}

// check validates the flags before anything touches the system; daemon
// is the -daemon socket, if any.
func (n *NICFlags) Check(daemon string) error {
	if daemon != "" && n.Set() {
		return Usagef("-queues, -xdp-mode, -zero-copy and -busy-poll set how the daemon attaches: give them to `ndkxdp daemon`, not with -daemon")
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
	case "adaptive":
		o.Polling = ndk.PollAdaptive
	case "busy":
		o.Polling = ndk.PollBusy
	case "progress":
		o.Polling = ndk.PollProgress
	default:
		return o, Usagef("unknown -polling %q (want adaptive, busy or progress)", polling)
	}
	return o, nil
}
