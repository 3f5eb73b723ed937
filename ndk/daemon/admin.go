package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/counters"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Operator requests: what `ndkxdp status`, `info`, `stats`, `qp` and
// `dump` ask a running daemon. They need no hello and create nothing; a
// session that sends only these is not counted as a client. Anyone who
// can open the socket may ask (the socket's permissions and
// Config.Allow decide that): the answers name the clients' processes
// and connections, never their memory.
const (
	OpAdminStatus = proto.OpAdminStatus // reply Raw: Status
	OpAdminInfo   = proto.OpAdminInfo   // reply Raw: Info
	OpAdminStats  = proto.OpAdminStats  // reply Raw: Stats
	OpAdminQPs    = proto.OpAdminQPs    // reply Raw: []QP
	OpAdminDump   = proto.OpAdminDump   // Len: snap length; then frame events (dump.go)
)

// Status says how the daemon is doing (ndkxdp status).
type Status struct {
	Interface string    `json:"interface"`
	PID       int       `json:"pid"`
	Version   string    `json:"version"`
	Started   time.Time `json:"started"`
	Uptime    float64   `json:"uptime_seconds"`
	// Clients is the client processes connected now (sessions that said
	// hello); Served every one since the start.
	Clients int    `json:"clients"`
	Served  uint64 `json:"clients_served"`
	// Ended counts the sessions the daemon ended for what their client
	// did, by reason: protocol, ring, panic, notifications.
	Ended map[string]uint64 `json:"sessions_ended"`
	// QuotaExceeded counts the requests and connections refused over a
	// quota, by quota (quota.go); Refused the peers the allow list
	// refused.
	QuotaExceeded map[string]uint64 `json:"quota_exceeded"`
	Refused       uint64            `json:"refused"`
	// BrokenRings counts the client QPs flushed and SRQs failed because
	// the client wrote into their rings what no correct client writes.
	BrokenRings uint64 `json:"broken_rings"`
	// QPs is the daemon's QPs, Connections those of them connected.
	QPs         int             `json:"qps"`
	Connections int             `json:"connections"`
	Sessions    []SessionStatus `json:"sessions"`
	Metrics     string          `json:"metrics,omitempty"` // the /metrics address, if served
}

// SessionStatus is one client process.
type SessionStatus struct {
	PID         int32     `json:"pid"`
	UID         uint32    `json:"uid"`
	GID         uint32    `json:"gid"`
	Command     string    `json:"comm,omitempty"`
	Since       time.Time `json:"since"`
	QPs         int       `json:"qps"`
	Connections int       `json:"connections"`
}

// Info describes the device as ibv_devinfo does (ndkxdp info).
type Info struct {
	Interface     string `json:"interface"`
	Ifindex       int    `json:"ifindex"`
	Driver        string `json:"driver,omitempty"`
	DriverVersion string `json:"driver_version,omitempty"`
	Firmware      string `json:"firmware_version,omitempty"`
	BusInfo       string `json:"bus_info,omitempty"`
	MAC           string `json:"mac"`
	MTU           int    `json:"mtu"`
	MaxPathMTU    int    `json:"max_path_mtu"`
	ActivePathMTU int    `json:"active_path_mtu"`
	Address       string `json:"address"` // the address QPs send from
	XDPMode       string `json:"xdp_mode"`
	// XDPFeatures is what the device offers XDP and AF_XDP, by the
	// kernel's names; xsk-zerocopy is what a zero-copy bind needs.
	XDPFeatures string `json:"xdp_features,omitempty"`
	// XDPZCMaxSegs is the device's xdp_zc_max_segs, how many buffers
	// one zero-copy frame may span (1: zero copy has no multi-buffer,
	// so in place only whole AllocBuffer buffers); 0 where the kernel reports none (a device
	// without xsk-zerocopy).
	XDPZCMaxSegs uint32      `json:"xdp_zc_max_segs,omitempty"`
	Queues       []QueueInfo `json:"queues"`
	GIDs         []GID       `json:"gids"`
	// MaxMcastGroups is how many IPv4 multicast groups the adapter can
	// join (the kernel's igmp_max_memberships; ibv_devinfo's
	// max_mcast_grp); MulticastGroups those its QPs joined.
	MaxMcastGroups  int              `json:"max_mcast_grp,omitempty"`
	MulticastGroups []MulticastGroup `json:"mcast_groups,omitempty"`
	// Served says whether a daemon answered; without one (Describe),
	// the queues are not bound and there are no limits.
	Served   bool             `json:"served"`
	Limits   *ndk.AdapterInfo `json:"limits,omitempty"`
	Versions Versions         `json:"versions"`
}

