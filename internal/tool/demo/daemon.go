package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// demo -daemon: an ndkxdp daemon (ndk/daemon, served from this process)
// owns each end's adapter, and each phase runs in a client process of its
// own, this binary started again with ClientEnv set to its job. The
// client dials both daemons, runs the phase through them and tells the
// demo, on its stdout, where it is; at the start and the end of the
// phase's body it waits for the demo's go-ahead on its stdin, so that the
// demo counts the transport's recoveries over the body alone. A closed
// stdin (the demo is gone) or SIGTERM (the demo was interrupted) ends it.

// ClientEnv names the environment variable that makes the binary a
// demo client process; its value is the JSON of a demoJob.
const ClientEnv = "NDKXDP_DEMO_CLIENT"

// demoDaemon is one end's daemon: the server on that end's adapter and
// its socket.
type demoDaemon struct {
	dir, sock string
	srv       *daemon.Server
	served    chan error
}

// DirPrefix starts the name of each demo daemon's socket directory;
// the demo's PID follows, so that the next demo can tell the directories
// of a demo that was killed (removeDeadDemoDirs).
const DirPrefix = "ndkxdp-demo-"

// removeDeadDemoDirs removes the socket directories of demos whose
// process is gone: a demo killed with SIGKILL runs no cleanup.
func removeDeadDemoDirs() {
	m, _ := filepath.Glob(filepath.Join(os.TempDir(), DirPrefix+"*"))
	for _, dir := range m {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(dir), DirPrefix), "-", 2)[0])
		if err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			os.RemoveAll(dir)
		}
	}
}

// startDaemons serves each end's adapter on a socket of its own.
func (d *demo) startDaemons(stdout io.Writer) error {
	removeDeadDemoDirs()
	for i, name := range []string{d.pair.A.Name, d.pair.B.Name} {
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", DirPrefix, os.Getpid()))
		if err != nil {
			return fmt.Errorf("daemon socket directory: %w", err)
		}
		x := &demoDaemon{dir: dir, sock: filepath.Join(dir, name+".sock"), served: make(chan error, 1)}
		ln, err := daemon.Listen(x.sock, 0o600, -1)
		if err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("daemon for %s: %w", name, err)
		}
		x.srv = daemon.New(d.served[i], daemon.Config{})
		go func() { x.served <- x.srv.Serve(ln) }()
		d.daemons[i] = x
	}
	fmt.Fprintf(stdout, "daemons: %s serves %s, %s serves %s; each phase runs in a client process of its own\n",
		d.daemons[0].sock, d.pair.A.Name, d.daemons[1].sock, d.pair.B.Name)
	return nil
}

// close stops the daemon (its clients' sessions end) and removes its
// socket.
func (x *demoDaemon) close() {
	x.srv.Close()
	<-x.served
	os.RemoveAll(x.dir)
}

// demoJob is what a client process runs: one phase, with the demo's flags,
// through the daemons at Sockets (A's, B's), B listening on Listen.
type demoJob struct {
	Phase    string
	Sockets  [2]string
	Names    [2]string
	Listen   string
	Messages int
	SendSize int
	RDMASize int
	RDMAOps  int
	Pings    int
}

// demoEvent is a client process's report: "connected" with the phase's
// introduction, "started" and "done" around its body, then "result".
type demoEvent struct {
	Event string
	Text  string `json:",omitempty"`
	Line  string `json:",omitempty"`
	RTT   baseline.Latency
}

