package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/bpf"
)

// DefaultPinRoot is where Pin puts <netns>/<ifname>/{link,prog,xsks,qp_owner,counters,local_cfg,local_addrs}.
const DefaultPinRoot = "/sys/fs/bpf/ndkxdp"

// bpffsMount is the conventional bpffs mount point; Pin mounts it if needed.
const bpffsMount = "/sys/fs/bpf"

const (
	pinLink = "link"
	pinProg = "prog"
)

// pinnedMaps are the map names as pinned; they match bpf/steer.c.
var pinnedMaps = []string{bpf.SteerMapXsks, bpf.SteerMapQpOwner, bpf.SteerMapCounters, bpf.SteerMapLocalCfg, bpf.SteerMapLocalAddrs}

func (p *Program) maps() []*ebpf.Map {
	return []*ebpf.Map{p.xsks, p.qpOwner, p.counters, p.localCfg, p.localAddrs}
}

// PinDir returns the directory Pin uses for ifname under opts.PinRoot:
// <PinRoot>/<netns>/<ifname>, where <netns> names the calling thread's
// network namespace (NetnsDir). Every container has an eth0, and one
// bpffs may serve them all: the namespace in the path keeps two
// namespaces' interfaces of one name from ever meeting.
func PinDir(ifname string, opts Options) string {
	o := opts.withDefaults()
	return filepath.Join(o.PinRoot, NetnsDir(), ifname)
}

// NetnsDir names the calling thread's network namespace as PinDir does:
// "netns-" and the namespace's inode number, as `ls -iL
// /proc/self/ns/net` shows it ("netns-unknown" where it cannot be read).
func NetnsDir() string {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "netns-unknown"
	}
	return fmt.Sprintf("netns-%d", st.Ino)
}

// Pin pins the link, program and maps under <PinRoot>/<ifname>, mounting
// bpffs at /sys/fs/bpf first if PinRoot lies there and nothing is mounted.
// While pinned, Close leaves the program attached; OpenPinned takes it over.
func (x *XDP) Pin() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pinDir != "" {
		return nil
	}
	dir := x.dir()
	if err := preparePinDir(dir); err != nil {
		return fmt.Errorf("loader: pin xdp for %s: %w", x.ifname, err)
	}
	// Maps and program first, link last: a directory with a link pin is
	// complete, whatever else failed on the way.
	for i, m := range x.maps() {
		if err := m.Pin(filepath.Join(dir, pinnedMaps[i])); err != nil {
			return x.unpinAfter(fmt.Errorf("loader: pin xdp for %s: pin map %s: %w", x.ifname, pinnedMaps[i], err))
		}
	}
	if err := x.prog.Pin(filepath.Join(dir, pinProg)); err != nil {
		return x.unpinAfter(fmt.Errorf("loader: pin xdp for %s: pin program: %w", x.ifname, err))
	}
	if err := x.link.Pin(filepath.Join(dir, pinLink)); err != nil {
		return x.unpinAfter(fmt.Errorf("loader: pin xdp for %s: pin link: %w", x.ifname, err))
	}
	x.pinDir = dir
	return nil
}

// unpinAfter undoes a partial Pin and returns err with anything that went
// wrong undoing it.
func (x *XDP) unpinAfter(err error) error {
	return errors.Join(err, x.unpin(x.dir()))
}

// dir is PinDir of the interface's network namespace, whichever thread
// asks.
func (x *XDP) dir() string {
	return filepath.Join(x.opts.withDefaults().PinRoot, x.netns, x.ifname)
}

// Unpin removes the pins. The program stays attached until the last handle
// to it is closed.
func (x *XDP) Unpin() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pinDir == "" {
		return nil
	}
	if err := x.unpin(x.pinDir); err != nil {
		return fmt.Errorf("loader: unpin xdp for %s: %w", x.ifname, err)
	}
	x.pinDir = ""
	return nil
}

func (x *XDP) unpin(dir string) error {
	errs := []error{x.link.Unpin(), x.prog.Unpin()}
	for _, m := range x.maps() {
		errs = append(errs, m.Unpin())
	}
	// Only an empty directory goes; anything else in it is not ours.
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	_ = os.Remove(filepath.Dir(dir)) // the namespace's, once it holds no interface's
	return errors.Join(errs...)
}

