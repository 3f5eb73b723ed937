package loader

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AttachMode selects where the kernel runs the XDP program.
type AttachMode int

const (
	// AttachAuto tries driver mode and falls back to generic mode, logging
	// why driver mode failed.
	AttachAuto AttachMode = iota
	// AttachDriver runs the program in the driver's receive path (native
	// XDP); zero-copy AF_XDP needs it.
	AttachDriver
	// AttachGeneric runs the program on the skb path; every driver supports
	// it, at a cost in speed.
	AttachGeneric
)

func (m AttachMode) String() string {
	switch m {
	case AttachAuto:
		return "auto"
	case AttachDriver:
		return "driver"
	case AttachGeneric:
		return "generic"
	}
	return fmt.Sprintf("AttachMode(%d)", int(m))
}

func (m AttachMode) flags() link.XDPAttachFlags {
	if m == AttachGeneric {
		return link.XDPGenericMode
	}
	return link.XDPDriverMode
}

// XDP is the steering program attached to one interface through a bpf_link.
// It embeds the Program, so the map methods (RegisterSocket, AddQP,
// Counters...) are available on it.
//
// Close detaches the program unless it is pinned: a pin holds its own
// reference to the link, which is how a daemon hands the attachment over to
// its successor (Pin, exit, OpenPinned). Pin, Unpin and Close may be called
// from any goroutine.
type XDP struct {
	*Program
	ifname  string
	ifindex int
	netns   string // NetnsDir of the interface's namespace, for PinDir
	mode    AttachMode
	link    link.Link

	mu     sync.Mutex
	pinDir string // non-empty while pinned
}

// Attach loads the program (Load) and attaches it to ifname, which must
// exist in the calling thread's network namespace.
func Attach(ifname string, opts Options) (*XDP, error) {
	p, err := Load(opts)
	if err != nil {
		return nil, fmt.Errorf("loader: attach xdp to %s: %w", ifname, err)
	}
	x, err := p.Attach(ifname, opts.Mode)
	if err != nil {
		p.Close()
		return nil, err
	}
	return x, nil
}

// Attach attaches the program to ifname in mode. On success the returned
// XDP owns p: close the XDP, not p.
func (p *Program) Attach(ifname string, mode AttachMode) (*XDP, error) {
	ifindex, err := interfaceIndex(ifname)
	if err != nil {
		return nil, fmt.Errorf("loader: attach xdp to %s: %w", ifname, err)
	}
	try := []AttachMode{mode}
	if mode == AttachAuto {
		try = []AttachMode{AttachDriver, AttachGeneric}
	} else if mode != AttachDriver && mode != AttachGeneric {
		return nil, fmt.Errorf("loader: attach xdp to %s: unknown mode %v", ifname, mode)
	}
	var errs []error
	for _, m := range try {
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: m.flags()})
		if err == nil {
			return &XDP{Program: p, ifname: ifname, ifindex: ifindex, netns: NetnsDir(), mode: m, link: l}, nil
		}
		err = fmt.Errorf("loader: attach xdp to %s (%s mode): %w%s", ifname, m, err, attachHint(err, ifindex))
		if mode == AttachAuto && m == AttachDriver {
			p.opts.Logger.Warn("xdp driver mode unavailable, falling back to generic mode",
				"interface", ifname, "reason", err)
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// attachHint adds what an operator can do about the common failures.
func attachHint(err error, ifindex int) string {
	switch {
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		return fmt.Sprintf(" (the interface already has an XDP program, %s: if an ndkxdp daemon serves the interface, run through it with -daemon SOCKET (default /run/ndkxdp/IF.sock); otherwise detach it: ip link set dev IF xdp off, or for a pinned bpf_link remove its pin)", attachedProgram(ifindex))
	case errors.Is(err, unix.EOPNOTSUPP):
		return " (the driver does not support this XDP mode)"
	case errors.Is(err, unix.EPERM):
		return " (needs CAP_NET_ADMIN and CAP_BPF)"
	}
	return ""
}

func interfaceIndex(ifname string) (int, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return 0, fmt.Errorf("find interface: %w", ErrInterfaceNotFound)
		}
		return 0, fmt.Errorf("find interface: %w", err)
	}
	return l.Attrs().Index, nil
}

// Interface returns the name of the interface the program is attached to.
func (x *XDP) Interface() string { return x.ifname }

// Mode returns the mode the program is attached in: AttachDriver or
// AttachGeneric, never AttachAuto.
func (x *XDP) Mode() AttachMode { return x.mode }

// Close releases this handle's references to the link, program and maps.
// If the attachment is not pinned that detaches the program from the
// interface; if it is pinned the program stays attached until Unpin and the
// last handle's Close.
func (x *XDP) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	err := x.link.Close()
	if err != nil {
		err = fmt.Errorf("loader: close xdp on %s: %w", x.ifname, err)
	}
	return errors.Join(err, x.Program.Close())
}

// attachedProgram names the XDP program attached to ifindex, as bpftool
// would show it ("id 42 name xdp_dispatcher"), for an attach that found
// the place taken.
func attachedProgram(ifindex int) string {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil || l.Attrs().Xdp.ProgId == 0 {
		return "which could not be identified"
	}
	id := l.Attrs().Xdp.ProgId
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return fmt.Sprintf("id %d", id)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil || info.Name == "" {
		return fmt.Sprintf("id %d", id)
	}
	return fmt.Sprintf("id %d name %s", id, info.Name)
}
