package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Addresses of the link between the host namespace and the VM: one /24 of
// the benchmarking range (RFC 2544) and one /64 of the IPv6 benchmarking
// range (RFC 5180), routed nowhere.
var (
	HostIPv4  = netip.MustParseAddr("198.18.1.1")
	GuestIPv4 = netip.MustParseAddr("198.18.1.2")
	HostIPv6  = netip.MustParseAddr("2001:2:0:1::1")
	GuestIPv6 = netip.MustParseAddr("2001:2:0:1::2")
)

// Prefix lengths of the link's addresses.
const (
	PrefixLen4 = 24
	PrefixLen6 = 64
)

// GuestMAC is the MAC address of the VM's NIC.
var GuestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0xc6, 0x12, 0x02}

// agentPortName names the virtio-serial port the agent listens on.
const agentPortName = "org.ndkxdp.agent"

// Config describes the peer VM to boot. The zero value boots the default
// image with a 1500-byte MTU under the accelerator DetectAccel picks.
type Config struct {
	// MTU of the link (tap and the VM's eth0); 0 means 1500. rxe uses
	// the largest IB MTU (256..4096) that fits.
	MTU int
	// IPv6 also puts GuestIPv6/HostIPv6 on the link; rxe then has a RoCE
	// v2 GID for it too.
	IPv6 bool
	// Image to boot; nil means EnsureImage with the default ImageConfig.
	Image *Image
	// Accel forces an accelerator; empty means DetectAccel. A KVM boot that
	// fails falls back to TCG when Accel is empty.
	Accel Accel
	// MemoryMB of guest RAM; 0 means 768 (the initramfs unpacks into RAM).
	MemoryMB int
	// CPUs of the guest; 0 means 2.
	CPUs int
	// BootTimeout bounds the boot up to rxe0's GID; 0 means 3 minutes
	// (a TCG boot takes 10-15 s on an idle machine).
	BootTimeout time.Duration
	// Queues of the VM's NIC (queue pairs of a multi-queue virtio-net
	// and of the tap); 0 means 1.
	Queues int
	// ZeroCopyNIC gives the NIC what Linux 6.12's virtio_net asks of a
	// device before it binds AF_XDP in zero-copy mode (doc.go, Zero
	// copy on virtio-net): VIRTIO_F_ACCESS_PLATFORM (iommu_platform=on:
	// the rings go through the DMA API, so the queues have a DMA
	// device), VIRTIO_F_RING_RESET (queue_reset=on: a queue is reset to
	// swap in the UMEM's buffers) and mergeable receive buffers. qemu
	// offers ACCESS_PLATFORM only on a modern-only device
	// (disable-legacy=on).
	ZeroCopyNIC bool
	// Files are added to the guest's root file system at boot, over the
	// image's (an archive of their own in front of the image's
	// initramfs), so that what changes often stays out of the image.
	Files []File
	// GuestIPv4 and GuestMAC are the guest's address and MAC; zero means
	// GuestIPv4 and GuestMAC. Guests that JoinGuests puts on one link
	// need their own.
	GuestIPv4 netip.Addr
	GuestMAC  net.HardwareAddr
}

// Guest describes the VM's end of the link and its RDMA device.
type Guest struct {
	IPv4     netip.Addr
	IPv6     netip.Addr // zero unless Config.IPv6
	MAC      net.HardwareAddr
	Device   string     // "rxe0"; empty in the daemon host image (no rxe)
	GID      rocev2.GID // RoCE v2 GID of IPv4 (IPv4-mapped)
	GIDIndex int        // its index in the GID table
}

// VM is a running Soft-RoCE peer.
type VM struct {
	Host  *Host
	Guest Guest
	// Accel is the accelerator the VM runs under, AccelReason why.
	Accel       Accel
	AccelReason string
	// BootTime is from starting qemu to the agent reporting rxe0 ready;
	// GuestUptime is the guest's own clock at that moment.
	BootTime    time.Duration
	GuestUptime time.Duration
	// BootNote says what the boot met on its way, if anything: an
	// attempt that hung and was retried.
	BootNote string
	Image    *Image

	dir     string // console log and agent socket
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	agent   *agent

	closeOnce sync.Once
	closeErr  error
}