// ClearStale removes, under opts.PinRoot, every pinned attachment whose
// interface no longer exists (the kernel detached its link: ifindex 0),
// in any network namespace: a daemon killed with SIGKILL whose
// interface or namespace was then deleted leaves such pins, and they
// would block the next daemon for that name. It returns the directories
// it removed. A directory without a link pin is left alone: a daemon may
// be pinning into it now (the link is pinned last).
func ClearStale(opts Options) ([]string, error) {
	o := opts.withDefaults()
	var dirs []string
	for _, pattern := range []string{"*/*", "*"} {
		m, err := filepath.Glob(filepath.Join(o.PinRoot, pattern, pinLink))
		if err != nil {
			return nil, err
		}
		for _, l := range m {
			dirs = append(dirs, filepath.Dir(l))
		}
	}
	var cleared []string
	var errs []error
	for _, dir := range dirs {
		l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
		if err != nil {
			continue // removed meanwhile, or not a link: not ours to judge
		}
		info, err := l.Info()
		l.Close()
		if err != nil || info.XDP() == nil || info.XDP().Ifindex != 0 {
			continue
		}
		if err := removePins(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		cleared = append(cleared, dir)
	}
	return cleared, errors.Join(errs...)
}

// AdoptLegacyPins moves the pins an earlier ndkxdp made at
// <PinRoot>/<ifname>, before pins were per network namespace, to PinDir,
// where the link they hold is attached to ifname in the calling thread's
// namespace: the daemon then takes the attachment over as it would its
// own. Interface indexes repeat across namespaces, so the link is
// matched by the program the interface runs (program IDs are global). It
// reports whether it moved them.
func AdoptLegacyPins(ifname string, opts Options) (bool, error) {
	o := opts.withDefaults()
	legacy := filepath.Join(o.PinRoot, ifname)
	l, err := link.LoadPinnedLink(filepath.Join(legacy, pinLink), nil)
	if err != nil {
		return false, nil // none, or not a link: nothing of ours to adopt
	}
	info, err := l.Info()
	l.Close()
	if err != nil || info.XDP() == nil {
		return false, nil
	}
	nl, err := netlink.LinkByName(ifname)
	if err != nil || nl.Attrs().Xdp == nil || ebpf.ProgramID(nl.Attrs().Xdp.ProgId) != info.Program {
		return false, nil // another namespace's interface of that name
	}
	dir := PinDir(ifname, o)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return false, fmt.Errorf("loader: adopt pins at %s: %w", legacy, err)
	}
	if err := os.Rename(legacy, dir); err != nil {
		return false, fmt.Errorf("loader: adopt pins at %s: %w", legacy, err)
	}
	return true, nil
}

// ErrIncompatiblePins: the pins for an interface were left by a version of
// ndkxdp whose program has other maps than this one's, which this version
// cannot drive (OpenPinned).
var ErrIncompatiblePins = errors.New("the pins were left by another version of ndkxdp")

// ClearIncompatible removes the pins left for ifname by another version of
// ndkxdp (ErrIncompatiblePins), which detaches that version's program, and
// reports whether it did; pins this version can take over are left as
// they are. Call it only where no process uses those pins: a daemon that
// holds the interface's claim.
func ClearIncompatible(ifname string, opts Options) (bool, error) {
	x, err := OpenPinned(ifname, opts)
	if err == nil {
		return false, x.Close() // Close keeps the pins
	}
	if !errors.Is(err, ErrIncompatiblePins) {
		return false, nil // nothing pinned, or a fault OpenPinned reports again
	}
	if err := removePins(PinDir(ifname, opts.withDefaults())); err != nil {
		return false, err
	}
	return true, nil
}

// removePins removes the pins in dir, dir, and its parent once empty.
func removePins(dir string) error {
	names := append([]string{pinLink, pinProg}, pinnedMaps...)
	for _, n := range names {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("loader: clear stale pins: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("loader: clear stale pins: %w", err)
	}
	_ = os.Remove(filepath.Dir(dir))
	return nil
}

// Pinned reports whether the attachment is pinned (by Pin, or because it was
// opened with OpenPinned and not unpinned since).
func (x *XDP) Pinned() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.pinDir != ""
}

