package latency

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// hogEnv makes the test binary a CPU hog (TestMain): a process that spins
// on the CPU it names, for at most hogLimit.
const (
	hogEnv   = "NDKXDP_LATENCY_HOG"
	hogLimit = 3 * time.Minute
)

func TestMain(m *testing.M) {
	if cpu := os.Getenv(hogEnv); cpu != "" {
		hog(cpu)
		return
	}
	if arg := os.Getenv(floorEnv); arg != "" {
		floorServe(arg)
		return
	}
	os.Exit(m.Run())
}

// hog spins on one CPU until hogLimit or until it is killed.
func hog(cpu string) {
	n, err := strconv.Atoi(cpu)
	if err == nil {
		var set unix.CPUSet
		set.Set(n)
		err = unix.SchedSetaffinity(0, &set)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hog:", err)
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	end := time.Now().Add(hogLimit)
	for x := 0; time.Now().Before(end); x++ {
		for range 1 << 16 {
			x ^= x<<1 | 1
		}
	}
}

// startHogs starts one hog pinned to each of cpus and kills them (by PID)
// when the test ends.
func startHogs(t testing.TB, cpus ...int) {
	for _, c := range cpus {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), hogEnv+"="+strconv.Itoa(c))
		if err := cmd.Start(); err != nil {
			t.Fatalf("start hog: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}

// ndkxdp is the command under test, built once per test binary.
func ndkxdp(t testing.TB) string {
	t.Helper()
	testenv.RequireRoot(t)
	return testenv.Ndkxdp(t)
}

// Lat is the row perftest's latency tests print, in microseconds.
type Lat struct {
	Typical, P99, P999, Max float64
}

// parseLat finds the latency row under the column titles.
func parseLat(out []byte) (Lat, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "t_typical[usec]") || !sc.Scan() {
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) != 9 {
			break
		}
		var v [7]float64
		for i := range v {
			x, err := strconv.ParseFloat(f[i+2], 64)
			if err != nil {
				return Lat{}, fmt.Errorf("latency row %q: %v", sc.Text(), err)
			}
			v[i] = x
		}
		return Lat{Typical: v[2], P99: v[5], P999: v[6], Max: v[1]}, nil
	}
	return Lat{}, fmt.Errorf("no latency row in:\n%s", out)
}

// run is one `ndkxdp perf TEST` between the pair's hosts: the server on
// A, the client on B. It returns both outputs and the client's row.
type run struct {
	srv, cli       []byte
	srvErr, cliErr error
}

func perf(ctx context.Context, t testing.TB, p *harness.Pair, test string, args ...string) run {
	t.Helper()
	bin := ndkxdp(t)
	common := append([]string{"perf", test}, args...)
	if test != "tcp_lat" {
		common = append(common, "-timeout", "2m")
	}
	srvArgs := append(append([]string{}, common...), devArgs(test, p.A)...)
	cliArgs := append(append([]string{}, common...), devArgs(test, p.B)...)
	cliArgs = append(cliArgs, p.A.IPv4.String())
	srv := p.A.Command(ctx, bin, srvArgs...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	var r run
	r.cli, r.cliErr = p.B.Command(ctx, bin, cliArgs...).CombinedOutput()
	r.srvErr = srv.Wait()
	r.srv = srvOut.Bytes()
	return r
}

func devArgs(test string, h *harness.Host) []string {
	if test == "tcp_lat" {
		return nil
	}
	return []string{"-dev", h.Link}
}

// TestWriteLatEndsWhenPeerLeaves: ib_write_lat's side that waits for the
// peer's WRITE polls memory, where no completion comes. When the peer
// goes (its DREQ), the wait must end with the disconnect at once, not
// after -timeout (a stall that looked like a lost WRITE).
func TestWriteLatEndsWhenPeerLeaves(t *testing.T) {
	bin := ndkxdp(t)
	p := harness.New(t, harness.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"perf", "write_lat", "-n", "5000000", "-timeout", "5m", "-dev"}
	srv := p.A.Command(ctx, bin, append(args, p.A.Link)...)
	var srvOut, cliOut syncBuffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	cli := p.B.Command(ctx, bin, append(args, p.B.Link, p.A.IPv4.String())...)
	cli.Stdout, cli.Stderr = &cliOut, &cliOut
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	// Both print the peer's pingpong_dest when the test starts.
	for !strings.Contains(srvOut.String(), "remote address") || !strings.Contains(cliOut.String(), "remote address") {
		if ctx.Err() != nil {
			t.Fatalf("the test did not start:\nserver:\n%s\nclient:\n%s", srvOut.String(), cliOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // well into the run
	// ip netns exec runs the tool as its child: signal the tool itself.
	if err := signalChild(cli.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	cliErr := cli.Wait()
	left := time.Now()
	srvErr := srv.Wait()
	took := time.Since(left)
	t.Logf("client: %v\n%s\nserver after %v: %v\n%s", cliErr, cliOut.String(), took, srvErr, srvOut.String())
	if cliErr == nil {
		t.Fatalf("the interrupted client exited 0")
	}
	if srvErr == nil || ctx.Err() != nil {
		t.Fatalf("server: %v (test context: %v), want a failure at the disconnect", srvErr, ctx.Err())
	}
	if took > 10*time.Second {
		t.Errorf("the server took %v to notice the peer had gone", took)
	}
	if !strings.Contains(srvOut.String(), "closed by the peer") {
		t.Errorf("the server's error does not name the disconnect:\n%s", srvOut.String())
	}
}

// syncBuffer is a bytes.Buffer a running command writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// signalChild sends sig to the children of pid (ip netns exec's tool).
func signalChild(pid int, sig syscall.Signal) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 { // ip netns exec has exec'd the tool in its place
		return syscall.Kill(pid, sig)
	}
	for _, c := range f {
		child, err := strconv.Atoi(c)
		if err != nil {
			return err
		}
		if err := syscall.Kill(child, sig); err != nil {
			return err
		}
	}
	return nil
}

// TestLatencyUnderContention runs every latency test with a process
// spinning on each core beside the two tools: every run ends, both sides
// exit 0 and report their row. With consumers that only yield their P,
// the tools' threads waited for the kernel's time slices (issue: p99 in
// milliseconds, and runs that never finished on a busy machine).
func TestLatencyUnderContention(t *testing.T) {
	ndkxdp(t)
	p := harness.New(t, harness.Config{})
	startHogs(t, cpus()...)
	for _, test := range []string{"send_lat", "write_lat", "read_lat"} {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
		start := time.Now()
		r := perf(ctx, t, p, test, "-n", "2000")
		cancel()
		if r.srvErr != nil || r.cliErr != nil {
			t.Fatalf("%s: server %v, client %v\nserver:\n%s\nclient:\n%s", test, r.srvErr, r.cliErr, r.srv, r.cli)
		}
		l, err := parseLat(r.cli)
		if err != nil {
			t.Fatalf("%s: %v", test, err)
		}
		t.Logf("%s under contention in %v: typical %.2f us, p99 %.2f us (%.1fx), p99.9 %.2f us, max %.2f us",
			test, time.Since(start).Round(time.Millisecond), l.Typical, l.P99, l.P99/l.Typical, l.P999, l.Max)
	}
}

func cpus() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return []int{0}
	}
	var c []int
	for i := range 1024 {
		if set.IsSet(i) {
			c = append(c, i)
		}
	}
	return c
}
