// Package loader loads the RoCEv2 steering program from package bpf,
// attaches it to an interface, keeps its maps and reads its counters.
//
// What it does:
//
//   - Load creates the program and maps; Attach (or Program.Attach) links it
//     to an interface through a bpf_link, in driver mode or generic mode.
//     AttachAuto tries driver mode first and logs why it fell back.
//   - RegisterSocket and UnregisterSocket fill the socket map (RX queue ->
//     AF_XDP socket fd); AddQP and RemoveQP fill the steering map
//     (destination QPN -> owning queue; GSIQPN goes to the management queue).
//   - SetLocal names the adapter's unicast MAC and IP addresses: RoCEv2
//     frames addressed elsewhere are then dropped (ReasonDropWrongDstMAC,
//     ReasonDropWrongDstIP). Until it is called nothing is checked.
//   - Counters reads the per-CPU verdict counters, summed, by Reason.
//   - Pin puts link, program and maps under
//     /sys/fs/bpf/ndkxdp/netns-<inode>/<ifname> (PinDir: the interface's
//     network namespace is in the path, so every container's eth0 pins
//     apart; bpffs is mounted if needed, and refused where the mount would
//     end with the process, as under `ip netns exec`: CheckPinRoot), so
//     the attachment outlives the process; OpenPinned takes it over in the
//     next daemon, Unpin releases it, ClearStale removes pins whose
//     interface is gone. Close detaches unless pinned.
//
// What it is not: it creates no sockets (it takes fds from package afxdp or
// anyone else), knows nothing of the RoCE transport, and does not choose
// queues for QPs; the engine does.
//
// All names are resolved in the calling thread's network namespace. Errors
// start with "loader:", name the interface and the step that failed, and
// wrap the cause: errors.Is(err, ErrInterfaceNotFound), ErrQPNotFound, or
// the kernel's errno.
//
// Example, a daemon's life:
//
//	x, err := loader.OpenPinned("eth1", loader.Options{}) // take over, or
//	if errors.Is(err, fs.ErrNotExist) {
//		x, err = loader.Attach("eth1", loader.Options{Mode: loader.AttachAuto})
//	}
//	if err != nil {
//		return err
//	}
//	log.Printf("xdp on eth1 in %s mode", x.Mode())
//	x.RegisterSocket(0, xskFD)          // socket bound to eth1 queue 0
//	x.AddQP(loader.GSIQPN, 0)           // IB CM on the management queue
//	x.AddQP(0x000012, 0)                // a connected RC QP
//	x.SetLocal(mac, addr)               // drop RoCEv2 frames for other hosts
//	c, _ := x.Counters()
//	fmt.Print(c.String())
//	x.Pin()                             // keep steering across a restart
//	x.Close()
package loader
