package loader

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestRxQueuesCountsUsedQueues: a veth made with explicit queue counts
// uses them all; one made as `ip link add type veth` makes it (one queue
// per CPU allocated, one in use) uses one, although netlink reports the
// allocation. Binding an AF_XDP socket past the used queues fails with
// EINVAL, which a daemon that believed netlink hit on such a veth.
func TestRxQueuesCountsUsedQueues(t *testing.T) {
	p := harness.New(t, harness.Config{MTU: 1500, Queues: 3})
	var n int
	if err := p.A.Do(func() (err error) { n, err = RxQueues(p.A.Link); return err }); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("RxQueues on a veth of 3 queues = %d, want 3", n)
	}

	var allocated int
	err := p.A.Do(func() error {
		// The defaults of `ip link add NAME type veth peer name PEER`.
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dflt0"}, PeerName: "dflt1"}
		if err := netlink.LinkAdd(v); err != nil {
			return err
		}
		defer netlink.LinkDel(v)
		l, err := netlink.LinkByName("dflt0")
		if err != nil {
			return err
		}
		allocated = l.Attrs().NumRxQueues
		n, err = RxQueues("dflt0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("RxQueues on a default veth = %d (netlink: %d allocated), want 1", n, allocated)
	}
	if runtime.NumCPU() > 1 && allocated <= 1 {
		t.Logf("netlink reports %d allocated queues on %d CPUs: this kernel does not show the difference", allocated, runtime.NumCPU())
	}

	if err := p.A.Do(func() (err error) { _, err = RxQueues("nosuch0"); return err }); err == nil {
		t.Error("RxQueues of a missing interface succeeded")
	}
}
