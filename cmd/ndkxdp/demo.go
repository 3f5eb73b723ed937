package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/baseline"
	"github.com/ndkxdp/ndkxdp/test/harness"
	"github.com/ndkxdp/ndkxdp/test/rawxdp"
)

type demoFlags struct {
	dev      string
	mtu      int
	messages int
	duration time.Duration
	mode     string
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f demoFlags
	fs.StringVar(&f.dev, "dev", "", "run on this real NIC instead of the embedded veth pair (not supported yet)")
	fs.IntVar(&f.mtu, "mtu", 1500, "MTU of the embedded veth pair (1500 gives path MTU 1024, 9000 gives 4096)")
	fs.IntVar(&f.messages, "messages", 1000, "RoCEv2 frames to exchange and verify")
	fs.DurationVar(&f.duration, "duration", 500*time.Millisecond, "length of the rate measurement")
	fs.StringVar(&f.mode, "xdp-mode", "auto", "XDP attach mode: auto, driver or generic")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.dev != "" {
		return fmt.Errorf("-dev %s: running on a real NIC needs a remote peer and is not supported yet; omit -dev to use the embedded veth pair", f.dev)
	}
	if f.messages < 1 || f.messages > 1_000_000 || f.duration <= 0 || f.duration > time.Minute {
		return fmt.Errorf("-messages must be in [1, 1000000] and -duration in (0, 1m]")
	}
	mode, err := parseMode(f.mode)
	if err != nil {
		return err
	}
	if err := requireRoot(); err != nil {
		return err
	}

	start := time.Now()
	p, err := harness.NewPair(harness.Config{MTU: f.mtu})
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintf(stdout, "hosts: %s %s %s <-> %s %s %s (veth, MTU %d)\n",
		p.A.Name, p.A.IPv4, p.A.MAC, p.B.Name, p.B.IPv4, p.B.MAC, f.mtu)

	const qpn = 0x000011
	a, err := rawxdp.Open(p.A, rawxdp.Config{Attach: mode, MultiBuffer: f.mtu > 4000})
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := rawxdp.Open(p.B, rawxdp.Config{Attach: mode, MultiBuffer: f.mtu > 4000})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.XDP.AddQP(qpn, 0); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "xdp: steering program attached in %s mode on both hosts; AF_XDP sockets in %s mode; QP 0x%06x steered to queue 0 on %s\n",
		a.XDP.Mode(), a.Sock.Mode(), qpn, p.B.Name)

	pmtu, _ := rocev2.MTUForNetdev(f.mtu)
	size := pmtu.Bytes()
	fmt.Fprintf(stdout, "exchange: %d RC SEND_ONLY frames of %d payload bytes (path MTU %d) from A to B...\n", f.messages, size, pmtu.Bytes())
	var pkt rocev2.Packet
	for i := range f.messages {
		if err := ctx.Err(); err != nil {
			return err
		}
		payload := bytes.Repeat([]byte{byte(i)}, size)
		h := rocev2.Headers{
			Eth: rocev2.EthernetFields{Dst: rocev2.MAC(p.B.MAC), Src: rocev2.MAC(p.A.MAC)},
			IP:  rocev2.NewIPFields(p.A.IPv4, p.B.IPv4),
			UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, qpn, qpn)},
			BTH: rocev2.BTHFields{Opcode: rocev2.RCSendOnly, PKey: rocev2.DefaultPKey, DestQP: qpn, AckReq: true, PSN: rocev2.PSN(i)},
		}
		frame := make([]byte, h.FrameLen(size))
		if _, err := h.Encode(frame, payload); err != nil {
			return err
		}
		if err := a.Send(frame); err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		got, _, err := b.Receive(2 * time.Second)
		if err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		if err := rocev2.Parse(got, &pkt); err != nil {
			return fmt.Errorf("frame %d does not parse on arrival: %w", i, err)
		}
		if !bytes.Equal(pkt.Payload, payload) || pkt.BTH.PSN != rocev2.PSN(i) {
			return fmt.Errorf("frame %d arrived altered", i)
		}
	}
	fmt.Fprintf(stdout, "exchange: %d frames arrived intact, ICRC verified\n", f.messages)

	c, err := b.XDP.Counters()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "counters on %s:\n%s", p.B.Name, c.String())
	a.Close()
	b.Close()

	fmt.Fprintf(stdout, "measuring raw AF_XDP rate (64 B frames, %v) and ping-pong (64 B, busy polling)...\n", f.duration)
	rate, err := baseline.XDPRate(p, 64, f.duration)
	if err != nil {
		return err
	}
	rtt, err := baseline.XDPPingPong(p, 64, 10000, 5*f.duration)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report: %.0f messages/s, %.2f Gbit/s, RTT %s\n", rate.PerSecond(), rate.Gbps(), rtt)
	fmt.Fprintf(stdout, "done in %v; namespaces removed\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func parseMode(s string) (loader.AttachMode, error) {
	switch s {
	case "auto":
		return loader.AttachAuto, nil
	case "driver":
		return loader.AttachDriver, nil
	case "generic":
		return loader.AttachGeneric, nil
	}
	return 0, fmt.Errorf("unknown -xdp-mode %q (want auto, driver or generic)", s)
}
