package afxdp

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/test/harness"
)

func TestXDPFeaturesString(t *testing.T) {
	for _, tc := range []struct {
		f    XDPFeatures
		s    string
		zero bool
	}{
		{0, "none", false},
		// virtio_net in Linux 6.12 (virtnet_probe): basic, redirect and,
		// with mergeable buffers, rx-sg; never xsk-zerocopy.
		{XDPBasic | XDPRedirect | XDPRxSG, "basic redirect rx-sg", false},
		{XDPBasic | XDPRedirect | XDPXSKZeroCopy, "basic redirect xsk-zerocopy", true},
		// xp_assign_dev wants all three.
		{XDPBasic | XDPXSKZeroCopy, "basic xsk-zerocopy", false},
		{XDPNdoXmitSG | 1<<9, "ndo-xmit-sg 0x200", false},
	} {
		if got := tc.f.String(); got != tc.s {
			t.Errorf("%#x: String() = %q, want %q", uint64(tc.f), got, tc.s)
		}
		if got := tc.f.ZeroCopy(); got != tc.zero {
			t.Errorf("%v: ZeroCopy() = %v, want %v", tc.f, got, tc.zero)
		}
	}
}

// TestQueryXDPFeaturesOnVeth asks the kernel what veth offers: XDP in the
// driver with redirect, no AF_XDP zero-copy, which matches the
// refusal a ModeAuto socket records before it binds copy mode.
func TestQueryXDPFeaturesOnVeth(t *testing.T) {
	p := harness.New(t, harness.Config{})
	err := p.A.Do(func() error {
		f, err := QueryXDPFeatures(p.A.Ifindex)
		if errors.Is(err, ErrNoNetdevFamily) {
			t.Skipf("kernel too old: %v", err)
		}
		if err != nil {
			return err
		}
		if f&(XDPBasic|XDPRedirect) != XDPBasic|XDPRedirect || f.ZeroCopy() {
			t.Errorf("veth reports %v (%#x); want basic and redirect without xsk-zerocopy", f, uint64(f))
		}
		t.Logf("veth: %v", f)
		// veth has no xsk-zerocopy, and the kernel puts
		// NETDEV_A_DEV_XDP_ZC_MAX_SEGS only in the reply of a device
		// that has: the attribute is absent, read as 0.
		d, err := QueryXDPDevice(p.A.Ifindex)
		if err != nil {
			return err
		}
		if d.Features != f || d.ZCMaxSegs != 0 {
			t.Errorf("veth: QueryXDPDevice = %+v; want features %v and no xdp_zc_max_segs", d, f)
		}
		if _, err := QueryXDPFeatures(9999); !errors.Is(err, unix.ENODEV) {
			t.Errorf("ifindex 9999: %v, want ENODEV", err)
		}
		if _, err := QueryXDPFeatures(0); err == nil {
			t.Error("ifindex 0 accepted")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, socks := openOn(t, p.A, UMEMConfig{NumFrames: 64}, SocketConfig{Queue: 0})
	if socks[0].Mode() != ModeCopy || !errors.Is(socks[0].ZeroCopyRefusal(), unix.EOPNOTSUPP) {
		t.Fatalf("ModeAuto on veth: %v mode, zero-copy refusal %v; want copy after EOPNOTSUPP", socks[0].Mode(), socks[0].ZeroCopyRefusal())
	}
}

// TestXDPDeviceReply parses crafted NETDEV_CMD_DEV_GET replies: one of a
// zero-copy device, which carries xdp_zc_max_segs, one without it, and
// malformed ones.
func TestXDPDeviceReply(t *testing.T) {
	u32 := func(v uint32) []byte { b := make([]byte, 4); binary.NativeEndian.PutUint32(b, v); return b }
	u64 := func(v uint64) []byte { b := make([]byte, 8); binary.NativeEndian.PutUint64(b, v); return b }
	// reply frames attrs as the kernel does: nlmsghdr, genlmsghdr, then
	// the attributes; parsed the way genlRequest parses.
	reply := func(attrs ...[]byte) (map[uint16][]byte, error) {
		var body []byte
		body = append(body, netdevCmdDevGet, netdevFamilyMinVersion, 0, 0)
		for _, a := range attrs {
			body = append(body, a...)
		}
		msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
		binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
		binary.NativeEndian.PutUint16(msg[4:], 0x20)
		binary.NativeEndian.PutUint32(msg[8:], 1)
		msg = append(msg, body...)
		msgs, err := syscall.ParseNetlinkMessage(msg)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("crafted message: %d messages, %v", len(msgs), err)
		}
		return parseAttrs(msgs[0].Data[4:])
	}
	zc := XDPBasic | XDPRedirect | XDPNdoXmit | XDPXSKZeroCopy
	for _, tc := range []struct {
		name  string
		attrs [][]byte
		want  XDPDevice
		bad   bool
	}{
		{"virtio-net zero copy", [][]byte{nlAttr(netdevAttrIfindex, u32(2)), nlAttr(netdevAttrXDPFeatures, u64(uint64(zc))), nlAttr(netdevAttrXDPZCMaxSegs, u32(1))}, XDPDevice{Features: zc, ZCMaxSegs: 1}, false},
		{"multi-buffer zero copy", [][]byte{nlAttr(netdevAttrIfindex, u32(3)), nlAttr(netdevAttrXDPFeatures, u64(uint64(zc|XDPRxSG))), nlAttr(netdevAttrXDPZCMaxSegs, u32(17))}, XDPDevice{Features: zc | XDPRxSG, ZCMaxSegs: 17}, false},
		{"no zero copy", [][]byte{nlAttr(netdevAttrIfindex, u32(4)), nlAttr(netdevAttrXDPFeatures, u64(uint64(XDPBasic)))}, XDPDevice{Features: XDPBasic}, false},
		{"no features", [][]byte{nlAttr(netdevAttrIfindex, u32(4))}, XDPDevice{}, true},
		{"short segs", [][]byte{nlAttr(netdevAttrXDPFeatures, u64(uint64(zc))), nlAttr(netdevAttrXDPZCMaxSegs, []byte{1, 0})}, XDPDevice{}, true},
	} {
		attrs, err := reply(tc.attrs...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		d, err := xdpDeviceFromAttrs(attrs)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted as %+v", tc.name, d)
			}
			continue
		}
		if err != nil || d != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, d, err, tc.want)
		}
	}
}