// MulticastGroup is a group the adapter joined, and how many QPs are its
// members.
type MulticastGroup struct {
	Group   string `json:"group"`
	Members int    `json:"members"`
}

// QueueInfo is one queue's AF_XDP socket.
type QueueInfo struct {
	Queue int    `json:"queue"`
	Bind  string `json:"bind"` // zero-copy or copy
	// BindReason says why: the kernel's refusal of the zero-copy bind
	// and what the device offers.
	BindReason  string `json:"bind_reason,omitempty"`
	MultiBuffer bool   `json:"multi_buffer"`
	// EngineCPUs are the CPUs the queue's engine is pinned to.
	EngineCPUs []int `json:"engine_cpus,omitempty"`
}

// GID is one entry of the port's GID table, as rxe builds it from the
// interface's addresses: IPv4 addresses IPv4-mapped, IPv6 as they are.
type GID struct {
	Index   int    `json:"index"`
	GID     string `json:"gid"`
	Address string `json:"address"`
	Type    string `json:"type"`
}

// Versions are the versions of each layer.
type Versions struct {
	NDK      string `json:"ndk"`
	Protocol int    `json:"protocol"`
	Daemon   string `json:"daemon"`
	Go       string `json:"go"`
	Kernel   string `json:"kernel"`
}

// Stats are the counters, as `rdma statistic` shows them (ndkxdp stats):
// the adapter's (every engine's summed), each engine's with its AF_XDP
// socket's, the steering program's by reason and verdict, the CM's and
// each QP's.
type Stats struct {
	Interface string            `json:"interface"`
	Adapter   map[string]uint64 `json:"adapter"`
	Engines   []EngineStats     `json:"engines"`
	XDP       map[string]uint64 `json:"xdp"`
	Verdicts  map[string]uint64 `json:"xdp_verdicts"`
	CM        map[string]uint64 `json:"cm"`
	// Daemon counts what the daemon refused or ended of its clients':
	// sessions_ended_REASON, quota_exceeded_QUOTA, clients_refused,
	// client_rings_broken (Status has the same, grouped).
	Daemon map[string]uint64 `json:"daemon"`
	QPs    []QP              `json:"qps"`
}

// EngineStats are one queue's engine and socket counters.
type EngineStats struct {
	Queue  int               `json:"queue"`
	Engine map[string]uint64 `json:"engine"`
	Socket SocketStats       `json:"socket"`
}

// SocketStats are an AF_XDP socket's kernel counters (XDP_STATISTICS).
type SocketStats struct {
	RxDropped     uint64 `json:"rx_dropped"`
	RxInvalid     uint64 `json:"rx_invalid_descs"`
	TxInvalid     uint64 `json:"tx_invalid_descs"`
	RxRingFull    uint64 `json:"rx_ring_full"`
	FillRingEmpty uint64 `json:"fill_ring_empty"`
	TxRingEmpty   uint64 `json:"tx_ring_empty"`
	// TxFrames counts the frames the engine queued on the socket; of
	// them, TxInPlaceFrames had a segment sent in place from registered
	// memory (ndk.AllocBuffer's pool) instead of copied into a UMEM
	// frame, TxInPlaceBytes bytes in all: on a zero-copy socket, bytes
	// that left with no copy at all.
	TxFrames        uint64 `json:"tx_frames"`
	TxInPlaceFrames uint64 `json:"tx_in_place_frames"`
	TxInPlaceBytes  uint64 `json:"tx_in_place_bytes"`
}

// QP is one QP as `rdma resource show qp` shows it (ndkxdp qp).
type QP struct {
	QPN         uint32 `json:"qpn"`
	Queue       int    `json:"queue"`
	Type        string `json:"type"` // RC, UC or UD
	State       string `json:"state"`
	PeerAddr    string `json:"peer_addr,omitempty"`
	PeerQPN     uint32 `json:"peer_qpn,omitempty"`
	PathMTU     int    `json:"path_mtu,omitempty"`
	SendPSN     uint32 `json:"sq_psn"`
	UnackedPSN  uint32 `json:"unacked_psn"`
	ExpectedPSN uint32 `json:"rq_psn"`
	Outstanding int    `json:"outstanding"`
	ReadsOut    int    `json:"reads_out"`
	// The QP's counters, each a key of its own (counters.QP's json
	// tags).
	counters.QP
	// The owning client process; PID 0 for a QP of the daemon itself.
	PID     int32  `json:"pid"`
	Command string `json:"comm,omitempty"`
}

