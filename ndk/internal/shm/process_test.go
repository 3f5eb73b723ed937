package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary an echo peer (TestMain) instead of running
// tests: the cross-process tests re-execute themselves with it set.
const childEnv = "SHM_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "echo" {
		if err := childEcho(); err != nil {
			fmt.Fprintln(os.Stderr, "shm test child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The shared layout of the ping-pong tests: a ring each way, then the
// doorbell each side sleeps on.
var (
	ringAB = RingLayout{Offset: 0, SlotSize: 64, Slots: 256}
	ringBA = RingLayout{Offset: ringAB.End(), SlotSize: 64, Slots: 256}
	bellA  = ringBA.End()
	bellB  = bellA + DoorbellSize
	segLen = bellB + DoorbellSize
)

// stopRecord ends an echo loop.
var stopRecord = bytes.Repeat([]byte{0xff}, 8)

var (
	errHangup   = errors.New("peer hung up")
	errDeadline = errors.New("no record by the deadline: lost wake-up?")
)

// endpoint is one side of a ping-pong: a ring out and one in, the doorbell
// it sleeps on and the one it rings.
type endpoint struct {
	tx     *Producer
	rx     *Consumer
	bell   *Doorbell // ours: we sleep on it
	peer   *Doorbell // the peer's: we ring it
	spin   time.Duration
	hangup int // Watch index of the control socket, or -1
}

// attach builds side a (which sends on ringAB) or side b over seg; own is
// the eventfd this side sleeps on, peer the other side's.
func attach(seg *Segment, a bool, own, peer int) (*endpoint, error) {
	out, in, ownOff, peerOff := ringAB, ringBA, bellA, bellB
	if !a {
		out, in, ownOff, peerOff = ringBA, ringAB, bellB, bellA
	}
	e := &endpoint{hangup: -1}
	var err error
	if e.tx, err = NewProducer(seg, out); err != nil {
		return nil, err
	}
	if e.rx, err = NewConsumer(seg, in); err != nil {
		return nil, err
	}
	if e.bell, err = NewDoorbell(seg, ownOff, own); err != nil {
		return nil, err
	}
	if e.peer, err = NewDoorbell(seg, peerOff, peer); err != nil {
		return nil, err
	}
	return e, nil
}

// await blocks until the in-ring may hold a record: it spins e.spin, then
// sleeps on the doorbell, until deadline (zero: forever).
func (e *endpoint) await(deadline time.Time) error {
	if e.spin > 0 {
		for t0 := time.Now(); time.Since(t0) < e.spin; {
			if e.rx.Len() > 0 {
				return nil
			}
		}
	}
	timeout := time.Duration(-1)
	if !deadline.IsZero() {
		if timeout = time.Until(deadline); timeout <= 0 {
			return errDeadline
		}
	}
	if err := e.bell.Wait(timeout); err != nil {
		return err
	}
	if e.hangup >= 0 && e.bell.Ready(e.hangup) {
		return errHangup
	}
	return e.rx.Err()
}

// recv pops one record into dst, blocking while the ring is empty.
func (e *endpoint) recv(dst []byte, deadline time.Time) error {
	for !e.rx.TryPop(dst) {
		if err := e.await(deadline); err != nil {
			return err
		}
	}
	return nil
}

// send pushes rec and rings the peer. The ping-pong never has more than
// one record in flight, so a full ring is a bug in the test.
func (e *endpoint) send(rec []byte) error {
	if !e.tx.TryPush(rec) {
		return fmt.Errorf("out-ring full or broken: %v", e.tx.Err())
	}
	e.peer.Ring()
	return nil
}

// echo sends back every record it receives until stopRecord.
func echo(e *endpoint, deadline *time.Time) error {
	var d time.Time
	if deadline != nil {
		d = *deadline
	}
	rec := make([]byte, 8)
	for {
		if err := e.recv(rec, d); err != nil {
			return err
		}
		if bytes.Equal(rec, stopRecord) {
			return nil
		}
		if err := e.send(rec); err != nil {
			return err
		}
	}
}

// pingPong makes n round trips of a sequence number through e's peer.
func pingPong(e *endpoint, n int, deadline time.Time) error {
	rec, got := make([]byte, 8), make([]byte, 8)
	for i := range n {
		binary.LittleEndian.PutUint64(rec, uint64(i))
		if err := e.send(rec); err != nil {
			return err
		}
		if err := e.recv(got, deadline); err != nil {
			return fmt.Errorf("round trip %d: %w", i, err)
		}
		if !bytes.Equal(got, rec) {
			return fmt.Errorf("round trip %d: got back %x", i, got)
		}
	}
	return nil
}

// loopEndpoints are both sides in one process, each with its own
// descriptors for the eventfds.
type loopEndpoints struct{ a, b *endpoint }

func newLoopEndpoints(t *testing.T) loopEndpoints {
	seg := newTestSegment(t, segLen)
	var efd, dup [2]int
	for i := range efd {
		var err error
		if efd[i], err = NewEventfd(); err != nil {
			t.Fatal(err)
		}
		dup[i] = dupFD(t, efd[i])
	}
	a, err := attach(seg, true, efd[0], dup[1])
	if err != nil {
		t.Fatal(err)
	}
	b, err := attach(seg, false, efd[1], dup[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.close(); b.close() })
	return loopEndpoints{a, b}
}

func (e *endpoint) close() {
	e.bell.Close()
	e.peer.Close()
}

// childEcho is the child process of the cross-process tests: it receives
// the segment and both eventfds over the socket it inherited as fd 3,
// echoes records until stopRecord, and gives up when the parent hangs up.
func childEcho() error {
	const sockFD = 3
	f := os.NewFile(sockFD, "control")
	c, err := net.FileConn(f) // a duplicate: fd 3 stays open to watch
	if err != nil {
		return err
	}
	defer c.Close()
	msg := make([]byte, 16)
	n, fds, err := RecvFDs(c.(*net.UnixConn), msg, 3)
	if err != nil {
		return err
	}
	if n != len(msg) || len(fds) != 3 {
		closeAll(fds)
		return fmt.Errorf("handshake of %d bytes and %d descriptors", n, len(fds))
	}
	seg, err := MapSegment(fds[0], int(binary.LittleEndian.Uint64(msg)))
	if err != nil {
		closeAll(fds[1:])
		return err
	}
	defer seg.Close()
	e, err := attach(seg, false, fds[2], fds[1])
	if err != nil {
		closeAll(fds[1:])
		return err
	}
	defer e.close()
	e.spin = time.Duration(binary.LittleEndian.Uint64(msg[8:]))
	e.hangup = e.bell.Watch(sockFD)
	return echo(e, nil)
}

// child is a running echo child and the parent's endpoint facing it.
type child struct {
	cmd  *exec.Cmd
	ep   *endpoint
	done chan error
}

// startChild re-executes the test binary as an echo child and hands it a
// fresh segment and the two eventfds over a SOCK_SEQPACKET socketpair.
func startChild(t testing.TB, spin time.Duration) *child {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	childEnd := os.NewFile(uintptr(fds[1]), "control")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=echo")
	cmd.ExtraFiles = []*os.File{childEnd}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	childEnd.Close()
	ch := &child{cmd: cmd, done: make(chan error, 1)}
	go func() { ch.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-ch.done
	})

	seg := newTestSegment(t, segLen)
	own, err := NewEventfd()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := NewEventfd()
	if err != nil {
		t.Fatal(err)
	}
	if ch.ep, err = attach(seg, true, own, peer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ch.ep.close)
	ch.ep.spin = spin
	ch.ep.hangup = ch.ep.bell.Watch(fds[0]) // hung up when the child dies
	conn := fileConn(t, dupFD(t, fds[0]))
	t.Cleanup(func() { unix.Close(fds[0]) })

	msg := binary.LittleEndian.AppendUint64(nil, uint64(seg.Size()))
	msg = binary.LittleEndian.AppendUint64(msg, uint64(spin))
	if err := SendFDs(conn, msg, seg.FD(), own, peer); err != nil {
		t.Fatal(err)
	}
	return ch
}

// stop sends stopRecord and waits for the child to exit cleanly.
func (ch *child) stop(t testing.TB) {
	t.Helper()
	if err := ch.ep.send(stopRecord); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ch.done:
		ch.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("child: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child did not exit after the stop record")
	}
}