// OpenPinned takes over the attachment a previous process pinned for ifname
// under opts.PinRoot: the same link, program and maps, with their contents
// (QPs, sockets, counters). The result is pinned; call Unpin before Close to
// detach. Only opts.PinRoot and opts.Logger are used; the map sizes are
// those pinned.
func OpenPinned(ifname string, opts Options) (*XDP, error) {
	o := opts.withDefaults()
	dir := PinDir(ifname, o)
	fail := func(step string, err error) (*XDP, error) {
		return nil, fmt.Errorf("loader: open pinned xdp for %s: %s: %w", ifname, step, err)
	}
	ifindex, err := interfaceIndex(ifname)
	if err != nil {
		return fail("check interface", err)
	}
	spec, err := bpf.LoadSteer()
	if err != nil {
		return fail("load spec", err)
	}

	var closers []interface{ Close() error }
	ok := false
	defer func() {
		if !ok {
			for _, c := range closers {
				c.Close()
			}
		}
	}()

	l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
	if err != nil {
		return fail("load pinned link", err)
	}
	closers = append(closers, l)
	info, err := l.Info()
	if err != nil {
		return fail("link info", err)
	}
	xi := info.XDP()
	if xi == nil {
		return fail("check link", fmt.Errorf("%s is a %v link, not XDP", dir, info.Type))
	}
	if int(xi.Ifindex) != ifindex {
		// Ifindex 0: the interface went away and the kernel detached the
		// link; otherwise the name now belongs to another interface.
		return fail("check link", fmt.Errorf("pinned link is attached to ifindex %d, %s is ifindex %d; remove %s",
			xi.Ifindex, ifname, ifindex, dir))
	}

	prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinProg), nil)
	if err != nil {
		return fail("load pinned program", err)
	}
	closers = append(closers, prog)

	maps := make([]*ebpf.Map, len(pinnedMaps))
	for i, name := range pinnedMaps {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			return fail("load pinned map "+name, fmt.Errorf("%w: it has no %s", ErrIncompatiblePins, name))
		}
		if err != nil {
			return fail("load pinned map "+name, err)
		}
		closers = append(closers, m)
		// Capacities may differ (Options), layouts may not: a pin left by
		// an incompatible version must not be driven with this one's keys.
		ms := spec.Maps[name].Copy()
		if name != bpf.SteerMapCounters {
			ms.MaxEntries = m.MaxEntries()
		}
		if err := ms.Compatible(m); err != nil {
			return fail("check pinned map "+name, fmt.Errorf("%w: %w", ErrIncompatiblePins, err))
		}
		maps[i] = m
	}

	mode, err := attachedMode(ifindex)
	if err != nil {
		return fail("read attach mode", err)
	}
	o.MaxQueues = maps[0].MaxEntries()
	o.MaxQPs = maps[1].MaxEntries()
	o.Mode = mode
	ok = true
	return &XDP{
		Program: &Program{prog: prog, xsks: maps[0], qpOwner: maps[1], counters: maps[2], localCfg: maps[3], localAddrs: maps[4], opts: o},
		ifname:  ifname,
		ifindex: ifindex,
		netns:   NetnsDir(),
		mode:    mode,
		link:    l,
		pinDir:  dir,
	}, nil
}

// attachedMode asks the kernel how the XDP program on ifindex is attached.
func attachedMode(ifindex int) (AttachMode, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, err
	}
	xdp := l.Attrs().Xdp
	if xdp == nil || !xdp.Attached {
		return 0, fmt.Errorf("no XDP program on ifindex %d", ifindex)
	}
	switch xdp.AttachMode {
	case xdpAttachedDriver:
		return AttachDriver, nil
	case xdpAttachedSKB:
		return AttachGeneric, nil
	}
	return 0, fmt.Errorf("XDP program on ifindex %d attached in unsupported mode %d", ifindex, xdp.AttachMode)
}

// XDP_ATTACHED_* from include/uapi/linux/if_link.h.
const (
	xdpAttachedDriver = 1
	xdpAttachedSKB    = 2
)

// preparePinDir makes sure dir can hold pins: bpffs mounted at /sys/fs/bpf
// when dir is below it, and dir itself created.
func preparePinDir(dir string) error {
	if err := CheckPinRoot(dir); err != nil {
		return err
	}
	if dir == bpffsMount || strings.HasPrefix(dir, bpffsMount+"/") {
		if err := mountBPFFS(bpffsMount); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("pin directory %s is not on a bpf filesystem", dir)
	}
	return nil
}

// ErrPinsWouldVanish is CheckPinRoot's refusal: pins made here would end
// with the process.
var ErrPinsWouldVanish = errors.New("pins made here would end with this process")

// CheckPinRoot refuses a pin directory below /sys/fs/bpf where no bpffs
// is mounted there and the calling thread's mount namespace is not the
// host's (PID 1's): `ip netns exec` gives its command a mount namespace
// with a /sys of its own, and a bpffs mounted in it would end with the
// process, taking the pins that are to outlive a SIGKILL with it, out of
// sight of the next daemon and of `ndkxdp counters`.
func CheckPinRoot(dir string) error {
	if dir != bpffsMount && !strings.HasPrefix(dir, bpffsMount+"/") {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(bpffsMount, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if hostMountNS() {
		return nil // Pin mounts bpffs, as the host would at boot
	}
	return fmt.Errorf("%s is not mounted in this mount namespace, which is not the host's (`ip netns exec` gives its command a /sys of its own): %w. "+
		"Enter only the network namespace (`nsenter --net=/var/run/netns/NS ndkxdp daemon ...`), or give -pin-root a directory on a bpffs that outlives the daemon",
		bpffsMount, ErrPinsWouldVanish)
}

// hostMountNS reports whether the calling thread shares the host's mount
// namespace: PID 1's, or where that cannot be read (a sandbox), the
// parent process's, which `ip netns exec` leaves for a namespace of its
// own; where neither can be read, it assumes so. A variable for the
// tests.
var hostMountNS = func() bool {
	var self unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/mnt", &self) != nil {
		return true
	}
	for _, p := range []string{"/proc/1/ns/mnt", fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid())} {
		var o unix.Stat_t
		if unix.Stat(p, &o) == nil {
			return o.Ino == self.Ino && o.Dev == self.Dev
		}
	}
	return true
}

// mountBPFFS mounts bpffs at dir unless one is already there.
func mountBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	return nil
}
