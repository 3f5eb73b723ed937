package interop

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The agent protocol runs over the virtio-serial port, one line per message
// (guest/init is the other side). Host to guest:
//
//	X <id> <base64 command>   run the command with bash -c in its own session
//	K <id>                    SIGKILL the command's process group
//	Q <id>                    acknowledge, then reboot (qemu -no-reboot exits)
//
// Guest to host:
//
//	R <gid> <gid index> <uptime>        the agent is up and rxe0 has its RoCE v2 GID
//	P <id> <pid>                        the command started
//	D <id> <exit> <base64 stdout> <base64 stderr>   it ended (empty output: "")
//	Q <id>                              reboot acknowledged
//
// IDs are chosen by the host and never reused within a VM, so replies to
// concurrent commands cannot be confused; the guest writes each line under
// a lock, so lines never interleave.

// maxAgentLine bounds one message (a command's whole output, base64).
const maxAgentLine = 64 << 20

// ErrVMGone is returned for commands that cannot complete because the agent
// channel closed (the VM exited or was closed).
var ErrVMGone = errors.New("interop: the peer VM's agent channel is closed")

type readyMsg struct {
	gid      string
	gidIndex int
	uptime   float64
}

// agent is the host side of the command channel.
type agent struct {
	rw    io.ReadWriteCloser
	wmu   sync.Mutex
	ids   atomic.Uint64
	ready chan readyMsg

	mu      sync.Mutex
	pending map[uint64]*GuestProcess
	closed  chan struct{}
	err     error // why the channel closed; set before closed is closed
}

func newAgent(rw io.ReadWriteCloser) *agent {
	a := &agent{
		rw:      rw,
		ready:   make(chan readyMsg, 1),
		pending: make(map[uint64]*GuestProcess),
		closed:  make(chan struct{}),
	}
	go a.readLoop()
	return a
}

func (a *agent) send(line string) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	select {
	case <-a.closed:
		return a.err
	default:
	}
	if _, err := io.WriteString(a.rw, line+"\n"); err != nil {
		return fmt.Errorf("%w: write: %v", ErrVMGone, err)
	}
	return nil
}

func (a *agent) readLoop() {
	r := bufio.NewReaderSize(a.rw, 64<<10)
	var err error
	for {
		var line []byte
		line, err = readLine(r, maxAgentLine)
		if err != nil {
			break
		}
		if err = a.handle(string(line)); err != nil {
			break
		}
	}
	a.mu.Lock()
	a.err = fmt.Errorf("%w (%v)", ErrVMGone, err)
	pending := a.pending
	a.pending = nil
	close(a.closed)
	a.mu.Unlock()
	for _, p := range pending {
		p.finish(-1, "", "", a.err)
	}
}

// readLine reads one '\n'-terminated line of at most limit bytes, without it.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("agent line longer than %d bytes", limit)
		}
		line = append(line, chunk...)
		if err == nil {
			return line[:len(line)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// handle processes one guest message. Malformed messages end the session:
// the channel carries nothing but agent lines, so garbage means the two
// sides disagree about the protocol.
func (a *agent) handle(line string) error {
	f := strings.Split(line, " ")
	switch {
	case f[0] == "R" && len(f) == 4:
		idx, err1 := strconv.Atoi(f[2])
		up, err2 := strconv.ParseFloat(f[3], 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("malformed ready message %q", line)
		}
		select {
		case a.ready <- readyMsg{gid: f[1], gidIndex: idx, uptime: up}:
		default:
		}
		return nil
	case f[0] == "P" && len(f) == 3:
		p, err := a.lookup(f[1], false)
		if err != nil || p == nil {
			return err
		}
		pid, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("malformed start message %q", line)
		}
		p.pid.Store(int64(pid))
		return nil
	case f[0] == "D" && len(f) == 5:
		code, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("malformed done message for %s: exit %q", f[1], f[2])
		}
		stdout, err1 := base64.StdEncoding.DecodeString(f[3])
		stderr, err2 := base64.StdEncoding.DecodeString(f[4])
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("malformed done message for %s: %w", f[1], err)
		}
		p, err := a.lookup(f[1], true)
		if err != nil || p == nil {
			return err
		}
		p.finish(code, string(stdout), string(stderr), nil)
		return nil
	case f[0] == "Q" && len(f) == 2:
		return nil
	}
	if len(line) > 80 {
		line = line[:80] + "..."
	}
	return fmt.Errorf("unexpected agent message %q", line)
}

