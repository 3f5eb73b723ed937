package main

import (
	"flag"
	"strconv"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// nicFlags are what a tool that attaches to a real NIC needs: how many of
// its queues, where the XDP program runs, how the AF_XDP sockets bind, and
// busy polling. With -daemon they belong to the daemon and are refused.
type nicFlags struct {
	queues, xdpMode, zeroCopy, busyPoll string
}

func (n *nicFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.queues, "queues", "1", `receive queues of -dev to bind: a count, or "all" (frames RSS puts on any of them are served)`)
	fs.StringVar(&n.xdpMode, "xdp-mode", "auto", "XDP attach mode: auto, driver or generic")
	fs.StringVar(&n.zeroCopy, "zero-copy", "preferred", "AF_XDP bind mode: preferred (zero-copy where the driver has it), required or off")
	fs.StringVar(&n.busyPoll, "busy-poll", "", "SO_BUSY_POLL per poll with SO_PREFER_BUSY_POLL (e.g. 50us; default off)")
}

// set reports whether any NIC flag differs from its default.
func (n *nicFlags) set() bool {
	return n.queues != "1" || n.xdpMode != "auto" || n.zeroCopy != "preferred" || n.busyPoll != ""
}

// check validates the flags before anything touches the system; daemon
// is the -daemon socket, if any.
func (n *nicFlags) check(daemon string) error {
	if daemon != "" && n.set() {
		return usagef("-queues, -xdp-mode, -zero-copy and -busy-poll set how the daemon attaches: give them to `ndkxdp daemon`, not with -daemon")
	}
	if n.queues != "all" {
		if q, err := strconv.Atoi(n.queues); err != nil || q < 1 || q > 64 {
			return usagef("-queues %q: want all or 1-64", n.queues)
		}
	}
	var o ndk.Options
	return n.apply(&o, "")
}

// apply puts the flags into o; dev resolves -queues all (in the
// interface's namespace, at open time).
func (n *nicFlags) apply(o *ndk.Options, dev string) error {
	m, err := adapterOptions(n.xdpMode, "adaptive")
	if err != nil {
		return usagef("%v", err)
	}
	o.XDPMode = m.XDPMode
	if o.ZeroCopy, err = zeroCopyMode(n.zeroCopy); err != nil {
		return usagef("%v", err)
	}
	if o.BusyPoll, err = busyPoll(n.busyPoll); err != nil {
		return usagef("%v", err)
	}
	switch {
	case n.queues == "all" && dev != "":
		if o.Queues, err = rxQueues(dev); err != nil {
			return err
		}
	case n.queues != "all":
		o.Queues, _ = strconv.Atoi(n.queues)
		if dev != "" {
			return checkQueues(dev, o.Queues)
		}
	}
	return nil
}

// checkQueues refuses more queues than dev has in use, before a bind
// past them fails with a bare EINVAL.
func checkQueues(dev string, want int) error {
	have, err := rxQueues(dev)
	if err != nil || want <= have {
		return nil // the bind will say what is wrong
	}
	return usagef("-queues %d: %s has %d receive queue(s) in use (EINVAL); give at most %d, or all (`ethtool -l %s` shows its channels, `ethtool -L %s combined N` sets them; a veth has as many as `ip link add ... numrxqueues N` gave it)",
		want, dev, have, have, dev, dev)
}
