package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// daemonConfig is the daemon's configuration: the -config file (JSON, the
// keys below) and the flags, which override it.
type daemonConfig struct {
	Interface   string     `json:"interface"`
	Socket      string     `json:"socket"`       // default /run/ndkxdp/<interface>.sock
	SocketGroup string     `json:"socket_group"` // group owning the socket (mode 0660); default root's
	Queues      queueCount `json:"queues"`       // "all" (every RX queue) or a count, 2 or "2"
	XDPMode     string     `json:"xdp_mode"`     // auto, driver or generic
	Polling     string     `json:"polling"`      // adaptive or busy
	Spin        string     `json:"spin"`         // adaptive: how long an idle engine spins before it sleeps; default 20us
	LogFormat   string     `json:"log_format"`   // text or json
	LogLevel    string     `json:"log_level"`    // debug, info, warn or error
	PinRoot     string     `json:"pin_root"`     // bpffs directory; default /sys/fs/bpf/ndkxdp
	ZeroCopy    string     `json:"zero_copy"`    // preferred, required or off
	BusyPoll    string     `json:"busy_poll"`    // SO_BUSY_POLL per poll with SO_PREFER_BUSY_POLL, e.g. "50us"; "" or "0" off
	EngineCPUs  string     `json:"engine_cpus"`  // CPUs for the engines' threads, as taskset -c lists them ("2,3", "2-5"); "" unpinned
	Metrics     string     `json:"metrics"`      // Prometheus /metrics address; "" (default) serves none, ":PORT" loopback
	// MetricsQPs bounds the QPs with series of their own (default 64); the
	// rest are summed under qpn="other".
	MetricsQPs int `json:"metrics_qp_series"`
	// AllowUsers and AllowGroups, names or numeric ids, admit only those
	// users' processes and those of members of those groups, beyond the
	// socket's mode (root is always admitted).
	AllowUsers  []string `json:"allow_users"`
	AllowGroups []string `json:"allow_groups"`
	// Quotas bounds what clients take, per session and per user
	// (daemon.Quotas; a key left out keeps its default).
	Quotas daemon.Quotas `json:"quotas"`
	// TrafficClass is the adapter's DSCP, ECN, VLAN priority and
	// congestion control (trafficclass.go).
	TrafficClass *trafficClassConfig `json:"traffic_class"`
}

func defaultDaemonConfig() daemonConfig {
	return daemonConfig{Queues: "all", XDPMode: "auto", Polling: "adaptive", LogFormat: "text", LogLevel: "info", ZeroCopy: "preferred"}
}

// jsonKind names a Go kind as JSON does.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "string"
	case "bool":
		return "boolean (true or false)"
	}
	return "number"
}

// queueCount is the config's queues: "all", or a count written as a
// number or a string.
type queueCount string

func (q *queueCount) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*q = queueCount(strconv.Itoa(n))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`queues: want "all" or a count, got %s`, b)
	}
	*q = queueCount(s)
	return nil
}

// loadDaemonConfig reads path over c; unknown keys are an error, so that a
// misspelt key is not silently ignored.
func loadDaemonConfig(path string, c *daemonConfig) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return cmdline.Usagef("config %s: key %s: want a %s, got a %s", path, te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return cmdline.Usagef("config %s: %v", path, err)
	}
	return nil
}

