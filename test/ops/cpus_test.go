package ops_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// TestEngineCPUs: `ndkxdp daemon -engine-cpus C` runs its engine on a
// thread whose affinity is C alone (/proc/PID/task/*/status), `ndkxdp
// info` says so for the queue, and the daemon serves as before.
func TestEngineCPUs(t *testing.T) {
	cpus := testenv.AllowedCPUs(t)
	c := cpus[len(cpus)-1]
	bd := newBed(t, "-engine-cpus", strconv.Itoa(c))
	var x daemon.Info
	runJSON(t, &x, "info", "-daemon", bd.sock)
	if len(x.Queues) == 0 || !slices.Equal(x.Queues[0].EngineCPUs, []int{c}) {
		t.Fatalf("info's queues %+v, want queue 0's engine on CPU %d", x.Queues, c)
	}
	if out := string(run(t, "info", "-daemon", bd.sock)); !strings.Contains(out, fmt.Sprintf("engine on CPU %d", c)) {
		t.Errorf("info's text does not say where the engine runs:\n%s", out)
	}
	pinned, threads := testenv.ThreadsPinnedTo(t, bd.pid, c)
	if len(cpus) > 1 && pinned != 1 {
		t.Errorf("%d of the daemon's %d threads pinned to CPU %d, want the engine's alone", pinned, threads, c)
	}
	bd.writes(t, 16)
}
