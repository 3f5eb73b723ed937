package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/mckey"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const mckeyUsage = `usage: ndkxdp mckey -m GROUP [-s] [-b ADDR] [-c connections] [-C count] [-S size] [-o] [-l] [-capture FILE] -dev IFNAME
       ndkxdp mckey -m GROUP [-s] [-c connections] [-C count] [-S size] [-o] [-l] -daemon SOCKET`

const mckeySynopsis = mckeyUsage + `

librdmacm's mckey over ndkxdp's UD multicast on IFNAME, or through the
ndkxdp daemon serving at SOCKET: each of -c UD QPs joins the multicast
group GROUP (IPv4 or IPv6; the interface joins it in the kernel, IGMP or
MLD); after mckey's 3-second pause, -s sends -C datagrams of -S bytes to
the group from each QP, and without -s each QP waits for -C of them.
Start the receivers first. Either side may be Linux mckey.`

type mckeyFlags struct {
	group, mapped, bind, dev, capture, daemon string
	psNumber                                  string
	cfg                                       mckey.Config
	timeout                                   time.Duration
}

func parseMckey(args []string, stdout, stderr io.Writer) (mckeyFlags, error) {
	fs := cmdline.NewFlagSet("mckey", mckeySynopsis, stderr)
	var f mckeyFlags
	fs.StringVar(&f.group, "m", "", "the multicast group's address")
	fs.StringVar(&f.mapped, "M", "", "an unmapped multicast address (AF_IB, InfiniBand's: refused)")
	fs.BoolVar(&f.cfg.Sender, "s", false, "send to the group (without it: receive)")
	fs.StringVar(&f.bind, "b", "", "the local address to join from (one of the interface's)")
	fs.IntVar(&f.cfg.Connections, "c", 1, fmt.Sprintf("connections: UD QPs, each joining the group (1 to %d)", mckey.MaxConnections))
	fs.IntVar(&f.cfg.Count, "C", mckey.DefaultCount, "datagrams each QP sends or waits for")
	fs.IntVar(&f.cfg.Size, "S", mckey.DefaultSize, "datagram size in bytes (at most the path MTU)")
	fs.StringVar(&f.psNumber, "p", "0x111", "rdma_cm port space: 0x111, RDMA_PS_UDP (0x2, IPoIB, is InfiniBand's)")
	fs.BoolVar(&f.cfg.SendOnly, "o", false, "join as a send-only full member: no membership on the wire, no datagrams taken")
	fs.BoolVar(&f.cfg.NoLoopback, "l", false, "join without multicast loopback: a QP does not take its own datagrams (the adapter's other members do)")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	if ps, err := strconv.ParseUint(f.psNumber, 0, 32); err != nil || ps != 0x111 {
		return f, cmdline.Usagef("-p %s: ndkxdp serves rdma_cm's UDP port space only (0x111)", f.psNumber)
	}
	switch {
	case f.mapped != "":
		return f, cmdline.Usagef("-M %s: an unmapped (AF_IB) multicast address is InfiniBand's; give RoCE's IP group with -m", f.mapped)
	case f.group == "":
		return f, cmdline.Usagef("-m: the multicast group is needed")
	case f.cfg.Connections < 1 || f.cfg.Connections > mckey.MaxConnections:
		return f, cmdline.Usagef("-c %d: 1 to %d connections", f.cfg.Connections, mckey.MaxConnections)
	case f.cfg.Count < 1 || f.cfg.Size < 1:
		return f, cmdline.Usagef("-C %d -S %d: both must be positive", f.cfg.Count, f.cfg.Size)
	case f.cfg.SendOnly && !f.cfg.Sender:
		return f, cmdline.Usagef("-o without -s: a send-only member receives nothing")
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, mckeyUsage)
}

// runMckey is librdmacm's mckey on an ndkxdp adapter.
func runMckey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseMckey(args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	group, err := cmdline.LookupAddr(ctx, "-m", f.group)
	if err != nil {
		return err
	}
	if !group.Unmap().IsMulticast() {
		return cmdline.Usagef("-m %s: %v is not a multicast address", f.group, group)
	}
	f.cfg.Group = group
	_, bind, err := lookupEnds(ctx, "", f.bind, f.dev)
	if err != nil {
		return err
	}
	var opts ndk.Options
	if f.bind != "" && f.dev != "" {
		opts.Address = bind
	}
	if f.dev != "" && f.bind == "" && group.Unmap().Is6() {
		if opts.Address, err = interfaceIPv6(f.dev); err != nil {
			return err
		}
	}
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, opts)
	if err != nil {
		return err
	}
	defer closeDevice()
	a := d.Adapter
	if f.daemon != "" && f.bind != "" && bind != a.LocalAddress() {
		return cmdline.Usagef("-b %v: cannot assign requested address (EADDRNOTAVAIL): the daemon at %s serves %v", bind, f.daemon, a.LocalAddress())
	}
	if a.LocalAddress().Is4() != group.Unmap().Is4() {
		return cmdline.Usagef("-m %v: the adapter sends from %v, another family than the group's", group, a.LocalAddress())
	}
	st, err := mckey.Run(ctx, a, f.cfg, stdout)
	fmt.Fprintln(stdout, "test complete")
	status := 0
	if err != nil {
		status = 1
		fmt.Fprintln(stderr, err)
	}
	fmt.Fprintf(stdout, "return status %d\n", status)
	fmt.Fprintf(stderr, "mckey: %d datagrams sent, %d received\n", st.Sent, st.Received)
	return err
}

// interfaceIPv6 is dev's first global IPv6 address, which an IPv6 group's
// datagrams are sent from.
func interfaceIPv6(dev string) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return netip.Addr{}, cmdline.Usagef("-dev %s: %v", dev, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of %s: %w", dev, err)
	}
	for _, x := range addrs {
		if n, ok := x.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Is6() && !ip.Is4In6() && ip.IsGlobalUnicast() {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, cmdline.Usagef("-dev %s: no global IPv6 address to send to an IPv6 group from", dev)
}
