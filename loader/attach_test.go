package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/bpf"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

var pinSeq atomic.Uint32

// testOptions uses a pin root of its own, so tests in parallel processes
// (the harness names every veth ndk0/ndk1) never share pins.
func testOptions(t *testing.T, mode AttachMode) Options {
	root := fmt.Sprintf("/sys/fs/bpf/ndkxdp-test-%d-%d", os.Getpid(), pinSeq.Add(1))
	t.Cleanup(func() { os.RemoveAll(root) })
	return Options{Mode: mode, PinRoot: root, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// attached returns how the kernel reports XDP on h's link.
func attached(t *testing.T, h *harness.Host) (on bool, mode uint32) {
	t.Helper()
	nl, err := h.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	l, err := nl.LinkByName(h.Link)
	if err != nil {
		t.Fatal(err)
	}
	x := l.Attrs().Xdp
	if x == nil {
		return false, 0
	}
	return x.Attached, x.AttachMode
}

func attachIn(t *testing.T, h *harness.Host, opts Options) *XDP {
	t.Helper()
	var x *XDP
	if err := h.Do(func() (err error) { x, err = Attach(h.Link, opts); return err }); err != nil {
		t.Fatal(err)
	}
	return x
}

func TestAttachModes(t *testing.T) {
	for _, c := range []struct {
		mode     AttachMode
		want     AttachMode
		kernMode uint32
	}{
		{AttachDriver, AttachDriver, xdpAttachedDriver},
		{AttachGeneric, AttachGeneric, xdpAttachedSKB},
		{AttachAuto, AttachDriver, xdpAttachedDriver}, // veth has native XDP
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1})
			x := attachIn(t, pair.A, testOptions(t, c.mode))
			if x.Mode() != c.want {
				t.Errorf("Mode() = %v, want %v", x.Mode(), c.want)
			}
			if x.Interface() != pair.A.Link {
				t.Errorf("Interface() = %q, want %q", x.Interface(), pair.A.Link)
			}
			if on, m := attached(t, pair.A); !on || m != c.kernMode {
				t.Errorf("kernel reports attached=%v mode=%d, want attached mode %d", on, m, c.kernMode)
			}
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
			if on, _ := attached(t, pair.A); on {
				t.Error("XDP still attached after Close of an unpinned attachment")
			}
		})
	}
}

// TestAttachAutoLogsFallback attaches in auto mode to an interface that
// already has a driver-mode program: driver mode fails, the fallback is
// logged with its reason, and generic mode fails too (an interface runs one
// XDP program), so the error reports both attempts.
func TestAttachAutoLogsFallback(t *testing.T) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1})
	var logs bytes.Buffer
	opts := testOptions(t, AttachAuto)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	first := attachIn(t, pair.A, testOptions(t, AttachDriver))
	defer first.Close()

	var err error
	pair.A.Do(func() error { _, err = Attach(pair.A.Link, opts); return nil })
	if err == nil {
		t.Fatal("second attach to the same interface succeeded")
	}
	for _, want := range []string{
		"loader: attach xdp to " + pair.A.Link + " (driver mode): ",
		"loader: attach xdp to " + pair.A.Link + " (generic mode): ",
		"already has an XDP program",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !strings.Contains(logs.String(), "falling back to generic mode") || !strings.Contains(logs.String(), "interface="+pair.A.Link) {
		t.Errorf("fallback not logged with its interface; log:\n%s", logs.String())
	}
}

func TestAttachMissingInterface(t *testing.T) {
	testenv.RequireRoot(t)
	const name = "ndkxnosuch0"
	_, err := Attach(name, Options{})
	if !errors.Is(err, ErrInterfaceNotFound) {
		t.Fatalf("Attach(%s) = %v, want ErrInterfaceNotFound", name, err)
	}
	if want := "loader: attach xdp to " + name + ": find interface: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
	_, err = OpenPinned(name, Options{})
	if !errors.Is(err, ErrInterfaceNotFound) || !strings.HasPrefix(err.Error(), "loader: open pinned xdp for "+name+": check interface: ") {
		t.Errorf("OpenPinned(%s) = %v", name, err)
	}
}