// The operator requests' handlers: each answers with its report as JSON.

func (ss *session) adminStatus(*call, *proto.AdminStatus) (*proto.Report, error) {
	return report(ss.srv.status(), nil)
}

func (ss *session) adminInfo(*call, *proto.AdminInfo) (*proto.Report, error) {
	return report(ss.srv.info())
}

func (ss *session) adminStats(*call, *proto.AdminStats) (*proto.Report, error) {
	return report(ss.srv.stats())
}

func (ss *session) adminQPs(*call, *proto.AdminQPs) (*proto.Report, error) {
	return report(ss.srv.qps())
}

func (ss *session) adminDump(_ *call, r *proto.AdminDump) (*proto.None, error) {
	return nil, ss.dump(r)
}

func report[T any](v T, err error) (*proto.Report, error) {
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &proto.Report{Raw: raw}, nil
}

// provider is the in-process provider the daemon's adapter runs on.
func (s *Server) provider() (*inproc.Provider, error) {
	p := s.be.Provider(s.a)
	if p == nil {
		return nil, statusErr(ndk.StatusNotSupported, "the daemon's adapter has no in-process provider")
	}
	return p, nil
}

// owners maps each QPN to the session owning it.
func (s *Server) owners() map[uint32]*session {
	out := make(map[uint32]*session)
	s.mu.Lock()
	defer s.mu.Unlock()
	for ss := range s.sessions {
		ss.mu.Lock()
		for _, o := range ss.objs {
			if q, ok := o.(*sQP); ok {
				out[q.qp.QPN()] = ss
			}
		}
		ss.mu.Unlock()
	}
	return out
}

func (s *Server) status() *Status {
	st := &Status{
		Interface: s.cfg.Interface, PID: os.Getpid(), Version: s.cfg.Version,
		Started: s.started, Uptime: time.Since(s.started).Seconds(), Sessions: []SessionStatus{},
	}
	if s.cfg.MetricsAddr != nil {
		st.Metrics = s.cfg.MetricsAddr()
	}
	var qps []inproc.QP
	if p, err := s.provider(); err == nil {
		qps = p.QPs()
	}
	owner := s.owners()
	per := make(map[*session]int) // index in st.Sessions
	s.mu.Lock()
	st.Served = s.clientsServed.Load()
	st.Ended = s.ended.snapshot()
	st.QuotaExceeded = s.book.exceededCounts()
	st.Refused = s.refused.Load()
	st.BrokenRings = s.brokenRings.Load()
	for ss := range s.sessions {
		// A session is a client once it said hello: one accepted but not
		// yet read (an operator's, say) is not counted yet.
		if !ss.client.Load() {
			continue
		}
		st.Clients++
		x := SessionStatus{PID: ss.cred.Pid, UID: ss.cred.Uid, GID: ss.cred.Gid, Command: comm(ss.cred.Pid), Since: ss.start}
		per[ss] = len(st.Sessions)
		st.Sessions = append(st.Sessions, x)
	}
	s.mu.Unlock()
	for _, q := range qps {
		if q.QPN <= 1 {
			continue
		}
		st.QPs++
		conn := q.State == rc.StateConnected
		if conn {
			st.Connections++
		}
		if i, ok := per[owner[q.QPN]]; ok {
			x := &st.Sessions[i]
			x.QPs++
			if conn {
				x.Connections++
			}
		}
	}
	sort.Slice(st.Sessions, func(i, j int) bool { return st.Sessions[i].Since.Before(st.Sessions[j].Since) })
	return st
}

