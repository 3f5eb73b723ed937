package cmdline

import (
	"flag"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TOS is the tools' type-of-service flag (perf's -T, rping's and
// udaddy's -t): the IP TOS byte, DSCP and ECN, of the adapter's frames
// and of its REQs, which a passive peer's IB CM echoes on the connection
// (ndk.Options.TrafficClass). Through a daemon the daemon's adapter has
// its own class, so the flag is refused there.
type TOS struct {
	v    int
	name string
}

// Register adds the flag under each of names (the first names it in
// messages); what says what the tool's own flag sets, for the help.
func (t *TOS) Register(fs *flag.FlagSet, what string, names ...string) {
	t.v, t.name = -1, names[0]
	for _, n := range names {
		fs.IntVar(&t.v, n, -1, "IP TOS byte (DSCP and ECN, 0-255) of the adapter's frames and of its REQs, which a passive peer echoes ("+what+"); not with -daemon, whose adapter has its own class")
	}
}

// Check refuses a byte out of range, one whose ECN bits say CE, and the
// flag through a daemon.
func (t *TOS) Check(daemon string) error {
	switch {
	case t.v == -1:
		return nil
	case t.v < 0 || t.v > 255:
		return Usagef("-%s %d: a TOS byte is 0-255", t.name, t.v)
	case t.v&3 == 3:
		return Usagef("-%s %d: its ECN bits say CE, which a switch sets and no sender", t.name, t.v)
	case daemon != "":
		return Usagef("-%s %d: through a daemon the connections take the daemon adapter's traffic class (its config's traffic_class)", t.name, t.v)
	}
	return nil
}

// Set reports whether the flag was given.
func (t *TOS) Set() bool { return t.v >= 0 }

// Byte is the TOS byte given; 0 when none was.
func (t *TOS) Byte() uint8 { return uint8(max(t.v, 0)) }

// Apply gives opts the byte's DSCP and ECN, if the flag was given.
func (t *TOS) Apply(opts *ndk.Options) {
	if t.Set() {
		opts.TrafficClass = ndk.TrafficClass{DSCP: t.Byte() >> 2, ECN: ndk.ECN(t.Byte() & 3)}
	}
}
