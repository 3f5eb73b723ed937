package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// XDPFeatures are a device's XDP features as the kernel's netdev generic
// netlink family reports them (NETDEV_A_DEV_XDP_FEATURES, the
// NETDEV_XDP_ACT_* bits of include/uapi/linux/netdev.h).
type XDPFeatures uint64

// The feature bits.
const (
	XDPBasic       XDPFeatures = 1 << 0 // XDP_PASS, DROP, ABORTED, TX
	XDPRedirect    XDPFeatures = 1 << 1 // XDP_REDIRECT from the device
	XDPNdoXmit     XDPFeatures = 1 << 2 // a redirect target
	XDPXSKZeroCopy XDPFeatures = 1 << 3 // AF_XDP zero-copy
	XDPHWOffload   XDPFeatures = 1 << 4
	XDPRxSG        XDPFeatures = 1 << 5 // multi-buffer receive
	XDPNdoXmitSG   XDPFeatures = 1 << 6 // multi-buffer redirect target
)

var xdpFeatureNames = []string{"basic", "redirect", "ndo-xmit", "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg"}

// ZeroCopy reports whether the kernel lets an AF_XDP socket bind the
// device in zero-copy mode: xp_assign_dev (net/xdp/xsk_buff_pool.c)
// refuses XDP_ZEROCOPY with EOPNOTSUPP, before the driver is asked,
// unless the device has basic, redirect and xsk-zerocopy.
func (f XDPFeatures) ZeroCopy() bool {
	const zc = XDPBasic | XDPRedirect | XDPXSKZeroCopy
	return f&zc == zc
}

