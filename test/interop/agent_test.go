package interop

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeGuest speaks the guest side of the agent protocol over a pipe. reply
// decides, per command, what to send back (lines without the newline).
type fakeGuest struct {
	conn  net.Conn
	reply func(id, cmd string) []string
	wmu   sync.Mutex
}

func startFake(t *testing.T, reply func(id, cmd string) []string) (*agent, *fakeGuest) {
	t.Helper()
	host, guest := net.Pipe()
	g := &fakeGuest{conn: guest, reply: reply}
	go g.serve()
	a := newAgent(host)
	t.Cleanup(func() { a.close(); guest.Close() })
	return a, g
}

func (g *fakeGuest) write(line string) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	fmt.Fprintf(g.conn, "%s\n", line)
}

func (g *fakeGuest) serve() {
	sc := bufio.NewScanner(g.conn)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "X" {
			cmd, _ := base64.StdEncoding.DecodeString(f[2])
			go func() {
				for _, l := range g.reply(f[1], string(cmd)) {
					g.write(l)
				}
			}()
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestAgentRoundTrip(t *testing.T) {
	a, _ := startFake(t, func(id, cmd string) []string {
		return []string{"P " + id + " 42", fmt.Sprintf("D %s 3 %s %s", id, b64("out:"+cmd), b64("err\n"))}
	})
	p, err := a.start("echo hi")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code, err := p.Wait(context.Background())
	if err != nil || out != "out:echo hi" || errOut != "err\n" || code != 3 {
		t.Fatalf("got %q %q %d %v", out, errOut, code, err)
	}
	if p.PID() != 42 {
		t.Errorf("PID %d, want 42", p.PID())
	}
}

func TestAgentEmptyOutput(t *testing.T) {
	a, _ := startFake(t, func(id, cmd string) []string { return []string{"D " + id + " 0  "} })
	p, err := a.start("true")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code, err := p.Wait(context.Background())
	if err != nil || out != "" || errOut != "" || code != 0 {
		t.Fatalf("got %q %q %d %v", out, errOut, code, err)
	}
}

// Replies arrive in the reverse order of the requests; each must reach its
// own command.
func TestAgentConcurrentOutOfOrder(t *testing.T) {
	const n = 20
	release := make(chan struct{})
	a, _ := startFake(t, func(id, cmd string) []string {
		<-release
		if cmd == "cmd-0" {
			time.Sleep(50 * time.Millisecond) // the first asked answers last
		}
		return []string{fmt.Sprintf("D %s 0 %s ", id, b64(cmd))}
	})
	ps := make([]*GuestProcess, n)
	for i := range ps {
		var err error
		if ps[i], err = a.start(fmt.Sprintf("cmd-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	for i, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, _, _, err := p.Wait(ctx)
		cancel()
		if err != nil || out != fmt.Sprintf("cmd-%d", i) {
			t.Errorf("command %d got %q %v", i, out, err)
		}
	}
}

func TestAgentGarbageEndsSession(t *testing.T) {
	for _, bad := range []string{"hello", "D 1 x " + b64("a") + " ", "D 1 0 !!! ", "R gid notanumber 1.0", "P 1"} {
		t.Run(bad, func(t *testing.T) {
			a, g := startFake(t, func(id, cmd string) []string { return nil })
			p, err := a.start("sleep")
			if err != nil {
				t.Fatal(err)
			}
			g.write(bad)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _, code, err := p.Wait(ctx)
			if !errors.Is(err, ErrVMGone) || code != -1 {
				t.Fatalf("after %q: exit %d err %v, want ErrVMGone", bad, code, err)
			}
			if _, err := a.start("again"); !errors.Is(err, ErrVMGone) {
				t.Fatalf("start after the session ended: %v", err)
			}
		})
	}
}

func TestAgentChannelClosed(t *testing.T) {
	a, g := startFake(t, func(id, cmd string) []string { return nil })
	p, err := a.start("sleep 100")
	if err != nil {
		t.Fatal(err)
	}
	g.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, _, err := p.Wait(ctx); !errors.Is(err, ErrVMGone) {
		t.Fatalf("pending command after the channel closed: %v", err)
	}
}

func TestAgentWaitHonoursContext(t *testing.T) {
	a, _ := startFake(t, func(id, cmd string) []string { return nil })
	p, err := a.start("sleep 100")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, code, err := p.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) || code != -1 {
		t.Fatalf("exit %d err %v, want a deadline error", code, err)
	}
}

func TestAgentReady(t *testing.T) {
	a, g := startFake(t, nil)
	g.write("R 0000:0000:0000:0000:0000:ffff:c612:0102 1 10.25")
	select {
	case r := <-a.ready:
		if r.gid != "0000:0000:0000:0000:0000:ffff:c612:0102" || r.gidIndex != 1 || r.uptime != 10.25 {
			t.Fatalf("ready %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ready message")
	}
}

func TestReadLineLimit(t *testing.T) {
	r := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\nok\n"), 16)
	if _, err := readLine(r, 50); err == nil {
		t.Fatal("a 100-byte line passed a 50-byte limit")
	}
	r = bufio.NewReaderSize(strings.NewReader(strings.Repeat("y", 40)+"\n"), 16)
	if l, err := readLine(r, 50); err != nil || string(l) != strings.Repeat("y", 40) {
		t.Fatalf("%q %v", l, err)
	}
}
