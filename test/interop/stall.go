package interop

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Debian 12's qemu (7.2, the first with VIRTIO_F_RING_RESET) now and then
// never reads a virtio-net queue pair again after the guest resets it,
// which an AF_XDP zero-copy bind does (doc.go, TestGuestsOnOneSegment):
// the guest's driver posts frames to the send queue and kicks the device,
// and qemu's indices for that queue stand still. SendQueueStalls tells
// that fault of the device apart from anything the guest does, so a test
// can boot a fresh guest in place of one the device left mute.

// SendQueueStalls sends a few frames from each of vm's CPUs to peer (UDP
// to the discard port, through the guest's stack, which virtio_net's XPS
// maps from CPU i to send queue i) and returns the send queues qemu did
// not read from while the guest's driver posted to them: queues whose
// used index stood still although the driver kicked them (ethtool -S
// txN_kicks rose) or although a CPU XPS maps to them sent. detail says
// what was measured, for the log.
func (vm *VM) SendQueueStalls(ctx context.Context, peer netip.Addr) (stalled []int, detail string, err error) {
	const guestCounters = "ethtool -S eth0; for q in /sys/class/net/eth0/queues/tx-*; do echo \"xps ${q##*/tx-} $(cat $q/xps_cpus)\"; done"
	before, err := vm.VirtqueueStatus(ctx)
	if err != nil {
		return nil, "", err
	}
	gBefore, errOut, code, err := vm.Run(ctx, guestCounters)
	if err != nil || code != 0 {
		return nil, "", fmt.Errorf("interop: the guest's counters: exit %d (%v): %s", code, err, errOut)
	}
	send := fmt.Sprintf("for c in $(seq 0 $(($(nproc)-1))); do taskset -c $c bash -c 'for i in 1 2 3 4; do echo probe >/dev/udp/%s/9; sleep 0.05; done' 2>/dev/null; done; sleep 1; true", peer)
	if _, errOut, code, err := vm.Run(ctx, send); err != nil || code != 0 {
		return nil, "", fmt.Errorf("interop: send from each CPU: exit %d (%v): %s", code, err, errOut)
	}
	// A loaded host may run qemu's send queue work late: a queue counts
	// as stalled only if it stays so for stallGrace.
	var after []VirtqueueStatus
	var kb, ka map[int]int64
	var xps map[int]string
	for grace := time.Now().Add(stallGrace); ; {
		gAfter, errOut, code, err := vm.Run(ctx, guestCounters)
		if err != nil || code != 0 {
			return nil, "", fmt.Errorf("interop: the guest's counters: exit %d (%v): %s", code, err, errOut)
		}
		if after, err = vm.VirtqueueStatus(ctx); err != nil {
			return nil, "", err
		}
		kb, ka = parseTxCounters(gBefore, "kicks"), parseTxCounters(gAfter, "kicks")
		xps = parseXPS(gAfter)
		stalled = sendQueueStalls(before, after, kb, ka, xps)
		if len(stalled) == 0 || time.Now().After(grace) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	var b strings.Builder
	for _, q := range after {
		if !strings.HasPrefix(q.Kind, "tx") {
			continue
		}
		used := q.Used
		for _, p := range before {
			if p.Path == q.Path && p.Kind == q.Kind {
				used = p.Used
			}
		}
		fmt.Fprintf(&b, "%s: qemu's used index %d -> %d, the driver's kicks %d -> %d, XPS CPUs %s\n",
			q.Kind, used, q.Used, kb[q.Pair], ka[q.Pair], xps[q.Pair])
	}
	return stalled, b.String(), nil
}

// sendQueueStalls compares qemu's send queues before and after the guest
// sent from every CPU: a queue is stalled when its used index stood still
// although the driver kicked it or a CPU mapped to it (xps) sent.
func sendQueueStalls(before, after []VirtqueueStatus, kicksBefore, kicksAfter map[int]int64, xps map[int]string) []int {
	var stalled []int
	for _, q := range after {
		if !strings.HasPrefix(q.Kind, "tx") {
			continue
		}
		var prev *VirtqueueStatus
		for i := range before {
			if before[i].Path == q.Path && before[i].Kind == q.Kind {
				prev = &before[i]
			}
		}
		if prev == nil || prev.Used != q.Used {
			continue
		}
		kicked := kicksAfter[q.Pair] > kicksBefore[q.Pair]
		mapped := strings.Trim(xps[q.Pair], "0,") != ""
		if kicked || mapped {
			stalled = append(stalled, q.Pair)
		}
	}
	return stalled
}

// txCounterRE matches virtio_net's per-send-queue counters in ethtool -S,
// as newer kernels name them (tx0_kicks) and as older ones did
// (tx_queue_0_kicks).
var txCounterRE = regexp.MustCompile(`(?m)^\s*tx(?:_queue_)?(\d+)_(\w+):\s*(\d+)\s*$`)

// parseTxCounters returns one per-queue counter of ethtool -S's output,
// by send queue.
func parseTxCounters(out, name string) map[int]int64 {
	m := map[int]int64{}
	for _, g := range txCounterRE.FindAllStringSubmatch(out, -1) {
		if g[2] != name {
			continue
		}
		q, _ := strconv.Atoi(g[1])
		v, _ := strconv.ParseInt(g[3], 10, 64)
		m[q] = v
	}
	return m
}

// parseXPS returns each send queue's XPS CPU mask from lines "xps Q MASK".
func parseXPS(out string) map[int]string {
	m := map[int]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "xps" {
			continue
		}
		if q, err := strconv.Atoi(f[1]); err == nil {
			m[q] = f[2]
		}
	}
	return m
}

// bootStallRetries is how many times a test boots its guests anew when
// qemu left a send queue of the zero-copy guest stalled.
const bootStallRetries = 3

// stallGrace is how long a send queue must stay unread to count as
// stalled.
const stallGrace = 5 * time.Second

// stallProbeTimeout bounds one SendQueueStalls.
const stallProbeTimeout = time.Minute