func TestPinHandOver(t *testing.T) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1})
	opts := testOptions(t, AttachGeneric)
	var dir string
	pair.A.Do(func() error { dir = PinDir(pair.A.Link, opts); return nil })
	if want := filepath.Join(opts.PinRoot, "netns-"); !strings.HasPrefix(dir, want) || filepath.Base(dir) != pair.A.Link {
		t.Errorf("PinDir = %s, want %s<inode>/%s", dir, want, pair.A.Link)
	}

	var err error
	pair.A.Do(func() error { _, err = OpenPinned(pair.A.Link, opts); return nil })
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "load pinned link") {
		t.Errorf("OpenPinned with nothing pinned = %v, want fs.ErrNotExist from the link step", err)
	}

	old := attachIn(t, pair.A, opts)
	if err := old.AddQP(GSIQPN, 0); err != nil {
		t.Fatal(err)
	}
	if err := old.AddQP(0x00ABCD, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := old.prog.Run(&ebpf.RunOptions{Data: rocev2Frame(4791, 0x00ABCD)}); err != nil {
		t.Fatal(err)
	}
	localMAC := [6]byte(pair.A.MAC)
	if err := old.SetLocal(localMAC, pair.A.IPv4); err != nil {
		t.Fatal(err)
	}
	if err := old.Pin(); err != nil {
		t.Fatal(err)
	}
	if !old.Pinned() {
		t.Error("Pinned() false after Pin")
	}
	for _, f := range []string{"link", "prog", "xsks", "qp_owner", "counters", "local_cfg", "local_addrs"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("pin %s: %v", f, err)
		}
	}
	// The old daemon exits; the pin keeps the program attached.
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if on, _ := attached(t, pair.A); !on {
		t.Fatal("pinned attachment detached by Close")
	}

	var x *XDP
	if err := pair.A.Do(func() (err error) { x, err = OpenPinned(pair.A.Link, opts); return err }); err != nil {
		t.Fatal(err)
	}
	if x.Mode() != AttachGeneric || !x.Pinned() {
		t.Errorf("taken over: mode %v pinned %v, want generic, pinned", x.Mode(), x.Pinned())
	}
	qps, err := x.QPs()
	if err != nil {
		t.Fatal(err)
	}
	if len(qps) != 2 || qps[GSIQPN] != 0 || qps[0x00ABCD] != 0 {
		t.Errorf("QPs after hand-over = %v, want the predecessor's {1:0 0xabcd:0}", qps)
	}
	if mac, addrs, on, err := x.Local(); err != nil || !on || mac != localMAC || len(addrs) != 1 || addrs[0] != pair.A.IPv4 {
		t.Errorf("Local after hand-over = %x %v %v %v, want the predecessor's %x [%v]", mac, addrs, on, err, localMAC, pair.A.IPv4)
	}
	c, err := x.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c[ReasonDropNoSocket] != 1 {
		t.Errorf("counters after hand-over:\n%s\nwant the predecessor's DROP_NO_SOCKET 1", c.String())
	}

	if err := x.Unpin(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pin directory after Unpin: %v, want gone", err)
	}
	if on, _ := attached(t, pair.A); !on {
		t.Error("Unpin detached while a handle is open")
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if on, _ := attached(t, pair.A); on {
		t.Error("still attached after Unpin and Close")
	}
}

// TestOpenPinnedStale: a pin whose interface was replaced (same name, new
// ifindex) must be refused, not driven.
func TestOpenPinnedStale(t *testing.T) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1})
	opts := testOptions(t, AttachDriver)
	x := attachIn(t, pair.A, opts)
	if err := x.Pin(); err != nil {
		t.Fatal(err)
	}
	defer func() { x.Unpin(); x.Close() }()

	// Rename the attached interface away and give its name to a new one.
	err := pair.A.Do(func() error {
		l, err := netlink.LinkByName(pair.A.Link)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, "ndkxold"); err != nil {
			return err
		}
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: pair.A.Link}, PeerName: "ndkxnew"})
	})
	if err != nil {
		t.Fatal(err)
	}
	pair.A.Do(func() error { _, err = OpenPinned(pair.A.Link, opts); return nil })
	if err == nil || !strings.Contains(err.Error(), "check link: pinned link is attached to ifindex") {
		t.Errorf("OpenPinned of a stale pin = %v, want a refusal naming the ifindex", err)
	}
}

var realHostMountNS = hostMountNS

