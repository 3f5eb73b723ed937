package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// peerFacts is where the two Soft-RoCE peers differ in what ndkxdp meets
// on the wire; the cases pin each value against the live peer.
type peerFacts struct {
	name string
	// kernel, rdmaCore and perftest are version prefixes the image's
	// manifest must show.
	kernel, rdmaCore, perftest string
	// perftestVersion is what perftest announces in exchange_versions
	// (configure.ac's AC_INIT version, not the package's).
	perftestVersion string
	// rpingAckTimeout is the LocalAckTimeout of rping's REQ: rdma_cm's
	// RoCE packet lifetime (CMA_IBOE_PACKET_LIFETIME) plus one, 18 in
	// 6.1 and 16 in 6.12. perftestAckTimeout is perftest's: 4.5 sets no
	// ACK timeout, 25.01 sets rdma_cm's RDMA_OPTION_ID_ACK_TIMEOUT to its
	// -u default 14, which rdma_cm makes packet lifetime 13, and
	// cm_ack_timeout with rxe's ACK delay 15 makes 16. ndkxdp's passive
	// side takes its QP's ACK timeout from the REQ (ndk/internal/cm
	// TestPassiveAckTimeoutFromREQ), so its retransmissions wait 2.1 s on
	// Debian 12 and 0.27-0.54 s on Debian 13.
	rpingAckTimeout, perftestAckTimeout uint8
	// mckeySendsSome: rxe's mckey sender puts only some of its datagrams
	// on the wire, or none. mckey posts them unsignaled and destroys its
	// QP at once; 6.12's rxe runs its requester from a work queue, which
	// the destroy overtakes (rxe's sent_pkts grew by 0 and by 1 of 10 in
	// two runs), where 6.1's ran it inline in the post.
	mckeySendsSome bool
	// cmtimeOOB: the peer's cmtime is rdma-core 52 or later's, which
	// syncs its sides over TCP (ndkxdp cmtime -oob).
	cmtimeOOB bool
}

var peers = map[string]peerFacts{
	DefaultSuite: {
		name: "Debian 12", kernel: "6.1.", rdmaCore: "44.", perftest: "4.5+0.17",
		perftestVersion: "6.06", rpingAckTimeout: 19, perftestAckTimeout: 19,
	},
	Debian13Suite: {
		name: "Debian 13", kernel: "6.12.", rdmaCore: "56.", perftest: "25.01",
		perftestVersion: "6.24", rpingAckTimeout: 17, perftestAckTimeout: 16,
		mckeySendsSome: true, cmtimeOOB: true,
	},
}

// factsOf returns the facts of vm's peer image.
func factsOf(t *testing.T, vm *VM) peerFacts {
	t.Helper()
	f, ok := peers[vm.Image.Suite]
	if !ok {
		t.Fatalf("no peer facts for suite %q", vm.Image.Suite)
	}
	return f
}

// checkVersions: the image holds the versions its peer is named for, and
// the guest runs its kernel.
func checkVersions(t *testing.T, vm *VM) {
	f := factsOf(t, vm)
	if !strings.HasPrefix(vm.Image.KernelRelease, f.kernel) {
		t.Errorf("%s image has kernel %s, want %s*", f.name, vm.Image.KernelRelease, f.kernel)
	}
	if got := manifestVersion(vm.Image, "rdma-core"); !strings.HasPrefix(got, f.rdmaCore) {
		t.Errorf("%s image has rdma-core %q, want %s*", f.name, got, f.rdmaCore)
	}
	if got := manifestVersion(vm.Image, "perftest"); !strings.HasPrefix(got, f.perftest) {
		t.Errorf("%s image has perftest %q, want %s*", f.name, got, f.perftest)
	}
	if out := strings.TrimSpace(mustRun(t, vm, "uname -r")); out != vm.Image.KernelRelease {
		t.Errorf("guest runs kernel %s, the image has %s", out, vm.Image.KernelRelease)
	}
}

// manifestVersion is the version of package name in the image, "" if it
// has none.
func manifestVersion(img *Image, name string) string {
	for _, v := range img.Versions {
		if n, ver, ok := strings.Cut(v, " "); ok && n == name {
			return ver
		}
	}
	return ""
}

// logCounters logs the transport counters of both sides after the cases:
// ndkxdp's engines' and rxe0's hw_counters. Under TCG they are a record
// of what the run met (retransmissions, out-of-sequence requests), not a
// measure of anything.
func (p *peer) logCounters(t *testing.T) {
	var s ndkCounters
	for _, e := range p.dev.Adapter.Stats() {
		s.add(e.FramesIn, e.FramesOut, e.Retransmits, e.Timeouts, e.NAKsSent, e.NAKsReceived, e.Duplicates, e.OutOfSeq, e.RNRSent, e.RNRReceived)
	}
	out, errOut, code, err := p.vm.Run(ctxFor(t, time.Minute), "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep -H . * | tr '\\n' ' '")
	if err != nil || code != 0 {
		out = fmt.Sprintf("(unreadable: exit %d, %v, %s)", code, err, strings.TrimSpace(errOut))
	}
	t.Logf("counters after the cases: ndkxdp %s; rxe0 %s", s, strings.TrimSpace(out))
}

// ndkCounters are the engine counters logCounters reports.
type ndkCounters [10]uint64

var ndkCounterNames = [10]string{"frames_in", "frames_out", "retransmits", "timeouts", "naks_sent", "naks_received", "duplicates", "out_of_seq", "rnr_sent", "rnr_received"}

func (c *ndkCounters) add(v ...uint64) {
	for i := range c {
		c[i] += v[i]
	}
}

func (c ndkCounters) String() string {
	var b strings.Builder
	for i, n := range ndkCounterNames {
		fmt.Fprintf(&b, "%s=%d ", n, c[i])
	}
	return strings.TrimSpace(b.String())
}