// Boot builds (or reuses) the peer image, creates the host namespace and
// tap, starts qemu and waits until the guest agent reports rxe0 ACTIVE with
// the RoCE v2 GID of its IPv4 address (in the daemon host image, which has
// no rxe, until the agent is up). The caller must Close the VM.
func Boot(ctx context.Context, cfg Config) (*VM, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 576 || cfg.MTU > 9000 {
		return nil, fmt.Errorf("interop: MTU %d out of range 576..9000", cfg.MTU)
	}
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 768
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.MemoryMB < 256 || cfg.CPUs < 1 || cfg.CPUs > 64 {
		return nil, fmt.Errorf("interop: %d MB and %d CPUs: need at least 256 MB and 1..64 CPUs", cfg.MemoryMB, cfg.CPUs)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if !cfg.GuestIPv4.IsValid() {
		cfg.GuestIPv4 = GuestIPv4
	}
	if cfg.GuestMAC == nil {
		cfg.GuestMAC = GuestMAC
	}
	if !cfg.GuestIPv4.Is4() || !netip.PrefixFrom(HostIPv4, PrefixLen4).Masked().Contains(cfg.GuestIPv4) || cfg.GuestIPv4 == HostIPv4 || len(cfg.GuestMAC) != 6 {
		return nil, fmt.Errorf("interop: guest address %v and MAC %v: want an IPv4 address of %v other than the host's, and a MAC", cfg.GuestIPv4, cfg.GuestMAC, netip.PrefixFrom(HostIPv4, PrefixLen4).Masked())
	}
	if cfg.Queues < 1 || cfg.Queues > 16 {
		return nil, fmt.Errorf("interop: %d NIC queues: want 1..16", cfg.Queues)
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 3 * time.Minute
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, fmt.Errorf("interop: the peer VM needs qemu-system-x86_64 (package qemu-system-x86; scripts/setup-debian.sh installs it): %w", err)
	}
	img := cfg.Image
	if img == nil {
		var err error
		if img, err = EnsureImage(ctx, ImageConfig{}); err != nil {
			return nil, err
		}
	}
	accel, reason := cfg.Accel, "Config.Accel"
	// Only a choice nobody forced may fall back.
	auto := accel == "" && os.Getenv("NDKXDP_INTEROP_ACCEL") == ""
	if accel == "" {
		accel, reason = detectAccel()
		if auto && accel == AccelKVM {
			if v, ok := kvmVerdict(img); ok {
				accel, reason = AccelTCG, v
			}
		}
	}
	var vm *VM
	var err error
	if auto && accel == AccelKVM {
		// A KVM that cannot run the kernel either makes qemu exit at once
		// or hangs the guest: the attempt gets a short deadline.
		kcfg := cfg
		kcfg.BootTimeout = min(cfg.BootTimeout, kvmAttemptTimeout)
		vm, err = boot(ctx, kcfg, img, accel)
		if err != nil && ctx.Err() == nil {
			why := fmt.Sprintf("a KVM boot failed on this machine (%v); using TCG", firstLine(err))
			rememberKVMFailure(img, why)
			accel, reason = AccelTCG, why
			vm, err = bootRetrying(ctx, cfg, img, accel)
		}
	} else {
		vm, err = bootRetrying(ctx, cfg, img, accel)
	}
	if err != nil {
		return nil, err
	}
	vm.AccelReason = reason
	return vm, nil
}

// hangTimeout cuts a boot attempt that hung. Very rarely a TCG guest
// stops taking timer interrupts early in its boot and never gets further
// (the console shows only RCU stalls: "rcu_preempt kthread timer wakeup
// didn't happen"); a CI run met one. A healthy TCG boot takes 10-15 s,
// 30 s on a loaded machine, so an attempt not ready after hangTimeout is
// killed and the VM booted afresh, once, with the whole Config.BootTimeout.
const hangTimeout = 90 * time.Second

// errNotReady is a boot attempt whose guest never reported rxe0 ready.
var errNotReady = errors.New("rxe0 not ready")

// errPanicked is a boot attempt whose guest kernel panicked. Under TCG on
// a loaded machine the 6.1 kernel's early IO-APIC timer check can fail
// ("IO-APIC + timer doesn't work!", a CI run met one): the command line
// turns that check off (no_timer_check), and any other early panic gets
// the same one retry as a hung boot.
var errPanicked = errors.New("guest kernel panicked")

// bootAttempt is boot; tests replace it to exercise the retry.
var bootAttempt = boot

func bootRetrying(ctx context.Context, cfg Config, img *Image, accel Accel) (*VM, error) {
	first := cfg
	first.BootTimeout = min(cfg.BootTimeout, hangTimeout)
	vm, err := bootAttempt(ctx, first, img, accel)
	retry := errors.Is(err, errPanicked) || errors.Is(err, errNotReady) && first.BootTimeout != cfg.BootTimeout
	if err == nil || !retry || ctx.Err() != nil {
		return vm, err
	}
	again, err2 := bootAttempt(ctx, cfg, img, accel)
	if err2 != nil {
		return nil, errors.Join(err, err2)
	}
	again.BootNote = fmt.Sprintf("a first attempt hung and was cut after %v (%s)", hangTimeout, firstLine(err))
	if errors.Is(err, errPanicked) {
		again.BootNote = fmt.Sprintf("a first attempt's kernel panicked (%s)", firstLine(err))
	}
	return again, nil
}

// kvmAttemptTimeout bounds an automatic KVM boot: a working KVM boots the
// peer in a few seconds.
const kvmAttemptTimeout = 60 * time.Second

// detectAccel is DetectAccel; tests replace it to exercise the fallback.
var detectAccel = DetectAccel

// The KVM verdict is cached beside the images: a machine whose KVM cannot
// boot the kernel does not pay for a failed KVM attempt on every boot.
func kvmVerdictPath(img *Image) string { return filepath.Join(filepath.Dir(img.Dir), "kvm-unusable") }

func kvmVerdict(img *Image) (string, bool) {
	b, err := os.ReadFile(kvmVerdictPath(img))
	if err != nil {
		return "", false
	}
	return "cached: " + strings.TrimSpace(string(b)) + " (delete " + kvmVerdictPath(img) + " to retry KVM)", true
}

func rememberKVMFailure(img *Image, why string) {
	_ = os.WriteFile(kvmVerdictPath(img), []byte(why+"\n"), 0o644)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func boot(ctx context.Context, cfg Config, img *Image, accel Accel) (vm *VM, err error) {
	vm = &VM{
		Accel:  accel,
		Image:  img,
		exited: make(chan struct{}),
		Guest:  Guest{IPv4: cfg.GuestIPv4, MAC: cfg.GuestMAC, Device: "rxe0"},
	}
	if cfg.IPv6 {
		vm.Guest.IPv6 = GuestIPv6
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, vm.Close())
			vm = nil
		}
	}()
	if vm.dir, err = os.MkdirTemp("", "ndkxdp-vm-"); err != nil {
		return vm, fmt.Errorf("interop: %w", err)
	}
	if vm.Host, err = newHost(&cfg); err != nil {
		return vm, fmt.Errorf("interop: %w", err)
	}
	sock := filepath.Join(vm.dir, "agent.sock")
	initrd := img.Initrd
	if len(cfg.Files) > 0 {
		initrd = filepath.Join(vm.dir, "initrd")
		if err := writeInitrd(initrd, img.Initrd, cfg.Files); err != nil {
			return vm, fmt.Errorf("interop: %w", err)
		}
	}
	args := qemuArgs(cfg, img, accel, vm.Host, vm.dir, sock, initrd)
	qlog, err := os.Create(filepath.Join(vm.dir, "qemu.log"))
	if err != nil {
		return vm, fmt.Errorf("interop: %w", err)
	}
	defer qlog.Close()
	// ip netns exec execs qemu in place, so the PID is qemu's.
	vm.cmd = exec.Command("ip", args...)
	vm.cmd.Stdout, vm.cmd.Stderr = qlog, qlog
	// If the test binary dies, so does qemu.
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := vm.cmd.Start(); err != nil {
		return vm, fmt.Errorf("interop: start qemu: %w", err)
	}
	go func() {
		vm.waitErr = vm.cmd.Wait()
		close(vm.exited)
	}()

	bctx, cancel := context.WithTimeout(ctx, cfg.BootTimeout)
	defer cancel()
	conn, err := vm.dialAgent(bctx, sock)
	if err != nil {
		return vm, err
	}
	vm.agent = newAgent(conn)
	var r readyMsg
	select {
	case r = <-vm.agent.ready:
	case <-vm.agent.closed:
		return vm, vm.bootError(vm.panicked(fmt.Errorf("agent channel closed during boot: %w", vm.agent.err)))
	case <-vm.exited:
		return vm, vm.bootError(vm.panicked(fmt.Errorf("qemu exited during boot: %v", vm.waitErr)))
	case <-bctx.Done():
		return vm, vm.bootError(fmt.Errorf("%w after %v: %w", errNotReady, time.Since(start).Round(time.Millisecond), context.Cause(bctx)))
	}
	vm.BootTime = time.Since(start)
	vm.GuestUptime = time.Duration(r.uptime * float64(time.Second))
	if img.Systemd {
		// No rxe: the agent reports "none".
		vm.Guest.Device = ""
		return vm, nil
	}
	gid, err := parseSysfsGID(r.gid)
	if err != nil {
		return vm, vm.bootError(err)
	}
	if want := rocev2.GIDFromAddr(vm.Guest.IPv4); gid != want {
		return vm, vm.bootError(fmt.Errorf("guest reported GID %v, want %v", gid, want))
	}
	vm.Guest.GID, vm.Guest.GIDIndex = gid, r.gidIndex
	return vm, nil
}