// comm names a process as ps does; "" if it is gone or unreadable.
func comm(pid int32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (s *Server) info() (*Info, error) {
	p, err := s.provider()
	if err != nil {
		return nil, err
	}
	l := p.Link()
	limits := s.a.Info()
	x := &Info{
		Interface: s.cfg.Interface, Ifindex: l.Ifindex, MAC: s.a.MAC().String(), MTU: l.MTU,
		MaxPathMTU: rocev2.MTU4096.Bytes(), ActivePathMTU: l.PathMTU.Bytes(),
		Address: s.a.LocalAddress().String(), XDPMode: p.XDPMode(), XDPFeatures: p.XDPFeatures(), XDPZCMaxSegs: p.XDPZCMaxSegs(),
		Served: true, Limits: &limits, GIDs: []GID{},
		Versions: Versions{NDK: limits.Version.String(), Protocol: proto.Version, Daemon: s.cfg.Version, Go: runtime.Version(), Kernel: kernelRelease()},
	}
	if ifi, err := net.InterfaceByIndex(l.Ifindex); err == nil {
		x.Interface = ifi.Name
		x.GIDs = gids(ifi)
	}
	x.Driver, x.DriverVersion, x.Firmware, x.BusInfo = driverInfo(x.Interface)
	for _, q := range p.Queues() {
		x.Queues = append(x.Queues, QueueInfo{Queue: q.Queue, Bind: q.Bind, BindReason: q.BindReason, MultiBuffer: q.MultiBuffer, EngineCPUs: q.EngineCPUs})
	}
	x.MaxMcastGroups = inproc.MaxIPv4Groups()
	groups := p.MulticastGroups()
	for g, n := range groups {
		x.MulticastGroups = append(x.MulticastGroups, MulticastGroup{Group: g.String(), Members: n})
	}
	slices.SortFunc(x.MulticastGroups, func(a, b MulticastGroup) int { return strings.Compare(a.Group, b.Group) })
	return x, nil
}

// Describe says what the kernel knows of the interface ifname, in the
// calling thread's network namespace, where no daemon serves it (ndkxdp
// info -dev IF): the queues are listed unbound, the XDP mode is that of
// whatever program is attached ("" for none), and there are no limits.
func Describe(ifname string) (*Info, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	a := l.Attrs()
	x := &Info{
		Interface: a.Name, Ifindex: a.Index, MAC: a.HardwareAddr.String(), MTU: a.MTU,
		MaxPathMTU: rocev2.MTU4096.Bytes(), GIDs: []GID{}, Queues: []QueueInfo{},
		Versions: Versions{Protocol: proto.Version, Go: runtime.Version(), Kernel: kernelRelease()},
	}
	if m, ok := rocev2.MTUForNetdev(a.MTU); ok {
		x.ActivePathMTU = m.Bytes()
	}
	if a.Xdp != nil && a.Xdp.Attached {
		x.XDPMode = map[uint32]string{1: "driver", 2: "generic", 3: "offload"}[a.Xdp.AttachMode]
		if x.XDPMode == "" {
			x.XDPMode = "attached"
		}
	}
	n, err := loader.RxQueues(a.Name)
	if err != nil {
		n = max(a.NumRxQueues, 1)
	}
	for q := range n {
		x.Queues = append(x.Queues, QueueInfo{Queue: q, Bind: "unbound"})
	}
	if ifi, err := net.InterfaceByIndex(a.Index); err == nil {
		x.GIDs = gids(ifi)
		for _, g := range x.GIDs {
			if x.Address == "" && strings.Contains(g.Address, ".") {
				x.Address = g.Address
			}
		}
	}
	x.Driver, x.DriverVersion, x.Firmware, x.BusInfo = driverInfo(a.Name)
	return x, nil
}

// gids lists the interface's addresses as RoCEv2 GIDs, in the order the
// kernel reports them.
func gids(ifi *net.Interface) []GID {
	out := []GID{}
	addrs, err := ifi.Addrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		g := netip.AddrFrom16(ip.As16()) // IPv4: ::ffff:a.b.c.d
		out = append(out, GID{Index: len(out), GID: gidString(g.As16()), Address: ip.String(), Type: "RoCE v2"})
	}
	return out
}

// gidString writes a GID as ibv_devinfo does: eight groups of four hex
// digits.
func gidString(b [16]byte) string {
	var sb strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			sb.WriteByte(':')
		}
		fmt.Fprintf(&sb, "%02x%02x", b[i], b[i+1])
	}
	return sb.String()
}