func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("daemon", "usage: ndkxdp daemon -dev IF [-socket PATH] [-config FILE] [flags]\n\n"+
		"Serves the ndkxdp adapter on IF to local applications (ndk.Dial) until SIGINT or SIGTERM.\n"+
		"In a network namespace, start it with `nsenter --net=/var/run/netns/NS`, not `ip netns exec`.", stderr)
	cfgPath := fs.String("config", "", "JSON configuration file (keys: interface, socket, socket_group, queues, xdp_mode, polling, spin, log_format, log_level, pin_root, zero_copy, busy_poll, engine_cpus, metrics, metrics_qp_series, allow_users, allow_groups, quotas, traffic_class); flags override it")
	var set daemonConfig
	fs.StringVar(&set.Interface, "dev", "", "interface to serve (required, here or in the config)")
	fs.StringVar(&set.Socket, "socket", "", "unix socket clients dial (default /run/ndkxdp/IF.sock)")
	fs.StringVar(&set.SocketGroup, "group", "", "group that owns the socket (mode 0660)")
	fs.StringVar((*string)(&set.Queues), "queues", "", `receive queues to bind: "all" (default) or a count`)
	fs.StringVar(&set.XDPMode, "xdp-mode", "", "XDP attach mode: auto (default), driver or generic")
	fs.StringVar(&set.Polling, "polling", "", "engine polling: adaptive (default; auto is adaptive here) or busy")
	fs.StringVar(&set.Spin, "spin", "", "adaptive polling: how long an idle engine spins before it sleeps, at least (default 20µs; it spins up to 200µs while work keeps coming)")
	fs.StringVar(&set.LogFormat, "log-format", "", "log format: text (default) or json")
	fs.StringVar(&set.LogLevel, "log-level", "", "log level: debug, info (default), warn or error")
	fs.StringVar(&set.PinRoot, "pin-root", "", "bpffs directory for the pinned attachment (default /sys/fs/bpf/ndkxdp)")
	fs.StringVar(&set.ZeroCopy, "zero-copy", "", "AF_XDP bind mode: preferred (default: zero-copy where the driver has it), required or off")
	fs.StringVar(&set.BusyPoll, "busy-poll", "", "SO_BUSY_POLL per poll with SO_PREFER_BUSY_POLL (e.g. 50us; default off)")
	fs.StringVar(&set.EngineCPUs, "engine-cpus", "", `pin the engines' threads to these CPUs, as taskset -c lists them ("2,3" or "2-5"): queue i's engine on the i-th, round-robin (default: unpinned)`)
	fs.StringVar(&set.Metrics, "metrics", "", `serve Prometheus /metrics on this address (off by default; ":9464" is loopback port 9464)`)
	fs.IntVar(&set.MetricsQPs, "metrics-qps", 0, `QPs with metric series of their own (default 64); the rest are summed under qpn="other"`)
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	c := defaultDaemonConfig()
	if *cfgPath != "" {
		if err := loadDaemonConfig(*cfgPath, &c); err != nil {
			return err
		}
	}
	overlay(&c, set)
	opts, gid, logger, err := c.resolve(stderr)
	if err != nil {
		return cmdline.BadUsage(err)
	}
	if err := cmdline.RequireCaps(cmdline.ToolCaps); err != nil {
		return err
	}
	if opts.Queues == 0 {
		if opts.Queues, err = cmdline.RxQueues(c.Interface); err != nil {
			return err
		}
	} else if err := cmdline.CheckQueues(c.Interface, opts.Queues); err != nil {
		return err
	}
	return serveDaemon(ctx, c, opts, gid, logger)
}

// overlay puts the flags that were given over the configuration.
func overlay(c *daemonConfig, set daemonConfig) {
	for _, f := range []struct {
		dst *string
		v   string
	}{
		{&c.Interface, set.Interface}, {&c.Socket, set.Socket}, {&c.SocketGroup, set.SocketGroup},
		{(*string)(&c.Queues), string(set.Queues)}, {&c.XDPMode, set.XDPMode}, {&c.Polling, set.Polling},
		{&c.Spin, set.Spin},
		{&c.LogFormat, set.LogFormat}, {&c.LogLevel, set.LogLevel}, {&c.PinRoot, set.PinRoot},
		{&c.ZeroCopy, set.ZeroCopy}, {&c.BusyPoll, set.BusyPoll}, {&c.EngineCPUs, set.EngineCPUs},
		{&c.Metrics, set.Metrics},
	} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if set.MetricsQPs != 0 {
		c.MetricsQPs = set.MetricsQPs
	}
}