// TestMountBPFFS unmounts bpffs in a private mount namespace and checks that
// pinning mounts it again. The thread that entered the namespace is never
// unlocked, so it dies with its goroutine and nothing else runs there.
func TestMountBPFFS(t *testing.T) {
	testenv.RequireRoot(t)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make mounts private: %w", err)
			}
			// Whatever is at /sys/fs/bpf, cover it with a tmpfs so the
			// directory is certainly not bpffs.
			if err := unix.Mount("tmpfs", bpffsMount, "tmpfs", 0, ""); err != nil {
				return fmt.Errorf("cover %s: %w", bpffsMount, err)
			}
			dir := filepath.Join(bpffsMount, "ndkxdp", "veth-test")
			// A mount namespace of its own, as `ip netns exec` makes: a
			// bpffs mounted here would end with the process. Where PID
			// 1's or the parent's namespace can be read, the check must
			// see it differs.
			var init, parent unix.Stat_t
			readable := unix.Stat("/proc/1/ns/mnt", &init) == nil || unix.Stat(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()), &parent) == nil
			if readable && realHostMountNS() {
				return fmt.Errorf("hostMountNS true in a mount namespace of its own")
			}
			defer func() { hostMountNS = realHostMountNS }()
			hostMountNS = func() bool { return false }
			if err := preparePinDir(dir); !errors.Is(err, ErrPinsWouldVanish) || !strings.Contains(err.Error(), "nsenter --net=") {
				return fmt.Errorf("preparePinDir in a private mount namespace = %v, want the refusal naming nsenter", err)
			}
			// The host's mount namespace, where bpffs is missing (a
			// fresh machine): Pin mounts it.
			hostMountNS = func() bool { return true }
			if err := preparePinDir(dir); err != nil {
				return fmt.Errorf("preparePinDir: %w", err)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(bpffsMount, &st); err != nil {
				return err
			}
			if st.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("%s has fs type %#x after preparePinDir, want bpffs", bpffsMount, st.Type)
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return fmt.Errorf("pin directory not created: %v", err)
			}
			// A directory that is not on bpffs is refused by name.
			if err := preparePinDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "is not on a bpf filesystem") {
				return fmt.Errorf("preparePinDir on a plain directory = %v, want refusal", err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestSteerLive sends RoCEv2 datagrams from B to A through the veth pair and
// checks that A's program delivers known QPs to a real AF_XDP socket bound
// to queue 0, and drops unknown QPs without the kernel answering ICMP port
// unreachable, in both modes.
func TestSteerLive(t *testing.T) {
	for _, mode := range []AttachMode{AttachDriver, AttachGeneric} {
		t.Run(mode.String(), func(t *testing.T) { steerLive(t, mode) })
	}
}

func steerLive(t *testing.T, mode AttachMode) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1, StaticNeighbours: true})
	x := attachIn(t, pair.A, testOptions(t, mode))
	defer x.Close()

	var xsk *testXSK
	if err := pair.A.Do(func() (err error) { xsk, err = newTestXSK(pair.A.Ifindex, 0); return err }); err != nil {
		t.Fatal(err)
	}
	defer xsk.Close()
	if err := x.RegisterSocket(0, xsk.fd); err != nil {
		t.Fatal(err)
	}
	const known, unknown = 0x000042, 0x000043
	if err := x.AddQP(known, 0); err != nil {
		t.Fatal(err)
	}

	// A connected UDP socket in B: an ICMP port unreachable from A shows
	// up as ECONNREFUSED on it.
	var conn *net.UDPConn
	err := pair.B.Do(func() (err error) {
		conn, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: pair.A.IPv4.AsSlice(), Port: 4791})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bth := func(qpn uint32) []byte {
		b := []byte{0x04, 0, 0xFF, 0xFF, 0, byte(qpn >> 16), byte(qpn >> 8), byte(qpn), 0x80, 0, 0, 7}
		return append(b, "payload\x00\x00\x00\x00"...)
	}
	refused := func(wait time.Duration) bool {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(wait))
		_, err := conn.Read(make([]byte, 64))
		return errors.Is(err, unix.ECONNREFUSED)
	}

	if _, err := conn.Write(bth(known)); err != nil {
		t.Fatal(err)
	}
	frame, err := xsk.receive(2 * time.Second)
	if err != nil {
		t.Fatalf("known QP: %v", err)
	}
	// Ethernet 14 + IPv4 20 + UDP 8, then the BTH as sent.
	if len(frame) < 42+12 || binary.BigEndian.Uint16(frame[36:]) != 4791 || !bytes.Equal(frame[42:], bth(known)) {
		t.Errorf("AF_XDP socket got % x, want the RoCEv2 frame for QP %#x", frame, known)
	}

	if _, err := conn.Write(bth(unknown)); err != nil {
		t.Fatal(err)
	}
	if refused(300 * time.Millisecond) {
		t.Error("unknown QP reached the kernel: B got ICMP port unreachable")
	}
	if f, err := xsk.receive(100 * time.Millisecond); err == nil {
		t.Errorf("unknown QP delivered to the socket: % x", f)
	}

	c, err := x.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c[ReasonRedirect] != 1 || c[ReasonDropUnknownQP] != 1 || c.Verdict(VerdictDrop) != 1 {
		t.Errorf("counters:\n%s\nwant REDIRECT 1, DROP_UNKNOWN_QP 1, no other drop", c.String())
	}

	// Control: without the program the same datagram draws ICMP, so the
	// check above can fail.
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(bth(unknown)); err != nil {
		t.Fatal(err)
	}
	if !refused(2 * time.Second) {
		t.Error("without XDP, B got no ICMP port unreachable: the no-ICMP check proves nothing")
	}
}

