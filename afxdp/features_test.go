package afxdp

import (
	"errors"
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