// resolve checks every setting before anything touches the system.
func (c *daemonConfig) resolve(stderr io.Writer) (ndk.Options, int, *slog.Logger, error) {
	var opts ndk.Options
	if c.Interface == "" {
		return opts, 0, nil, errors.New("daemon: -dev (or interface in the config) is required")
	}
	if c.Socket == "" {
		c.Socket = filepath.Join("/run/ndkxdp", c.Interface+".sock")
	}
	o, err := cmdline.AdapterOptions(c.XDPMode, c.Polling)
	if err != nil {
		return opts, 0, nil, err
	}
	if o.Polling == ndk.PollProgress {
		// The consumers are the clients, in other processes: they cannot
		// run the daemon's engines' turns.
		return opts, 0, nil, errors.New("daemon: -polling progress needs the consumers in the engine's process; the daemon's clients are not (use adaptive or busy)")
	}
	if o.Polling == ndk.PollAuto {
		// Auto's other choice, progress, is not the daemon's to make.
		o.Polling = ndk.PollAdaptive
	}
	opts = o
	if c.Spin != "" {
		d, err := time.ParseDuration(c.Spin)
		if err == nil {
			err = checkSpin(d, opts.Polling == ndk.PollBusy)
		}
		if err != nil {
			return opts, 0, nil, fmt.Errorf("daemon: spin %q: %v", c.Spin, err)
		}
		opts.SpinTime = d
	}
	opts.Pin, opts.PinRoot = true, c.PinRoot
	if opts.ZeroCopy, err = cmdline.ZeroCopyMode(c.ZeroCopy); err != nil {
		return opts, 0, nil, err
	}
	if opts.BusyPoll, err = cmdline.BusyPoll(c.BusyPoll); err != nil {
		return opts, 0, nil, err
	}
	if opts.EngineCPUs, err = cmdline.CPUList(c.EngineCPUs); err != nil {
		return opts, 0, nil, fmt.Errorf("daemon: engine_cpus %v", err)
	}
	if err := c.TrafficClass.apply(&opts); err != nil {
		return opts, 0, nil, err
	}
	if c.Queues != "all" {
		n, err := strconv.Atoi(string(c.Queues))
		if err != nil || n < 1 || n > 64 {
			return opts, 0, nil, fmt.Errorf("daemon: queues %q: want all or 1-64", c.Queues)
		}
		opts.Queues = n
	}
	gid := -1
	if c.SocketGroup != "" {
		g, err := user.LookupGroup(c.SocketGroup)
		if err != nil {
			return opts, 0, nil, fmt.Errorf("daemon: socket group: %w", err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return opts, 0, nil, fmt.Errorf("daemon: log level %q: want debug, info, warn or error", c.LogLevel)
	}
	ho := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch c.LogFormat {
	case "text":
		h = slog.NewTextHandler(stderr, ho)
	case "json":
		h = slog.NewJSONHandler(stderr, ho)
	default:
		return opts, 0, nil, fmt.Errorf("daemon: log format %q: want text or json", c.LogFormat)
	}
	return opts, gid, slog.New(h), nil
}

func serveDaemon(ctx context.Context, c daemonConfig, opts ndk.Options, gid int, log *slog.Logger) error {
	allow, err := c.allowList()
	if err != nil {
		return err
	}
	// Everything that could find another daemon's things, or the
	// operator's, is checked before anything is changed: the interface's
	// claim, where the pins go, the socket's path.
	claim, err := claimInterface(c.Interface, c.Socket)
	if err != nil {
		return err
	}
	defer claim.Close()
	lo := loader.Options{PinRoot: c.PinRoot}
	if err := loader.CheckPinRoot(loader.PinDir(c.Interface, lo)); err != nil {
		return fmt.Errorf("daemon: pins for %s: %w", c.Interface, err)
	}
	ln, err := daemon.Listen(c.Socket, 0o660, gid)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	cleared, err := loader.ClearStale(lo)
	for _, dir := range cleared {
		log.Warn("cleared the pins of an interface that no longer exists (a daemon killed before its interface or namespace was deleted)", "pins", dir)
	}
	if err != nil {
		log.Warn("stale pins not cleared", "err", err)
	}
	if moved, err := loader.AdoptLegacyPins(c.Interface, lo); moved {
		log.Info("took over the pins of an earlier ndkxdp at their per-namespace place", "pins", loader.PinDir(c.Interface, lo))
	} else if err != nil {
		log.Warn("earlier pins not taken over", "err", err)
	}
	// A version whose program has other maps cannot be driven: its pins
	// go, which detaches its program, and this version attaches its own.
	if cleared, err := loader.ClearIncompatible(c.Interface, lo); cleared {
		log.Warn("removed the pins of another ndkxdp version's program, which this one cannot take over; attaching this version's", "pins", loader.PinDir(c.Interface, lo))
	} else if err != nil {
		log.Warn("pins of another ndkxdp version not removed", "err", err)
	}
	a, err := ndk.Open(c.Interface, opts)
	if err != nil {
		ln.Close()
		return fmt.Errorf("daemon: %w", err)
	}
	var mln net.Listener
	if c.Metrics != "" {
		if mln, err = net.Listen("tcp", daemon.MetricsAddress(c.Metrics)); err != nil {
			ln.Close()
			a.Close()
			return fmt.Errorf("daemon: metrics: %w", err)
		}
	}
	dcfg := daemon.Config{Logger: log, Interface: c.Interface, Version: versionString(), Allow: allow, Quotas: c.Quotas}
	if mln != nil {
		dcfg.MetricsAddr = mln.Addr().String
	}
	srv := daemon.New(a, dcfg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	mctx, stopMetrics := context.WithCancel(context.Background())
	metricsDone := make(chan struct{})
	go func() {
		defer close(metricsDone)
		if mln == nil {
			return
		}
		log.Info("serving metrics", "address", mln.Addr().String())
		if err := srv.ServeMetrics(mctx, mln, c.MetricsQPs); err != nil {
			log.Error("metrics stopped", "err", err)
		}
	}()
	log.Info("serving", "interface", c.Interface, "socket", c.Socket, "pins", loader.PinDir(c.Interface, lo), "queues", opts.Queues,
		"address", a.LocalAddress(), "path_mtu", a.PathMTU(), "polling", c.Polling, "pid", os.Getpid())
	select {
	case <-ctx.Done():
		log.Info("stopping: disconnecting every client's connections", "clients", srv.Clients())
	case err = <-served:
		log.Error("accept failed; stopping", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		log.Warn("clients did not end in 10 s", "err", serr)
	}
	stopMetrics()
	<-metricsDone
	a.Close()
	log.Info("stopped: detached and unpinned", "interface", c.Interface)
	return err
}

// allowList resolves allow_users and allow_groups to ids.
func (c *daemonConfig) allowList() (daemon.Allow, error) {
	var a daemon.Allow
	for _, name := range c.AllowUsers {
		id := name
		if _, err := strconv.ParseUint(name, 10, 32); err != nil {
			u, err := user.Lookup(name)
			if err != nil {
				return a, fmt.Errorf("daemon: allow_users: %w", err)
			}
			id = u.Uid
		}
		n, _ := strconv.ParseUint(id, 10, 32)
		a.UIDs = append(a.UIDs, uint32(n))
	}
	for _, name := range c.AllowGroups {
		id := name
		if _, err := strconv.ParseUint(name, 10, 32); err != nil {
			g, err := user.LookupGroup(name)
			if err != nil {
				return a, fmt.Errorf("daemon: allow_groups: %w", err)
			}
			id = g.Gid
		}
		n, _ := strconv.ParseUint(id, 10, 32)
		a.GIDs = append(a.GIDs, uint32(n))
	}
	return a, nil
}