// TestSteerLiveWrongDestination: A's program knows only A's IPv4 address,
// so a RoCEv2 datagram B sends to A's IPv6 address, which A's kernel
// would take, is dropped and counted, reaches neither the socket nor the
// kernel (no ICMP); the same datagram to A's IPv4 address is delivered.
func TestSteerLiveWrongDestination(t *testing.T) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1, StaticNeighbours: true})
	x := attachIn(t, pair.A, testOptions(t, AttachGeneric))
	defer x.Close()
	var xsk *testXSK
	if err := pair.A.Do(func() (err error) { xsk, err = newTestXSK(pair.A.Ifindex, 0); return err }); err != nil {
		t.Fatal(err)
	}
	defer xsk.Close()
	if err := x.RegisterSocket(0, xsk.fd); err != nil {
		t.Fatal(err)
	}
	const qpn = 0x000042
	if err := x.AddQP(qpn, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.SetLocal([6]byte(pair.A.MAC), pair.A.IPv4); err != nil {
		t.Fatal(err)
	}
	bth := []byte{0x04, 0, 0xFF, 0xFF, 0, 0, 0, qpn, 0x80, 0, 0, 7, 'p', 'a', 'y', 0, 0, 0, 0}
	dial := func(network string, ip netip.Addr) *net.UDPConn {
		var conn *net.UDPConn
		if err := pair.B.Do(func() (err error) {
			conn, err = net.DialUDP(network, nil, &net.UDPAddr{IP: ip.AsSlice(), Port: 4791})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	to6 := dial("udp6", pair.A.IPv6)
	if _, err := to6.Write(bth); err != nil {
		t.Fatal(err)
	}
	to6.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := to6.Read(make([]byte, 64)); errors.Is(err, unix.ECONNREFUSED) {
		t.Error("a datagram to an address the program does not know reached the kernel: B got ICMP port unreachable")
	}
	if f, err := xsk.receive(100 * time.Millisecond); err == nil {
		t.Errorf("a datagram to an address the program does not know was delivered: % x", f)
	}
	if _, err := dial("udp4", pair.A.IPv4).Write(bth); err != nil {
		t.Fatal(err)
	}
	if _, err := xsk.receive(2 * time.Second); err != nil {
		t.Errorf("control, the same datagram to A's IPv4 address: %v", err)
	}
	c, err := x.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c[ReasonDropWrongDstIP] != 1 || c[ReasonRedirect] != 1 || c.Verdict(VerdictDrop) != 1 {
		t.Errorf("counters:\n%s\nwant DROP_WRONG_DST_IP 1, REDIRECT 1, no other drop", c.String())
	}
}

// TestClearStale: pins whose interface is gone (the kernel detached the
// link: ifindex 0) are cleared, with their namespace's directory; pins of
// a live attachment and a directory still being pinned (no link) stay.
func TestClearStale(t *testing.T) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1})
	opts := testOptions(t, AttachGeneric)
	live := attachIn(t, pair.A, opts)
	defer func() { live.Unpin(); live.Close() }()
	if err := live.Pin(); err != nil {
		t.Fatal(err)
	}
	// A daemon killed on an interface that is then deleted: a veth pair
	// of its own in B's namespace (deleting B's end would take A's too).
	var gone *XDP
	var goneDir string
	if err := pair.B.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ndkxg0"}, PeerName: "ndkxg1"}); err != nil {
			return err
		}
		var err error
		if gone, err = Attach("ndkxg0", opts); err != nil {
			return err
		}
		goneDir = PinDir("ndkxg0", opts)
		return gone.Pin()
	}); err != nil {
		t.Fatal(err)
	}
	gone.Close() // a SIGKILL: the pins hold the link
	if err := pair.B.Do(func() error {
		l, err := netlink.LinkByName("ndkxg0")
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}); err != nil {
		t.Fatal(err)
	}
	pinning := filepath.Join(opts.PinRoot, "netns-1", "eth9")
	if err := os.MkdirAll(pinning, 0o700); err != nil {
		t.Fatal(err)
	}
	cleared, err := ClearStale(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(cleared) != 1 || cleared[0] != goneDir {
		t.Errorf("cleared %q, want [%s]", cleared, goneDir)
	}
	if _, err := os.Stat(filepath.Dir(goneDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the gone namespace's directory: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(live.dir(), "link")); err != nil {
		t.Errorf("a live attachment's pins were touched: %v", err)
	}
	if _, err := os.Stat(pinning); err != nil {
		t.Errorf("a directory without a link pin was touched: %v", err)
	}
}

// TestAdoptLegacyPins: pins an earlier ndkxdp left at <PinRoot>/<ifname>
// move to the namespace's place when their link is attached to that
// interface here, and OpenPinned takes them over; from a namespace where
// the interface runs another program (or none) they stay.
func TestAdoptLegacyPins(t *testing.T) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1})
	opts := testOptions(t, AttachGeneric)
	old := attachIn(t, pair.A, opts)
	if err := old.Pin(); err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(opts.PinRoot, pair.A.Link)
	if err := os.Rename(old.dir(), legacy); err != nil {
		t.Fatal(err)
	}
	old.Close() // a SIGKILL: the pins hold the link
	// B's namespace has no interface of that name, or another program.
	var moved bool
	var err error
	pair.B.Do(func() error { moved, err = AdoptLegacyPins(pair.A.Link, opts); return nil })
	if moved || err != nil {
		t.Fatalf("adopted from another namespace: %v, %v", moved, err)
	}
	pair.A.Do(func() error { moved, err = AdoptLegacyPins(pair.A.Link, opts); return nil })
	if !moved || err != nil {
		t.Fatalf("AdoptLegacyPins = %v, %v; want moved", moved, err)
	}
	var x *XDP
	if err := pair.A.Do(func() (err error) { x, err = OpenPinned(pair.A.Link, opts); return err }); err != nil {
		t.Fatal(err)
	}
	if err := x.Unpin(); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if _, err := os.Stat(legacy); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("legacy pins still at %s: %v", legacy, err)
	}
}