// lookup finds the process an ID names; remove drops it from the table.
// A well-formed ID that is unknown is ignored (nil, nil).
func (a *agent) lookup(idStr string, remove bool) (*GuestProcess, error) {
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("malformed command id %q", idStr)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pending[id]
	if remove {
		delete(a.pending, id)
	}
	return p, nil
}

// start sends a command and registers its process.
func (a *agent) start(cmd string) (*GuestProcess, error) {
	p := &GuestProcess{a: a, id: a.ids.Add(1), cmd: cmd, done: make(chan struct{})}
	a.mu.Lock()
	if a.pending == nil {
		a.mu.Unlock()
		return nil, a.err
	}
	a.pending[p.id] = p
	a.mu.Unlock()
	if err := a.send(fmt.Sprintf("X %d %s", p.id, base64.StdEncoding.EncodeToString([]byte(cmd)))); err != nil {
		a.mu.Lock()
		if a.pending != nil {
			delete(a.pending, p.id)
		}
		a.mu.Unlock()
		return nil, err
	}
	return p, nil
}

func (a *agent) close() error {
	return a.rw.Close()
}

// GuestProcess is a command running in the peer VM (VM.Start).
type GuestProcess struct {
	a   *agent
	id  uint64
	cmd string
	pid atomic.Int64

	once   sync.Once
	done   chan struct{}
	code   int
	stdout string
	stderr string
	err    error
}

func (p *GuestProcess) finish(code int, stdout, stderr string, err error) {
	p.once.Do(func() {
		p.code, p.stdout, p.stderr, p.err = code, stdout, stderr, err
		close(p.done)
	})
}

// Done is closed when the process has ended and its output has arrived.
func (p *GuestProcess) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and returns its output and exit code
// (128+n if signal n ended it). If ctx ends first, the process keeps
// running and Wait returns ctx's error.
func (p *GuestProcess) Wait(ctx context.Context) (stdout, stderr string, exitCode int, err error) {
	select {
	case <-p.done:
		if p.err != nil {
			return p.stdout, p.stderr, -1, fmt.Errorf("guest command %q: %w", p.cmd, p.err)
		}
		return p.stdout, p.stderr, p.code, nil
	case <-ctx.Done():
		return "", "", -1, fmt.Errorf("guest command %q still running: %w", p.cmd, context.Cause(ctx))
	}
}

// Kill sends SIGKILL to the process and everything it started (its process
// group). It does not wait; Wait reports the end (exit code 137).
func (p *GuestProcess) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	return p.a.send(fmt.Sprintf("K %d", p.id))
}

// PID is the process's PID in the guest, 0 until the guest reported it.
func (p *GuestProcess) PID() int { return int(p.pid.Load()) }

// Output returns what the process has written so far. While it runs this
// reads the guest's copy through another command, so it costs a round trip;
// after it ended it is the final output.
func (p *GuestProcess) Output(ctx context.Context) (stdout, stderr string, err error) {
	select {
	case <-p.done:
		return p.stdout, p.stderr, p.err
	default:
	}
	dir := fmt.Sprintf("/run/agent/%d", p.id)
	q, err := p.a.start(fmt.Sprintf("cat %s/out 2>/dev/null; cat %s/err >&2 2>/dev/null; true", dir, dir))
	if err != nil {
		return "", "", err
	}
	out, errOut, _, err := q.Wait(ctx)
	if err != nil {
		q.Kill()
		return "", "", err
	}
	// The process may have ended (and its files gone) while cat ran.
	select {
	case <-p.done:
		return p.stdout, p.stderr, p.err
	default:
	}
	return out, errOut, nil
}
