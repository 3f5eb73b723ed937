package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// AllowedCPUs lists the CPUs the process may run on (its affinity mask).
func AllowedCPUs(t testing.TB) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cs []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// ThreadsPinnedTo counts the threads of process pid (0: this one) whose
// affinity is the one CPU c (/proc/PID/task/*/status, Cpus_allowed_list),
// and returns it with the number of threads read.
func ThreadsPinnedTo(t testing.TB, pid, c int) (pinned, threads int) {
	t.Helper()
	proc := "self"
	if pid != 0 {
		proc = strconv.Itoa(pid)
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%s/task/*/status", proc))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of process %s: %v", proc, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		threads++
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) == strconv.Itoa(c) {
				pinned++
			}
		}
	}
	return pinned, threads
}