// TestClearIncompatible: pins left by a version whose program has other
// maps (here: one map fewer, as before local_addrs) are removed, which
// detaches that program, and a fresh attachment follows; pins of this
// version are left alone.
func TestClearIncompatible(t *testing.T) {
	pair := harness.New(t, harness.Config{MTU: 1500, Queues: 1})
	opts := testOptions(t, AttachGeneric)
	x := attachIn(t, pair.A, opts)
	if err := x.Pin(); err != nil {
		t.Fatal(err)
	}
	dir := x.dir()
	x.Close() // a SIGKILL: the pins hold the link
	var cleared bool
	var err error
	pair.A.Do(func() error { cleared, err = ClearIncompatible(pair.A.Link, opts); return nil })
	if cleared || err != nil {
		t.Fatalf("this version's pins: ClearIncompatible = %v, %v; want them kept", cleared, err)
	}
	if err := os.Remove(filepath.Join(dir, bpf.SteerMapLocalAddrs)); err != nil {
		t.Fatal(err)
	}
	pair.A.Do(func() error { _, err = OpenPinned(pair.A.Link, opts); return nil })
	if !errors.Is(err, ErrIncompatiblePins) {
		t.Fatalf("OpenPinned of an older version's pins: %v, want ErrIncompatiblePins", err)
	}
	pair.A.Do(func() error { cleared, err = ClearIncompatible(pair.A.Link, opts); return nil })
	if !cleared || err != nil {
		t.Fatalf("ClearIncompatible = %v, %v; want cleared", cleared, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pins still at %s: %v", dir, err)
	}
	fresh := attachIn(t, pair.A, opts)
	fresh.Close()
}
