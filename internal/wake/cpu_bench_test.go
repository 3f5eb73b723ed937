package wake

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// partnerEnv makes the test binary the partner process of
// BenchmarkWakeAcrossCPUs: pinned to the CPU it names, it reads the
// eventfd at descriptor 3 and writes the one at 4, partnerRounds times.
const (
	partnerEnv    = "NDKXDP_WAKE_PARTNER"
	partnerRounds = 20000
)

func TestMain(m *testing.M) {
	if cpu := os.Getenv(partnerEnv); cpu != "" {
		os.Exit(partner(cpu))
	}
	os.Exit(m.Run())
}

func partner(cpu string) int {
	n, err := strconv.Atoi(cpu)
	if err == nil {
		err = pin(n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "partner:", err)
		return 2
	}
	var v [8]byte
	v[0] = 1
	for range partnerRounds {
		if _, err := unix.Read(3, v[:]); err != nil {
			return 1
		}
		v = [8]byte{1}
		if _, err := unix.Write(4, v[:]); err != nil {
			return 1
		}
	}
	return 0
}

// pin locks the calling goroutine to its thread and the thread to cpu.
func pin(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

// BenchmarkWakeAcrossCPUs measures what one process waking another costs
// on this machine: a round trip of two blocking eventfds between two
// processes pinned to the same CPU, then to different CPUs (each side
// sleeps in read(2) until the other writes). On a VM whose idle vCPUs
// halt (here: cpuidle haltpoll with guest_halt_poll_ns=0), a wake-up
// aimed at another vCPU waits for the hypervisor to run it, where one on
// the waker's own CPU is a context switch: the cost every sleeping engine
// and blocked consumer pays once its spin has run out (ndk/internal/rc's
// doc, "Polling").
//
//	go test -run '^$' -bench WakeAcrossCPUs -benchtime 1x ./internal/wake
func BenchmarkWakeAcrossCPUs(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("one CPU")
	}
	for range b.N {
		same := wakeRoundTrips(b, 0, 0)
		cross := wakeRoundTrips(b, 0, 1)
		b.ReportMetric(us(same[len(same)/2]), "same-cpu-p50-us")
		b.ReportMetric(us(same[len(same)*99/100]), "same-cpu-p99-us")
		b.ReportMetric(us(cross[len(cross)/2]), "cross-cpu-p50-us")
		b.ReportMetric(us(cross[len(cross)*99/100]), "cross-cpu-p99-us")
		b.ReportMetric(float64(cross[len(cross)/2])/float64(same[len(same)/2]), "cross/same-p50")
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// wakeRoundTrips runs partnerRounds round trips between this goroutine's
// thread on cpu a and a partner process on cpu b, and returns them
// sorted.
func wakeRoundTrips(b *testing.B, a, cpu int) []time.Duration {
	b.Helper()
	var files [2]*os.File // ping, pong
	for i := range files {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			b.Fatal(err)
		}
		files[i] = os.NewFile(uintptr(fd), "eventfd")
		defer files[i].Close()
	}
	ping, pong := int(files[0].Fd()), int(files[1].Fd())
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), partnerEnv+"="+strconv.Itoa(cpu))
	cmd.ExtraFiles = files[:]
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	done := make(chan []time.Duration, 1)
	go func() {
		defer runtime.UnlockOSThread()
		if err := pin(a); err != nil {
			b.Error(err)
			done <- nil
			return
		}
		rtt := make([]time.Duration, 0, partnerRounds)
		var v [8]byte
		for range partnerRounds {
			start := time.Now()
			v = [8]byte{1}
			if _, err := unix.Write(ping, v[:]); err != nil {
				break
			}
			if _, err := unix.Read(pong, v[:]); err != nil {
				break
			}
			rtt = append(rtt, time.Since(start))
		}
		done <- rtt
	}()
	rtt := <-done
	if len(rtt) != partnerRounds {
		b.Fatalf("%d of %d round trips", len(rtt), partnerRounds)
	}
	slices.Sort(rtt)
	return rtt
}
