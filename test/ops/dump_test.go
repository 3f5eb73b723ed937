package ops_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// startDump runs `ndkxdp dump args...` and waits until the daemon has
// started its capture (its log says so for the nth time).
func (bd *bed) startDump(t *testing.T, nth int, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer, chan error) {
	t.Helper()
	var stdout, stderr syncBuffer
	cmd := exec.Command(binary(t), append([]string{"dump", "-daemon", bd.sock}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(bd.logs.String(), "capture started") < nth {
		if time.Now().After(deadline) {
			t.Fatalf("no capture started in 10 s:\n%s\n%s", stderr.String(), bd.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, &stdout, &stderr, done
}

var dumpReport = regexp.MustCompile(`(\d+) frames captured, (\d+) dropped by the daemon \(of (\d+) it moved`)

// TestDump: ndkxdp dump -w writes a pcap holding every frame the daemon
// moved while it ran, both directions (the difference of the engines'
// counts before and after), none dropped at this rate; a second capture
// at once is refused; the text summary names the WRITEs and the ACKs.
func TestDump(t *testing.T) {
	bd := newBed(t)
	file := filepath.Join(t.TempDir(), "d.pcap")
	cmd, _, stderr, done := bd.startDump(t, 1, "-w", file)

	if out := runFail(t, "dump", "-daemon", bd.sock, "-t", "1s"); !strings.Contains(out, "another capture runs") {
		t.Errorf("a second capture at once: %q", out)
	}
	var before, after daemon.Stats
	runJSON(t, &before, "stats", "-daemon", bd.sock)
	const n = 30
	bd.writes(t, n)
	bd.quiet(t)
	runJSON(t, &after, "stats", "-daemon", bd.sock)
	time.Sleep(400 * time.Millisecond) // the daemon streams every 250 ms at the latest
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dump: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dump still running 10 s after SIGINT")
	}
	m := dumpReport.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("dump's report: %q", stderr.String())
	}
	captured, _ := strconv.Atoi(m[1])
	if m[2] != "0" {
		t.Errorf("the daemon dropped %s frames of %s at this rate", m[2], m[3])
	}
	f, err := pcapfile.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	moved := int(after.Adapter["frames_out"] - before.Adapter["frames_out"] + after.Adapter["frames_in"] - before.Adapter["frames_in"])
	if len(f.Packets) != captured || captured != moved {
		t.Errorf("pcap holds %d frames, dump reports %d, the engines moved %d", len(f.Packets), captured, moved)
	}
	var writes, acks int
	for _, p := range f.Packets {
		if p.OrigLen < len(p.Data) || len(p.Data) > daemon.DefaultSnap {
			t.Fatalf("frame %d: %d bytes kept of %d", p.Index, len(p.Data), p.OrigLen)
		}
		op := p.Data[14+20+8] // Ethernet, IPv4, UDP: the BTH's opcode
		switch {
		case bytes.Equal(p.Data[6:12], bd.pair.A.MAC) && op >= 0x06 && op <= 0x0A:
			writes++
		case bytes.Equal(p.Data[6:12], bd.pair.B.MAC) && op == 0x11:
			acks++
		}
	}
	if want := n * int(bd.packetsPerWrite()); writes != want || acks < n {
		t.Errorf("pcap: %d WRITE packets from A (want %d), %d ACKs from B (want at least %d)", writes, want, acks, n)
	}
	checkWithTshark(t, file, captured)

	// The text summary, stopped by its count.
	_, stdout, stderr2, done2 := bd.startDump(t, 2, "-c", "5")
	bd.writes(t, 2)
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("dump -c 5: %v\n%s", err, stderr2.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dump -c 5 still running 10 s after 8 frames")
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("dump -c 5 printed %d lines:\n%s", len(lines), stdout.String())
	}
	a, b := bd.pair.A.IPv4.String(), bd.pair.B.IPv4.String()
	for _, l := range lines {
		if !strings.Contains(l, " out q0 "+a+" > "+b+" RC_RDMA_WRITE_") && !strings.Contains(l, " in  q0 "+b+" > "+a+" RC_ACKNOWLEDGE") {
			t.Errorf("summary line %q is neither a WRITE from A nor an ACK from B", l)
		}
	}

	// -qp: the connected QP's frames, both ways; another QP's, none.
	other, err := bd.pd.CreateQP(ndk.QPConfig{ReceiveCQ: bd.icq, InitiatorCQ: bd.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		qpn  uint32
		want string
	}{{bd.qp.QPN(), "10 frames captured"}, {other.QPN(), "0 frames captured"}} {
		_, _, stderr, done := bd.startDump(t, strings.Count(bd.logs.String(), "capture started")+1, "-qp", strconv.Itoa(int(c.qpn)), "-c", "10", "-t", "2s")
		bd.writes(t, 3) // 12 WRITE packets and their ACKs
		select {
		case err := <-done:
			if err != nil || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("dump -qp %d: %v, %q; want %q", c.qpn, err, stderr.String(), c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("dump -qp %d still running after 10 s", c.qpn)
		}
	}
}

// checkWithTshark decodes a dump's pcap with Wireshark's dissectors: each
// of its frames is InfiniBand over UDP 4791 with a BTH (opcode and
// destination QP), none malformed although the WRITEs are cut at the snap
// length.
func checkWithTshark(t *testing.T, file string, frames int) {
	t.Helper()
	tshark := testenv.RequireTool(t, "tshark")
	out, err := exec.Command(tshark, "-r", file, "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "frame.number", "-e", "frame.protocols", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != frames {
		t.Fatalf("tshark reads %d frames, dump wrote %d", len(lines), frames)
	}
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) < 4 || !strings.Contains(f[1], "udp:infiniband") || f[2] == "" || f[3] == "" {
			t.Errorf("tshark decodes frame %q without a BTH", l)
		} else if len(f) > 4 && f[4] != "" {
			t.Errorf("tshark finds frame %q malformed", l)
		}
	}
}

// TestDumpRefusedToOtherUsers: a user who may use the daemon (here, any:
// the socket is opened to all) but is neither root nor the daemon's user
// may not capture other applications' traffic; status still answers; and
// once the socket is 0660 again, that user is told the socket refused,
// not that a capability is missing.
func TestDumpRefusedToOtherUsers(t *testing.T) {
	bd := newBed(t)
	if err := os.Chmod(bd.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	for dir := filepath.Dir(bd.sock); dir != os.TempDir(); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	setpriv := testenv.RequireTool(t, "setpriv")
	bin := binary(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) ([]byte, error) {
		cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)...)
		return cmd.CombinedOutput()
	}
	out, err := as("dump", "-daemon", bd.sock, "-t", "1s")
	if err == nil || !strings.Contains(string(out), "uid 65534 may not take one") || !strings.Contains(string(out), "(EACCES); run it as root or as the daemon's user") ||
		strings.Contains(string(out), "frames captured") || strings.Contains(string(out), "peer") {
		t.Errorf("dump as uid 65534: %v\n%s\nwant the refusal and its fix, no frame count, no peer", err, out)
	}
	if out, err := as("status", "-daemon", bd.sock); err != nil || !strings.Contains(string(out), "running") {
		t.Errorf("status as uid 65534: %v\n%s", err, out)
	}
	// Closed again: the other user is refused by the socket's permissions,
	// and told so.
	if err := os.Chmod(bd.sock, 0o660); err != nil {
		t.Fatal(err)
	}
	// The fix named is the socket's group, for the operator's commands
	// and the tools alike.
	for _, args := range [][]string{{"status", "-daemon", bd.sock}, {"rping", "-c", "-a", bd.pair.B.IPv4.String(), "-C", "1", "-daemon", bd.sock}} {
		out, err = as(args...)
		if err == nil || !strings.Contains(string(out), "permission denied (EACCES): the daemon's socket (mode 0660) admits its owner and the members of group root") ||
			!strings.Contains(string(out), "usermod -aG root USER") || strings.Contains(string(out), "CAP_") {
			t.Errorf("%s as uid 65534 on a 0660 socket: %v\n%s", args[0], err, out)
		}
	}
}