// driverInfo asks the driver (ETHTOOL_GDRVINFO, as ethtool -i).
func driverInfo(ifname string) (driver, version, fw, bus string) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	d, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname)
	if err != nil {
		return
	}
	return unix.ByteSliceToString(d.Driver[:]), unix.ByteSliceToString(d.Version[:]),
		unix.ByteSliceToString(d.Fw_version[:]), unix.ByteSliceToString(d.Bus_info[:])
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func (s *Server) stats() (*Stats, error) {
	p, err := s.provider()
	if err != nil {
		return nil, err
	}
	x := &Stats{Interface: s.cfg.Interface, XDP: map[string]uint64{}, Verdicts: map[string]uint64{}}
	engines := s.a.Stats()
	queues := p.Queues()
	var total ndk.EngineStats
	for i, e := range engines {
		total.Add(e)
		es := EngineStats{Queue: i, Engine: CounterMap(e)}
		if i < len(queues) {
			q := queues[i].Socket
			es.Socket = SocketStats{RxDropped: q.RxDropped, RxInvalid: q.RxInvalidDescs, TxInvalid: q.TxInvalidDescs,
				RxRingFull: q.RxRingFull, FillRingEmpty: q.RxFillRingEmptyDescs, TxRingEmpty: q.TxRingEmptyDescs,
				TxFrames: queues[i].Port.TxFrames, TxInPlaceFrames: queues[i].Port.TxRefFrames, TxInPlaceBytes: queues[i].Port.TxRefBytes}
		}
		x.Engines = append(x.Engines, es)
	}
	x.Adapter = CounterMap(total)
	if c, err := p.XDPCounters(); err == nil {
		for r, n := range c {
			x.XDP[strings.ToLower(loader.Reason(r).String())] = n
		}
		for _, v := range []loader.Verdict{loader.VerdictPass, loader.VerdictDrop, loader.VerdictRedirect} {
			x.Verdicts[v.String()] = c.Verdict(v)
		}
	}
	x.CM = cmCounters(s.a.CMStats())
	x.Daemon = s.daemonCounters()
	if x.QPs, err = s.qps(); err != nil {
		return nil, err
	}
	return x, nil
}

// cmCounters flattens the CM's counters: MADs by direction and
// attribute, then the rest.
func cmCounters(c ndk.CMStats) map[string]uint64 {
	out := map[string]uint64{
		"retransmits": c.Retransmits, "duplicates": c.Duplicates, "unmatched": c.Unmatched,
		"malformed": c.Malformed, "queue_drops": c.QueueDrops, "send_drops": c.SendDrops,
		"time_wait_evictions": c.TimeWaitEvictions, "backlog_refusals": c.BacklogRefusals,
	}
	for id, n := range c.Sent {
		out["sent_"+strings.ToLower(id.String())] = n
	}
	for id, n := range c.Received {
		out["received_"+strings.ToLower(id.String())] = n
	}
	return out
}

func (s *Server) qps() ([]QP, error) {
	p, err := s.provider()
	if err != nil {
		return nil, err
	}
	owner := s.owners()
	out := []QP{}
	for _, q := range p.QPs() {
		x := QP{
			QPN: q.QPN, Queue: q.Queue, Type: q.Type, State: q.State.String(), PathMTU: q.PathMTU,
			SendPSN: q.SendPSN, UnackedPSN: q.UnackedPSN, ExpectedPSN: q.ExpectedPSN,
			Outstanding: q.Outstanding, ReadsOut: q.ReadsOut, QP: q.QPInfo.QP,
		}
		if q.PeerIP.IsValid() {
			x.PeerAddr, x.PeerQPN = q.PeerIP.String(), q.PeerQPN
		}
		if ss := owner[q.QPN]; ss != nil {
			x.PID, x.Command = ss.cred.Pid, comm(ss.cred.Pid)
		}
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].QPN < out[j].QPN })
	return out, nil
}

// CounterMap names each engine counter as the JSON of ndkxdp stats and
// the metrics do (counters.EngineCounters).
func CounterMap(s ndk.EngineStats) map[string]uint64 {
	out := make(map[string]uint64, len(counters.EngineCounters))
	e := counters.Engine(s)
	for c, v := range e.All() {
		out[c.Name] = v
	}
	return out
}

// daemonCounters flattens what the daemon refused or ended into one map.
func (s *Server) daemonCounters() map[string]uint64 {
	m := map[string]uint64{"clients_refused": s.refused.Load(), "client_rings_broken": s.brokenRings.Load()}
	for r, n := range s.ended.snapshot() {
		m["sessions_ended_"+r] = n
	}
	for q, n := range s.book.exceededCounts() {
		m["quota_exceeded_"+q] = n
	}
	return m
}
