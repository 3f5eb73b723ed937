package ops_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"golang.org/x/sys/unix"
)

// TestEngineCPUs: `ndkxdp daemon -engine-cpus C` runs its engine on a
// thread whose affinity is C alone (/proc/PID/task/*/status), `ndkxdp
// info` says so for the queue, and the daemon serves as before.
func TestEngineCPUs(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	c := 0
	for x := 0; x < len(set)*64; x++ {
		if set.IsSet(x) {
			c = x
		}
	}
	bd := newBed(t, "-engine-cpus", strconv.Itoa(c))
	var x daemon.Info
	runJSON(t, &x, "info", "-daemon", bd.sock)
	if len(x.Queues) == 0 || !slices.Equal(x.Queues[0].EngineCPUs, []int{c}) {
		t.Fatalf("info's queues %+v, want queue 0's engine on CPU %d", x.Queues, c)
	}
	if out := string(run(t, "info", "-daemon", bd.sock)); !strings.Contains(out, fmt.Sprintf("engine on CPU %d", c)) {
		t.Errorf("info's text does not say where the engine runs:\n%s", out)
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", bd.pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("the daemon's threads: %v", err)
	}
	pinned := 0
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) == strconv.Itoa(c) {
				pinned++
			}
		}
	}
	if set.Count() > 1 && pinned != 1 {
		t.Errorf("%d of the daemon's %d threads pinned to CPU %d, want the engine's alone", pinned, len(tasks), c)
	}
	bd.writes(t, 16)
}