// qemuArgs is the command line, after "ip", that runs the peer's qemu in
// host's namespace with its console log in dir, its agent socket at sock
// and initrd as its initramfs.
func qemuArgs(cfg Config, img *Image, accel Accel, host *Host, dir, sock, initrd string) []string {
	appendArgs := []string{
		"console=ttyS0", "quiet", "panic=-1", "no_timer_check",
		"ndkxdp.ip=" + cfg.GuestIPv4.String() + "/" + strconv.Itoa(PrefixLen4),
		"ndkxdp.mtu=" + strconv.Itoa(cfg.MTU),
		"ndkxdp.port=" + agentPortName,
	}
	if !img.Systemd {
		// virtio-net without TX NAPI orphans each skb when it transmits
		// it. With TX NAPI an skb lives until the TX completion, and rxe's
		// requester stops at 64 skbs in flight per QP until their
		// destructors wake it (rxe_skb_tx_dtor): under TCG a large
		// ib_send_bw from the guest then stalled for good now and then,
		// its QP mid-message with every packet acknowledged. The daemon
		// host keeps TX NAPI: virtio_net transmits an AF_XDP socket's
		// zero-copy frames from its TX NAPI, and without it they never
		// left (kernel 7.3, REPs sent and never on the wire).
		appendArgs = append(appendArgs, "virtio_net.napi_tx=0")
	}
	if cfg.IPv6 {
		appendArgs = append(appendArgs, "ndkxdp.ip6="+GuestIPv6.String()+"/"+strconv.Itoa(PrefixLen6))
	}
	if img.Systemd {
		// eth0 keeps its kernel name (the unit's instance and the
		// agent name it), and carries no rxe.
		appendArgs = append(appendArgs, "net.ifnames=0", "ndkxdp.rxe=0")
	}
	netdev := "tap,id=net0,ifname=" + host.Tap + ",script=no,downscript=no"
	nic := fmt.Sprintf("virtio-net-pci,netdev=net0,mac=%s,csum=off,guest_csum=off,host_mtu=%d,romfile=", cfg.GuestMAC, cfg.MTU)
	if cfg.ZeroCopyNIC {
		nic += ",disable-legacy=on,iommu_platform=on,queue_reset=on,mrg_rxbuf=on"
	}
	if cfg.Queues > 1 {
		// A vector per queue of each direction, one for the config
		// and one for the control queue.
		netdev += ",queues=" + strconv.Itoa(cfg.Queues)
		nic += fmt.Sprintf(",mq=on,vectors=%d", 2*cfg.Queues+2)
	}
	cpu := "max"
	if accel == AccelKVM {
		cpu = "host"
	}
	args := []string{
		"netns", "exec", host.NS, "qemu-system-x86_64",
		"-name", "ndkxdp-peer",
		"-accel", string(accel),
		"-cpu", cpu,
		"-m", strconv.Itoa(cfg.MemoryMB) + "M",
		"-smp", strconv.Itoa(cfg.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "file:" + filepath.Join(dir, "console.log"),
		"-kernel", img.Kernel,
		"-initrd", initrd,
		"-append", strings.Join(appendArgs, " "),
		"-netdev", netdev,
		// No checksum or segmentation offload: every frame on the tap is
		// a complete frame as a NIC would put it on the wire.
		"-device", nic,
		// qemu's own view of the NIC's virtqueues (VirtioQueues).
		"-qmp", "unix:" + filepath.Join(dir, qmpSocket) + ",server=on,wait=off",
		// The command channel: virtio-serial, not the test network.
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-device", "virtio-serial-pci",
		"-device", "virtserialport,chardev=agent,name=" + agentPortName,
	}
	return args
}

// dialAgent connects to qemu's agent socket, which appears shortly after
// qemu starts.
func (vm *VM) dialAgent(ctx context.Context, sock string) (net.Conn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", sock)
		if err == nil {
			return conn, nil
		}
		select {
		case <-vm.exited:
			return nil, vm.bootError(fmt.Errorf("qemu exited before opening the agent socket: %v", vm.waitErr))
		case <-ctx.Done():
			return nil, vm.bootError(fmt.Errorf("connect to the agent socket: %w (last error: %v)", context.Cause(ctx), err))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// bootError adds what the guest and qemu printed to a boot failure.
// panicked marks err as errPanicked when the guest's console shows a
// kernel panic.
func (vm *VM) panicked(err error) error {
	b, _ := os.ReadFile(filepath.Join(vm.dir, "console.log"))
	if bytes.Contains(b, []byte("Kernel panic")) {
		return fmt.Errorf("%w: %w", errPanicked, err)
	}
	return err
}

func (vm *VM) bootError(err error) error {
	qemuSaid := ""
	if q := strings.TrimSpace(tail(filepath.Join(vm.dir, "qemu.log"), 1)); q != "" {
		qemuSaid = " [qemu: " + q + "]"
	}
	return fmt.Errorf("interop: boot the peer VM (%s): %w%s\nqemu log:\n%s\nconsole:\n%s",
		vm.Accel, err, qemuSaid, tail(filepath.Join(vm.dir, "qemu.log"), 5), tail(filepath.Join(vm.dir, "console.log"), 25))
}

// parseSysfsGID parses a GID as sysfs prints it
// ("0000:0000:0000:0000:0000:ffff:c612:0102").
func parseSysfsGID(s string) (rocev2.GID, error) {
	var g rocev2.GID
	parts := strings.Split(s, ":")
	if len(parts) != 8 {
		return g, fmt.Errorf("malformed GID %q", s)
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 16, 16)
		if err != nil || len(p) != 4 {
			return g, fmt.Errorf("malformed GID %q", s)
		}
		g[2*i], g[2*i+1] = byte(v>>8), byte(v)
	}
	return g, nil
}

// Console returns what the guest has printed on its serial console.
func (vm *VM) Console() string {
	b, _ := os.ReadFile(filepath.Join(vm.dir, "console.log"))
	return string(b)
}

// Run runs cmd with bash -c in the guest and returns its output and exit
// code. If ctx ends first the command is killed and err says so. Commands
// may run concurrently.
func (vm *VM) Run(ctx context.Context, cmd string) (stdout, stderr string, exitCode int, err error) {
	p, err := vm.Start(ctx, cmd)
	if err != nil {
		return "", "", -1, err
	}
	stdout, stderr, exitCode, err = p.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		_ = p.Kill()
	}
	return stdout, stderr, exitCode, err
}

// Start starts cmd with bash -c in the guest and returns at once; the
// command runs until it exits or is killed (GuestProcess.Kill, or the VM
// closing). ctx is only for sending the request.
func (vm *VM) Start(ctx context.Context, cmd string) (*GuestProcess, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if vm.agent == nil {
		return nil, ErrVMGone
	}
	p, err := vm.agent.start(cmd)
	if err != nil {
		return nil, fmt.Errorf("guest command %q: %w", cmd, err)
	}
	return p, nil
}

// SetLoss makes the guest drop percent of the frames it sends (netem on
// eth0's egress, so ARP too); 0 removes the qdisc.
func (vm *VM) SetLoss(ctx context.Context, percent float64) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("interop: loss %v%% out of range 0..100", percent)
	}
	cmd := "tc qdisc replace dev eth0 root netem loss " + strconv.FormatFloat(percent, 'f', -1, 64) + "%"
	if percent == 0 {
		cmd = "if tc qdisc show dev eth0 | grep -q netem; then tc qdisc del dev eth0 root; fi"
	}
	_, stderr, code, err := vm.Run(ctx, cmd)
	if err != nil {
		return fmt.Errorf("interop: set loss %v%%: %w", percent, err)
	}
	if code != 0 {
		return fmt.Errorf("interop: set loss %v%%: %q exited %d: %s", percent, cmd, code, strings.TrimSpace(stderr))
	}
	return nil
}