// String lists the features by the kernel's names ("basic redirect
// rx-sg").
func (f XDPFeatures) String() string {
	var names []string
	for i, n := range xdpFeatureNames {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := f &^ (1<<len(xdpFeatureNames) - 1); rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint64(rest)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// The netdev family's command and attributes (include/uapi/linux/netdev.h).
const (
	netdevCmdDevGet        = 1
	netdevAttrIfindex      = 1
	netdevAttrXDPFeatures  = 3
	netdevAttrXDPZCMaxSegs = 4 // NETDEV_A_DEV_XDP_ZC_MAX_SEGS, u32
	genlFamilyNetdev       = "netdev"
	netdevFamilyMinVersion = 1
)

// ErrNoNetdevFamily is returned by QueryXDPFeatures on kernels without the
// netdev generic netlink family (before 6.3), which cannot say.
var ErrNoNetdevFamily = errors.New("the kernel has no netdev generic netlink family (Linux 6.3 or newer reports XDP features)")

// XDPDevice is what the netdev family says of one device.
type XDPDevice struct {
	Features XDPFeatures
	// ZCMaxSegs is the device's xdp_zc_max_segs: how many buffers one
	// zero-copy frame may span. The kernel reports it only for a device
	// with xsk-zerocopy (0 here otherwise, veth's case). Where it is 1,
	// xp_assign_dev (net/xdp/xsk_buff_pool.c) refuses XDP_USE_SG with
	// XDP_ZEROCOPY (EOPNOTSUPP), so a zero-copy socket has no
	// multi-buffer and cannot send a UMEM-resident payload in place.
	ZCMaxSegs uint32
}

// QueryXDPFeatures asks the kernel for the XDP features of the interface
// ifindex in the calling thread's network namespace.
func QueryXDPFeatures(ifindex int) (XDPFeatures, error) {
	d, err := QueryXDPDevice(ifindex)
	return d.Features, err
}

// QueryXDPDevice asks the kernel for the XDP features and zero-copy
// segment limit of the interface ifindex in the calling thread's network
// namespace.
func QueryXDPDevice(ifindex int) (XDPDevice, error) {
	if ifindex <= 0 {
		return XDPDevice{}, fmt.Errorf("xdp features: bad ifindex %d", ifindex)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return XDPDevice{}, fmt.Errorf("xdp features: generic netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return XDPDevice{}, fmt.Errorf("xdp features: bind netlink socket: %w", err)
	}
	attrs, err := genlRequest(fd, unix.GENL_ID_CTRL, unix.CTRL_CMD_GETFAMILY, 1,
		nlAttr(unix.CTRL_ATTR_FAMILY_NAME, append([]byte(genlFamilyNetdev), 0)))
	if errors.Is(err, unix.ENOENT) {
		return XDPDevice{}, ErrNoNetdevFamily
	}
	if err != nil {
		return XDPDevice{}, fmt.Errorf("xdp features: resolve the netdev family: %w", err)
	}
	id, ok := attrs[unix.CTRL_ATTR_FAMILY_ID]
	if !ok || len(id) < 2 {
		return XDPDevice{}, fmt.Errorf("xdp features: the kernel's family reply has no family ID")
	}
	var ifi [4]byte
	binary.NativeEndian.PutUint32(ifi[:], uint32(ifindex))
	attrs, err = genlRequest(fd, binary.NativeEndian.Uint16(id), netdevCmdDevGet, netdevFamilyMinVersion, nlAttr(netdevAttrIfindex, ifi[:]))
	if err != nil {
		return XDPDevice{}, fmt.Errorf("xdp features of ifindex %d: %w", ifindex, err)
	}
	d, err := xdpDeviceFromAttrs(attrs)
	if err != nil {
		return XDPDevice{}, fmt.Errorf("xdp features of ifindex %d: %w", ifindex, err)
	}
	return d, nil
}

// xdpDeviceFromAttrs reads a NETDEV_CMD_DEV_GET reply's attributes.
func xdpDeviceFromAttrs(attrs map[uint16][]byte) (XDPDevice, error) {
	v, ok := attrs[netdevAttrXDPFeatures]
	if !ok || len(v) < 8 {
		return XDPDevice{}, errors.New("the reply carries none")
	}
	d := XDPDevice{Features: XDPFeatures(binary.NativeEndian.Uint64(v))}
	if v, ok := attrs[netdevAttrXDPZCMaxSegs]; ok {
		if len(v) < 4 {
			return XDPDevice{}, fmt.Errorf("xdp_zc_max_segs attribute of %d bytes, want 4", len(v))
		}
		d.ZCMaxSegs = binary.NativeEndian.Uint32(v)
	}
	return d, nil
}

// nlAttr encodes one netlink attribute, padded to 4 bytes.
func nlAttr(typ uint16, data []byte) []byte {
	n := unix.SizeofNlAttr + len(data)
	b := make([]byte, (n+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(n))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[unix.SizeofNlAttr:], data)
	return b
}

// genlRequest sends one generic netlink request and returns the top-level
// attributes of its reply.
func genlRequest(fd int, family uint16, cmd, version uint8, attrs ...[]byte) (map[uint16][]byte, error) {
	const seq = 1
	n := unix.SizeofNlMsghdr + 4
	for _, a := range attrs {
		n += len(a)
	}
	msg := make([]byte, unix.SizeofNlMsghdr, n)
	binary.NativeEndian.PutUint32(msg[0:], uint32(n))
	binary.NativeEndian.PutUint16(msg[4:], family)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	msg = append(msg, cmd, version, 0, 0)
	for _, a := range attrs {
		msg = append(msg, a...)
	}
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	buf := make([]byte, 16384)
	for {
		r, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:r])
		if err != nil {
			return nil, fmt.Errorf("parse reply: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case syscall.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return nil, unix.Errno(-e)
				}
				return nil, errors.New("netlink acknowledged without a reply")
			case family:
				return parseAttrs(m.Data[4:])
			}
		}
	}
}

func parseAttrs(b []byte) (map[uint16][]byte, error) {
	out := map[uint16][]byte{}
	for len(b) >= unix.SizeofNlAttr {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < unix.SizeofNlAttr || l > len(b) {
			return nil, fmt.Errorf("malformed netlink attribute (length %d of %d bytes)", l, len(b))
		}
		out[typ] = b[unix.SizeofNlAttr:l]
		b = b[min((l+3)&^3, len(b)):]
	}
	return out, nil
}
