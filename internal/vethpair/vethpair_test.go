package vethpair_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

func nsInode(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestPairTopology(t *testing.T) {
	p := harness.New(t, vethpair.Config{MTU: 9000, Queues: 2})
	for _, h := range []*vethpair.Host{p.A, p.B} {
		nl, err := h.Netlink()
		if err != nil {
			t.Fatal(err)
		}
		defer nl.Close()
		link, err := nl.LinkByName(h.Link)
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		a := link.Attrs()
		if a.MTU != 9000 || a.NumTxQueues != 2 || a.NumRxQueues != 2 {
			t.Errorf("%s: mtu %d tx %d rx %d, want 9000/2/2", h.Name, a.MTU, a.NumTxQueues, a.NumRxQueues)
		}
		if a.Index != h.Ifindex || a.HardwareAddr.String() != h.MAC.String() {
			t.Errorf("%s: host record %d/%s differs from link %d/%s", h.Name, h.Ifindex, h.MAC, a.Index, a.HardwareAddr)
		}
		routes, err := nl.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() && ones(r.Dst) == 0 {
				t.Errorf("%s: default route present: %v", h.Name, r)
			}
		}
		links, err := nl.LinkList()
		if err != nil {
			t.Fatal(err)
		}
		if len(links) != 2 { // lo and the veth end
			t.Errorf("%s: %d links, want lo and %s only", h.Name, len(links), h.Link)
		}
	}
	if !p.A.IPv4.IsValid() || !inBenchRange(p.A.IPv4.AsSlice()) || !inBenchRange(p.B.IPv4.AsSlice()) {
		t.Errorf("addresses %s, %s outside 198.18.0.0/15", p.A.IPv4, p.B.IPv4)
	}
	// The veth never touches the caller's namespace.
	if l, err := netlink.LinkByName(p.A.Link); err == nil && l.Type() == "veth" {
		t.Errorf("veth %s visible in the caller's namespace", p.A.Link)
	}
}

func ones(n *net.IPNet) int { o, _ := n.Mask.Size(); return o }

func inBenchRange(ip net.IP) bool {
	_, bench, _ := net.ParseCIDR("198.18.0.0/15")
	return bench.Contains(ip)
}

func TestPingBothFamilies(t *testing.T) {
	p := harness.New(t, vethpair.Config{})
	for _, dst := range []string{p.B.IPv4.String(), p.B.IPv6.String()} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := p.A.Command(ctx, "ping", "-c", "1", "-w", "5", dst).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("ping %s from %s: %v\n%s", dst, p.A.Name, err, out)
		}
	}
}

func TestDoRunsInNamespaceAndReturns(t *testing.T) {
	p := harness.New(t, vethpair.Config{})
	before := nsInode(t)
	want, err := netns.GetFromName(p.A.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(want), &st); err != nil {
		t.Fatal(err)
	}
	var inside uint64
	if err := p.A.Do(func() error {
		var s unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &s); err != nil {
			return err
		}
		inside = s.Ino
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside != st.Ino {
		t.Errorf("Do ran in namespace inode %d, want %d", inside, st.Ino)
	}
	if after := nsInode(t); after != before {
		t.Errorf("caller's thread moved from namespace %d to %d", before, after)
	}
	wantErr := fmt.Errorf("boom")
	if err := p.A.Do(func() error { return wantErr }); err != wantErr {
		t.Errorf("Do returned %v, want fn's error", err)
	}
}

// TestJoin: a Host from Join, built from another Host's exported fields
// (as a child process gets them), runs Do in that namespace and finds its
// link there; after Leave its Do fails and the namespace stays; a name
// that is no namespace fails Join.
func TestJoin(t *testing.T) {
	p := harness.New(t, vethpair.Config{})
	h, err := vethpair.Join(*p.B)
	if err != nil {
		t.Fatal(err)
	}
	var ifindex int
	if err := h.Do(func() error {
		l, err := net.InterfaceByName(h.Link)
		if err == nil {
			ifindex = l.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ifindex != p.B.Ifindex {
		t.Errorf("joined host's %s has ifindex %d, want %d", h.Link, ifindex, p.B.Ifindex)
	}
	if err := h.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := h.Do(func() error { return nil }); err == nil {
		t.Error("Do after Leave succeeded")
	}
	if err := p.B.Do(func() error { return nil }); err != nil {
		t.Errorf("the pair's own host after Leave: %v", err)
	}
	if _, err := vethpair.Join(vethpair.Host{Name: vethpair.NamePrefix + "no-such-namespace"}); err == nil {
		t.Error("Join of a missing namespace succeeded")
	}
}

func TestStaticNeighbours(t *testing.T) {
	p := harness.New(t, vethpair.Config{StaticNeighbours: true})
	nl, err := p.A.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	neighs, err := nl.NeighList(p.A.Ifindex, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range neighs {
		if n.IP.Equal(p.B.IPv4.AsSlice()) && n.HardwareAddr.String() == p.B.MAC.String() && n.State&netlink.NUD_PERMANENT != 0 {
			found = true
		}
	}
	if !found {
		t.Errorf("no permanent neighbour %s -> %s in %s: %v", p.B.IPv4, p.B.MAC, p.A.Name, neighs)
	}
}

func TestCloseDeletesNamespaces(t *testing.T) {
	p := harness.New(t, vethpair.Config{})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*vethpair.Host{p.A, p.B} {
		if _, err := os.Stat(filepath.Join(vethpair.NetnsDir, h.Name)); !os.IsNotExist(err) {
			t.Errorf("namespace %s still present after Close (stat: %v)", h.Name, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := p.A.Do(func() error { return nil }); err == nil {
		t.Error("Do on a closed pair succeeded")
	}
}

func TestRemoveStaleDeletesDeadOwners(t *testing.T) {
	harness.New(t, vethpair.Config{}) // ensures root and the netns directory
	// A PID that certainly belonged to a process that has exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	name := fmt.Sprintf("%s%d-1-a", vethpair.NamePrefix, dead)
	ns, err := vethpair.NewNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
	t.Cleanup(func() { _ = netns.DeleteNamed(name) })
	live := fmt.Sprintf("%s%d-999-a", vethpair.NamePrefix, os.Getpid())
	ns, err = vethpair.NewNamedNS(live)
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
	t.Cleanup(func() { _ = netns.DeleteNamed(live) })

	vethpair.RemoveStale()
	if _, err := os.Stat(filepath.Join(vethpair.NetnsDir, name)); !os.IsNotExist(err) {
		t.Errorf("stale namespace %s survived vethpair.RemoveStale", name)
	}
	if _, err := os.Stat(filepath.Join(vethpair.NetnsDir, live)); err != nil {
		t.Errorf("namespace %s of a live process was removed: %v", live, err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []vethpair.Config{{MTU: 10}, {Queues: 65}, {MTU: 70000}} {
		if _, err := vethpair.NewPair(c); err == nil {
			t.Errorf("vethpair.NewPair(%+v) succeeded", c)
		}
	}
}