// SetCEMarks has netem in the guest mark percent of the ECN-capable
// frames the guest sends Congestion Experienced (and drop that share of
// the others, as netem's ecn does); SetLoss(ctx, 0) removes it.
func (vm *VM) SetCEMarks(ctx context.Context, percent float64) error {
	if percent <= 0 || percent > 100 {
		return fmt.Errorf("interop: CE marks %v%% out of range (0, 100]", percent)
	}
	cmd := "tc qdisc replace dev eth0 root netem loss " + strconv.FormatFloat(percent, 'f', -1, 64) + "% ecn"
	_, stderr, code, err := vm.Run(ctx, cmd)
	if err != nil {
		return fmt.Errorf("interop: set CE marks %v%%: %w", percent, err)
	}
	if code != 0 {
		return fmt.Errorf("interop: set CE marks %v%%: %q exited %d: %s", percent, cmd, code, strings.TrimSpace(stderr))
	}
	return nil
}

// WaitListen waits until an rdma_cm ID in the guest listens on port (as
// `rdma resource show cm_id` reports). A client started after it returns
// finds the server listening, so no REQ races the server's rdma_listen
// and is rejected with reason 8 (invalid service ID).
func (vm *VM) WaitListen(ctx context.Context, port uint16) error {
	cmd := fmt.Sprintf("rdma resource show cm_id | grep -E 'state LISTEN .*src-addr [^ ]*:%d( |$)'", port)
	for {
		_, _, code, err := vm.Run(ctx, cmd)
		if err != nil {
			return fmt.Errorf("interop: wait for an rdma_cm listener on port %d: %w", port, err)
		}
		if code == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interop: no rdma_cm listener on port %d in the guest: %w", port, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close powers the guest off, kills qemu if it does not exit within a few
// seconds (only the process Boot started), and deletes the namespace, the
// tap and the VM's temporary files. It is safe to call more than once.
func (vm *VM) Close() error {
	vm.closeOnce.Do(func() {
		var errs []error
		if vm.cmd != nil && vm.cmd.Process != nil {
			if vm.agent != nil {
				_ = vm.agent.send("Q 0")
			}
			select {
			case <-vm.exited:
			case <-time.After(5 * time.Second):
				_ = vm.cmd.Process.Kill()
				select {
				case <-vm.exited:
				case <-time.After(10 * time.Second):
					errs = append(errs, fmt.Errorf("qemu (pid %d) did not exit after SIGKILL", vm.cmd.Process.Pid))
				}
			}
		}
		if vm.agent != nil {
			_ = vm.agent.close()
		}
		if vm.Host != nil {
			if err := vm.Host.close(); err != nil {
				errs = append(errs, err)
			}
		}
		if vm.dir != "" {
			if err := os.RemoveAll(vm.dir); err != nil {
				errs = append(errs, err)
			}
		}
		vm.closeErr = errors.Join(errs...)
	})
	return vm.closeErr
}