// runClientPhase runs ph in a client process and returns its report line,
// its RTTs and the recoveries the daemons' engines counted during its
// body. An interruption (ctx) stops the process with SIGTERM, and SIGKILL
// if it has not ended 3 s later.
func (d *demo) runClientPhase(ctx context.Context, ph demoPhase, stdout io.Writer) (string, baseline.Latency, transportCounts, error) {
	var none baseline.Latency
	exe, err := os.Executable()
	if err != nil {
		return "", none, transportCounts{}, fmt.Errorf("%s: find this binary to start a client process: %w", ph.what, err)
	}
	f := d.f
	job, _ := json.Marshal(demoJob{Phase: ph.name, Sockets: [2]string{d.daemons[0].sock, d.daemons[1].sock},
		Names: [2]string{d.pair.A.Name, d.pair.B.Name}, Listen: d.listenAddr().String(),
		Messages: f.messages, SendSize: f.sendSize, RDMASize: f.rdmaSize, RDMAOps: f.rdmaOps, Pings: f.pings})
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ClientEnv+"="+string(job))
	// A process group of its own: a terminal's ^C reaches the demo alone,
	// which stops the client as it stops everything else.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		return "", none, transportCounts{}, err
	}
	goAhead, err := cmd.StdinPipe()
	if err != nil {
		return "", none, transportCounts{}, err
	}
	cmdline.EnterPhase(ctx, "connection set-up for "+ph.name)
	if err := cmd.Start(); err != nil {
		return "", none, transportCounts{}, fmt.Errorf("%s: start a client process: %w", ph.what, err)
	}
	stop := context.AfterFunc(ctx, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		time.AfterFunc(3*time.Second, func() { _ = cmd.Process.Kill() })
	})
	defer stop()
	var before, during transportCounts
	var result *demoEvent
	sc := bufio.NewScanner(events)
	for sc.Scan() {
		var ev demoEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // not ours; the process's error says more
		}
		switch ev.Event {
		case "connected":
			fmt.Fprintf(stdout, "%s, from client process %d...\n", ev.Text, cmd.Process.Pid)
			cmdline.EnterPhase(ctx, ph.name)
			before = d.counts()
		case "done":
			during = d.counts().since(before)
			if ctx.Err() == nil { // an interruption stays the phase's
				cmdline.EnterPhase(ctx, "disconnection after "+ph.name)
			}
		case "result":
			result = &ev
		}
		if ev.Event == "connected" || ev.Event == "done" {
			_, _ = io.WriteString(goAhead, "go\n")
		}
	}
	goAhead.Close()
	werr := cmd.Wait()
	if err := ctx.Err(); err != nil {
		return "", none, transportCounts{}, fmt.Errorf("%s: %w", ph.what, err)
	}
	if werr != nil || result == nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = "no result"
		}
		return "", none, transportCounts{}, fmt.Errorf("client process %d (%v): %s", cmd.Process.Pid, werr, msg)
	}
	return result.Line, result.RTT, during, nil
}

// RunClient is a demo client process: it runs the phase job names
// and exits 0, or prints why not on stderr and exits 1.
func RunClient(job string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := demoClient(ctx, cancel, job, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	return 0
}

func demoClient(ctx context.Context, cancel context.CancelFunc, job string, stdin io.Reader, stdout io.Writer) error {
	var j demoJob
	if err := json.Unmarshal([]byte(job), &j); err != nil {
		return fmt.Errorf("%s: %w", ClientEnv, err)
	}
	listen, err := netip.ParseAddrPort(j.Listen)
	if err != nil {
		return fmt.Errorf("%s: listen address: %w", ClientEnv, err)
	}
	var ph *demoPhase
	for _, p := range demoPhases(demoFlags{messages: j.Messages, sendSize: j.SendSize, rdmaSize: j.RDMASize, rdmaOps: j.RDMAOps, pings: j.Pings}) {
		if p.name == j.Phase {
			ph = &p
		}
	}
	if ph == nil {
		return fmt.Errorf("%s: no phase %q", ClientEnv, j.Phase)
	}
	// The go-aheads; a closed stdin means the demo is gone.
	goAhead := make(chan struct{}, 2)
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			goAhead <- struct{}{}
		}
		cancel()
	}()
	var hosts [2]*Host
	for i, sock := range j.Sockets {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		a, err := ndk.Dial(dctx, sock)
		dcancel()
		if err != nil {
			return fmt.Errorf("%s: %w", j.Names[i], err)
		}
		defer a.Close()
		if hosts[i], err = NewHost(j.Names[i], a); err != nil {
			return err
		}
	}
	srv, err := ListenCM(ctx, hosts[1], listen)
	if err != nil {
		return fmt.Errorf("%s: listen on %v: %w", j.Names[1], listen, err)
	}
	defer srv.l.Close()
	ev := &clientEvents{w: json.NewEncoder(stdout), goAhead: goAhead, ctx: ctx, cancel: cancel}
	line, rtt, err := runPhase(ctx, hosts[0], hosts[1], srv, *ph, ev)
	if err == nil {
		err = ev.err
	}
	if err != nil {
		return err
	}
	return ev.w.Encode(demoEvent{Event: "result", Line: line, RTT: rtt})
}

// clientEvents reports a phase's progress to the demo and waits for its
// go-ahead after "connected" and "done".
type clientEvents struct {
	w       *json.Encoder
	goAhead chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc // stops the phase once reporting failed
	err     error
}

func (e *clientEvents) connected(ph demoPhase, cn *Connection) {
	e.report(demoEvent{Event: "connected", Text: connectedText(ph, cn)})
}
func (e *clientEvents) started() {}
func (e *clientEvents) done()    { e.report(demoEvent{Event: "done"}) }

func (e *clientEvents) report(ev demoEvent) {
	if e.err != nil {
		return
	}
	if e.err = e.w.Encode(ev); e.err != nil {
		e.cancel()
		return
	}
	select {
	case <-e.goAhead:
	case <-e.ctx.Done():
		e.err = errors.New("stopped by the demo")
	}
}
