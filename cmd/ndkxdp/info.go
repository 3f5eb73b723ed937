package main

import (
	"context"
	"fmt"
	"io"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOps("info", "Describes the device a daemon serves, as ibv_devinfo: interface, driver, XDP and AF_XDP modes, queues, MTUs, GIDs, limits, versions.", args, stdout, stderr, true)
	if err != nil {
		return err
	}
	var x daemon.Info
	if err := o.query(ctx, daemon.OpAdminInfo, &x); err != nil {
		if o.dev == "" {
			return fmt.Errorf("info: %w", err)
		}
		// No daemon on IF: what the kernel says of it, as ibv_devinfo
		// does without any service running.
		d, derr := daemon.Describe(o.dev)
		if derr != nil {
			return fmt.Errorf("info: %w; %w", err, derr)
		}
		x = *d
		fmt.Fprintf(stderr, "ndkxdp info: no daemon serves %s; showing what the kernel knows of it\n", o.dev)
	}
	if o.json {
		return printJSON(stdout, x)
	}
	w := stdout
	fmt.Fprintf(w, "hca_id:\tndkxdp_%s\n", x.Interface)
	line := func(k string, v any) { fmt.Fprintf(w, "\t%-24s%v\n", k+":", v) }
	line("interface", fmt.Sprintf("%s (ifindex %d)", x.Interface, x.Ifindex))
	line("driver", fmt.Sprintf("%s %s", x.Driver, x.DriverVersion))
	if x.Firmware != "" {
		line("fw_ver", x.Firmware)
	}
	if x.BusInfo != "" {
		line("bus_info", x.BusInfo)
	}
	line("node_guid / mac", x.MAC)
	line("transport", "RoCE v2 (UDP 4791) over AF_XDP")
	line("xdp_mode", x.XDPMode)
	if x.XDPFeatures != "" {
		line("xdp_features", x.XDPFeatures)
	}
	if x.XDPZCMaxSegs != 0 {
		line("xdp_zc_max_segs", x.XDPZCMaxSegs)
	}
	line("queues", len(x.Queues))
	for _, q := range x.Queues {
		mb := ""
		if q.MultiBuffer {
			mb = ", multi-buffer"
		}
		if len(q.EngineCPUs) > 0 {
			mb += fmt.Sprintf(", engine on CPU %s", cmdline.FormatCPUList(q.EngineCPUs))
		}
		if q.BindReason != "" {
			mb += ": " + q.BindReason
		}
		line(fmt.Sprintf("  queue %d", q.Queue), q.Bind+mb)
	}
	line("mtu", x.MTU)
	line("max_mtu", x.MaxPathMTU)
	line("active_mtu", x.ActivePathMTU)
	line("address", x.Address)
	for _, g := range x.GIDs {
		line(fmt.Sprintf("GID[%d]", g.Index), fmt.Sprintf("%s, %s (%s)", g.GID, g.Type, g.Address))
	}
	if x.MaxMcastGroups > 0 {
		line("max_mcast_grp", x.MaxMcastGroups)
	}
	for _, g := range x.MulticastGroups {
		line("mcast_group", fmt.Sprintf("%s (%d QPs)", g.Group, g.Members))
	}
	v := x.Versions
	if x.Limits == nil {
		line("versions", fmt.Sprintf("protocol %d, %s, kernel %s", v.Protocol, v.Go, v.Kernel))
		return nil
	}
	l := x.Limits
	line("ndk_version", l.Version)
	line("max_mr_size", l.MaxRegistrationSize)
	line("max_sge (send/recv/read)", fmt.Sprintf("%d/%d/%d", l.MaxInitiatorRequestSGE, l.MaxReceiveRequestSGE, l.MaxReadRequestSGE))
	line("max_transfer", l.MaxTransferLength)
	line("max_inline_data", l.MaxInlineDataSize)
	line("max_qp_rd_atom (in/out)", fmt.Sprintf("%d/%d", l.MaxInboundReadLimit, l.MaxOutboundReadLimit))
	line("max_qp_wr (recv/send)", fmt.Sprintf("%d/%d", l.MaxReceiveQueueDepth, l.MaxInitiatorQueueDepth))
	line("max_srq_wr", l.MaxSRQDepth)
	line("max_cqe", l.MaxCQDepth)
	line("private_data (req/rep)", fmt.Sprintf("%d/%d", l.MaxCallerData, l.MaxCalleeData))
	line("versions", fmt.Sprintf("ndkxdp %s, protocol %d, %s, kernel %s", v.Daemon, v.Protocol, v.Go, v.Kernel))
	return nil
}
