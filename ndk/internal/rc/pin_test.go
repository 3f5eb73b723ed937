package rc

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"golang.org/x/sys/unix"
)

// threadsOn counts this process's threads pinned to CPU c alone.
func threadsOn(t *testing.T, c int) int {
	n, _ := testenv.ThreadsPinnedTo(t, 0, c)
	return n
}

// TestPinnedEngines: engines with Config.CPUs run on a thread of their own
// whose affinity is that CPU, move data as any engine does, and give the
// thread back with its mask as it was when they close (no thread of the
// process stays pinned); a CPU out of range or not the process's is refused at
// NewEngine with ErrBadConfig and the kernel's errno.
func TestPinnedEngines(t *testing.T) {
	cpus := testenv.AllowedCPUs(t)
	c := cpus[len(cpus)-1]
	before := threadsOn(t, c)
	a, b := newPair(t, pairOptions{cpus: []int{c}})
	if got := a.eng.CPUs(); !slices.Equal(got, []int{c}) {
		t.Fatalf("CPUs() %v, want [%d]", got, c)
	}
	if len(cpus) > 1 {
		// With one CPU allowed every thread already has that mask.
		if n := threadsOn(t, c) - before; n != 2 {
			t.Fatalf("%d threads pinned to CPU %d after starting two pinned engines, want 2", n, c)
		}
	}
	src := a.buffer(3000, 0, false)
	fill(src.b, 7)
	dst := b.buffer(3000, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(1, []SGE{dst.sge(0, 3000)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 2, SGL: []SGE{src.sge(0, 3000)}}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, 2)
	checkEntry(t, waitCQ(t, b.rcq, 1, time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpReceive, 1)
	sameBytes(t, "between pinned engines", dst.b, src.b)

	a.eng.Close()
	b.eng.Close()
	if len(cpus) > 1 {
		deadline := time.Now().Add(5 * time.Second)
		for threadsOn(t, c) != before {
			if time.Now().After(deadline) {
				t.Fatalf("%d threads still pinned to CPU %d after the engines closed, want %d", threadsOn(t, c), c, before)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 16})
	if err != nil {
		t.Fatal(err)
	}
	regions, err := memreg.New(16)
	if err != nil {
		t.Fatal(err)
	}
	notOurs := -1
	for x := 0; x < 1024; x++ {
		if !slices.Contains(cpus, x) {
			notOurs = x
			break
		}
	}
	for _, tc := range []struct {
		cpus  []int
		errno error
	}{
		{[]int{-1}, nil},
		{[]int{1 << 20}, nil},
		{[]int{notOurs}, unix.EINVAL},
	} {
		e, err := NewEngine(Config{Port: pipe.A(), Regions: regions, CPUs: tc.cpus})
		if !errors.Is(err, ErrBadConfig) || (tc.errno != nil && !errors.Is(err, tc.errno)) {
			if e != nil {
				e.Close()
			}
			t.Errorf("CPUs %v: %v, want ErrBadConfig %v", tc.cpus, err, tc.errno)
		}
	}
}