// TestCrossProcessPingPong bounces 100k records between this process and
// a child through two rings, both sides sleeping on their doorbell
// whenever their in-ring is empty and neither waiting with a timeout but
// the parent's overall deadline: a lost wake-up on either side stops the
// bouncing, and the deadline turns that into a failure.
func TestCrossProcessPingPong(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 10000
	}
	ch := startChild(t, 0)
	start := time.Now()
	if err := pingPong(ch.ep, n, start.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	ch.stop(t)
	writes, _ := ch.ep.peer.Stats()
	_, sleeps := ch.ep.bell.Stats()
	t.Logf("%d round trips in %v (%v each); parent slept %d times, woke the child %d times",
		n, elapsed, elapsed/time.Duration(n), sleeps, writes)
	if sleeps == 0 || writes == 0 {
		t.Fatal("the ping-pong never went through the eventfds; it does not test wake-ups")
	}
}

// TestCrossProcessChildDeath checks that a parent blocked on a dead
// child's ring learns of it from the watched socket instead of hanging.
func TestCrossProcessChildDeath(t *testing.T) {
	ch := startChild(t, 0)
	if err := pingPong(ch.ep, 10, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ch.cmd.Process.Kill()
	err := ch.ep.recv(make([]byte, 8), time.Now().Add(time.Minute))
	if !errors.Is(err, errHangup) {
		t.Fatalf("recv from a killed child: %v, want a hang-up", err)
	}
}

// BenchmarkCrossProcessRoundTrip measures one record there and back
// between two processes, with each side sleeping at once when idle
// (block) or spinning 20µs first (spin).
func BenchmarkCrossProcessRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name string
		spin time.Duration
	}{{"block", 0}, {"spin", 20 * time.Microsecond}} {
		b.Run(bc.name, func(b *testing.B) {
			ch := startChild(b, bc.spin)
			rec := make([]byte, 8)
			b.ReportAllocs()
			for b.Loop() {
				if err := ch.ep.send(rec); err != nil {
					b.Fatal(err)
				}
				if err := ch.ep.recv(rec, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			ch.stop(b)
		})
	}
}
