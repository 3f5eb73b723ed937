// Package interop runs Linux Soft-RoCE (rdma_rxe) as an independent RoCEv2
// peer for ndkxdp: a small Debian 12 VM under qemu whose NIC is a tap
// device in a network namespace of its own, so ndkxdp code on the host side
// of the tap talks RoCEv2 to the Linux kernel's implementation, with
// rdma-core, librdmacm, perftest and the verbs utilities on the far side.
//
// The image (EnsureImage) is built with mmdebstrap from Debian 12 packages
// only, through the host's own apt sources: the stock kernel (which has
// rdma_rxe and sch_netem as modules), kmod, rdma-core, ibverbs-providers,
// ibverbs-utils, rdmacm-utils, perftest, iproute2 and iputils-ping. It is
// packed as a kernel plus a zstd initramfs holding only the modules the
// peer loads, and cached in a directory named by the hash of its inputs
// (package list, suite, guest init, guest tools, module list, exclusions,
// apt sources):
// /var/cache/ndkxdp/interop/<hash>/, or under $NDKXDP_INTEROP_CACHE. A
// change of any input builds a new image; concurrent builders serialize on
// a lock and publish with an atomic rename.
//
// Boot starts qemu inside the namespace: KVM when the CPU has VMX or SVM
// and /dev/kvm works, TCG otherwise (VM.Accel says which; a TCG boot to a
// ready rxe0 takes 10-20 s). The guest's init brings up eth0 and rxe0 and
// waits for the RoCE v2 GID of its IPv4 address. Commands reach the guest
// over virtio-serial, never over the test link, so a capture on the tap
// holds test traffic only (IPv6 is off unless asked for, for the same
// reason). Addresses come from 198.18.1.0/24 (and 2001:2:0:1::/64); the
// namespace has no default route and nothing in it is connected to a real
// interface. Close kills the qemu process Boot started and deletes the
// namespace.
//
// It is not a test of ndkxdp by itself: it provides the peer, the
// channel to drive it and a capture of the link. Ordering matters with
// rdma_cm: start the guest's server, WaitListen on its port, then connect;
// a REQ that arrives before rdma_listen is rejected with reason 8 (invalid
// service ID). perftest -R opens a second connection right after the
// first, so a host-side client must retry a REQ rejected with reason 8,
// a bounded number of times, when the guest serves.
//
// Example:
//
//	vm, err := interop.Boot(ctx, interop.Config{MTU: 9000})
//	if err != nil {
//		return err
//	}
//	defer vm.Close()
//	srv, _ := vm.Start(ctx, "ib_send_bw -R -d rxe0 -n 1000")
//	_ = vm.WaitListen(ctx, 18515)
//	err = vm.Host.Do(func() error {
//		// inside the namespace: attach ndkxdp to vm.Host.Tap and
//		// connect to vm.Guest.IPv4 port 18515
//		return nil
//	})
//	out, _, code, err := srv.Wait(ctx)
//	_ = vm.SetLoss(ctx, 5) // netem on the guest's egress
//
// The image also holds ndkxdp-sendinv (guest/sendinv.c, SendInvPath), a
// small librdmacm client that sends IBV_WR_SEND_WITH_INV, which neither
// perftest nor rping posts. It is compiled at image build in a second
// mmdebstrap root with gcc and the rdma-core headers (toolPackages), so
// it links against the image's own libraries and the compiler stays out
// of the image; that root adds about a minute to a build. Its source and
// toolPackages are inputs of the image hash. So is the second tool built
// there, ndkxdp-imm (guest/imm.c, ImmPath): an rdma_cm client or server
// that sends and checks IBV_WR_SEND_WITH_IMM and
// IBV_WR_RDMA_WRITE_WITH_IMM, both ways on one connection, since
// Debian 12's perftest (4.5-0.17) has neither --write_with_imm (perftest
// 24.01) nor --send_with_imm (26.01).
//
// A second image, the daemon host (ImageConfig.Systemd, systemd.go), runs
// ndkxdp's daemon as operators run it. It is built from Debian 13
// ("trixie") rather than 12 because its kernel (6.12) is the newer
// virtio_net: systemd is PID 1 (/init execs it; there is no
// /etc/initrd-release, so it runs the initramfs as the system), udev names
// and loads devices (net.ifnames=0 keeps eth0), and the agent is a service
// (guest/ndkxdp-agent.service running guest/init, which skips PID 1's
// mounts and, with ndkxdp.rxe=0, rxe). Config.Queues gives the VM a
// multi-queue virtio-net NIC on a multi-queue tap; Config.Files adds files
// at boot as an uncompressed archive in front of the image's, so that the
// daemon under test (a static binary, CGO_ENABLED=0) stays out of the
// cached image. The image builds in about two minutes (90-125 s measured,
// 28 MB initramfs) and boots to the agent in 35-50 s under TCG.
// TestDaemonUnderSystemdOnVirtio installs the daemon as the README says,
// starts ndkxdp@eth0, reads info, status and stats, moves verified rping
// and write_bw traffic between an ndkxdp adapter on the tap (two queues)
// and clients of the daemon, checks that both queues' engines served
// frames, then stops the unit with a connection open and checks the
// DREQ, the exit status and the journal. What the kernel said there:
//
//   - XDP in the driver works with two queue pairs on two vCPUs, but
//     virtio_net wants an XDP TX queue per CPU on top of the two queue
//     pairs in use, and the NIC has no more: "XDP request 4 queues but max
//     is 2. XDP_TX and XDP_REDIRECT will operate in a slower locked tx
//     mode." (dmesg). The daemon's program redirects into AF_XDP
//     sockets and its engines send through them, so no XDP TX queue is
//     used.
//   - AF_XDP binds in copy mode: 6.12's virtio_net refuses a bind with
//     XDP_ZEROCOPY with EOPNOTSUPP (ndkxdp's -zero-copy required says
//     "operation not supported (ENOTSUP)"), with or without
//     iommu_platform=on; so does Debian 12's 6.1 (the peer image's kernel,
//     tried by hand), which says the same of XDP's TX queues.
//   - The daemon did not start under the unit until it asked netlink for
//     NETLINK_ROUTE only: its route handle also opened NETLINK_XFRM and
//     NETLINK_NETFILTER, and this kernel, which has neither xfrm_user nor
//     nfnetlink, refused them with EPROTONOSUPPORT. The unit's sandbox
//     itself refused nothing the daemon needs.
//
// The tests (ndkxdp against rxe: rping, perftest, perftest's -a and -D,
// perftest --use-srq against an SRQ server, SEND with Invalidate of a window and a
// fast-registered MR, SEND and WRITE with immediate, ib_write_bw
// --write_with_imm where the peer's perftest has it, access errors, loss;
// and TestInteropUD: UD queue pairs through rdma_cm's SIDR, rdma-core's
// udaddy and perftest's ib_send_bw and ib_send_lat -c UD, each side as
// server and as client)
// record every frame ndkxdp moves into a pcap in the test's temporary
// directory, or in $NDKXDP_INTEROP_PCAP_DIR to keep it (one file per MTU
// test, e.g. TestInteropMTU9000.pcap).
//
// The tests need root, qemu-system-x86_64, mmdebstrap and zstd
// (scripts/setup-debian.sh installs them); the first run builds the image.
//
// Files: image.go the image's inputs, hash, cache and lock (EnsureImage);
// build.go building it with mmdebstrap; initramfs.go the module closure
// and the initramfs (cpio.go its writer); guest/init the guest's PID 1;
// guest/sendinv.c the SEND with Invalidate client; guest/imm.c the
// immediate-data client and server; systemd.go the daemon
// host image and the files added at boot;
// accel.go KVM or TCG; netns.go the host side (namespace, tap); vm.go
// booting qemu and the VM's commands; agent.go the command channel;
// capture.go the capture on the tap.
package interop
