package daemon

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// Quotas bound what clients take of what the adapter and the daemon's
// process hold for everyone: the token table, the engines' QPs and CQs,
// the daemon's memory mappings (vm.max_map_count), its sessions. Each
// bound holds per session and per user (SO_PEERCRED uid): a client that
// reaches one gets STATUS_QUOTA_EXCEEDED naming it, and the refusal is
// counted (Status.QuotaExceeded, ndkxdp_quota_exceeded_total). A zero
// field takes its default (DefaultQuotas); a negative one removes the
// bound.
type Quotas struct {
	// Sessions bounds the client sessions at once, of all users;
	// SessionsPerUID those of one user.
	Sessions       int `json:"sessions"`
	SessionsPerUID int `json:"sessions_per_uid"`
	// Mappings bounds the daemon's mappings of client memory and shared
	// rings, all sessions together: the rest of vm.max_map_count is the
	// daemon's own (engines, UMEM, runtime).
	Mappings int `json:"mappings"`
	// PerSession and PerUID bound each resource, one session's and one
	// user's (all that user's sessions together).
	PerSession Limits `json:"per_session"`
	PerUID     Limits `json:"per_uid"`
}

// Limits bounds the resources of one session or one user.
type Limits struct {
	QPs  int64 `json:"qps"`
	CQs  int64 `json:"cqs"`
	SRQs int64 `json:"srqs"`
	MRs  int64 `json:"mrs"` // registered and fast-register MRs
	MWs  int64 `json:"mws"`
	// Tokens bounds the entries of the adapter's token table held: one
	// per MR and per memory window.
	Tokens int64 `json:"tokens"`
	// Arenas and ArenaBytes bound the client memory the daemon maps
	// (Adapter.Memory, AllocBuffer's pool).
	Arenas     int64 `json:"arenas"`
	ArenaBytes int64 `json:"arena_bytes"`
	// Mappings bounds the daemon's mappings for the client: its session
	// segment, a segment per QP, CQ (two while a resize's old ring
	// drains) and SRQ, and each arena.
	Mappings int64 `json:"mappings"`
	// Objects bounds the handles held: every object above, and PDs,
	// connectors, listeners and shared endpoints.
	Objects int64 `json:"objects"`
	// Groups bounds the multicast groups joined (QP.JoinMulticast), each
	// counted once however many of the client's QPs are members: the
	// kernel keeps 20 IPv4 groups per socket (igmp_max_memberships) and
	// the steering program 64 addresses, for the whole adapter.
	Groups int64 `json:"groups"`
}

// The resources a quota counts, in the order of Limits' fields.
type resource int

const (
	resQPs resource = iota
	resCQs
	resSRQs
	resMRs
	resMWs
	resTokens
	resArenas
	resArenaBytes
	resMappings
	resObjects
	resGroups
	nResources
)

var resourceNames = [nResources]string{"qps", "cqs", "srqs", "mrs", "mws", "tokens", "arenas", "arena_bytes", "mappings", "objects", "groups"}

// bounds returns l's fields by resource.
func (l *Limits) bounds() [nResources]*int64 {
	return [nResources]*int64{&l.QPs, &l.CQs, &l.SRQs, &l.MRs, &l.MWs, &l.Tokens, &l.Arenas, &l.ArenaBytes, &l.Mappings, &l.Objects, &l.Groups}
}

func (l *Limits) of(r resource) int64 { return *l.bounds()[r] }

// tokenTable is the capacity of a daemon adapter's token table (ndk's
// default), which the token defaults divide: one user holds at most half
// of it, one session an eighth.
const tokenTable = 1 << 16

// DefaultQuotas are the bounds of a daemon with no quotas configured.
// Per user, each adapter-wide resource stops well short of exhaustion:
// half the token table, a quarter of vm.max_map_count (its default is
// 65530); the sessions together leave a quarter of the mappings to the
// daemon itself. A session's QPs, CQs and SRQs each take a mapping, so
// the mappings bound them first.
func DefaultQuotas() Quotas {
	maps := maxMapCount()
	return Quotas{
		Sessions: 1024, SessionsPerUID: 256, Mappings: maps * 3 / 4,
		PerSession: Limits{
			QPs: 16384, CQs: 16384, SRQs: 4096, MRs: tokenTable / 8, MWs: tokenTable / 8, Tokens: tokenTable / 8,
			Arenas: 256, ArenaBytes: 64 << 30, Mappings: int64(maps / 4), Objects: 1 << 16, Groups: 8,
		},
		PerUID: Limits{
			QPs: 32768, CQs: 32768, SRQs: 8192, MRs: tokenTable / 2, MWs: tokenTable / 2, Tokens: tokenTable / 2,
			Arenas: 1024, ArenaBytes: 256 << 30, Mappings: int64(maps / 4), Objects: 1 << 18, Groups: 16,
		},
	}
}

// maxMapCount is vm.max_map_count, or its default where it cannot be read.
func maxMapCount() int {
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n
		}
	}
	return 65530
}

// withDefaults fills the zero fields of q from d.
func (q Quotas) withDefaults(d Quotas) Quotas {
	fill := func(v *int, dv int) {
		if *v == 0 {
			*v = dv
		}
	}
	fill(&q.Sessions, d.Sessions)
	fill(&q.SessionsPerUID, d.SessionsPerUID)
	fill(&q.Mappings, d.Mappings)
	for _, p := range []struct{ l, d *Limits }{{&q.PerSession, &d.PerSession}, {&q.PerUID, &d.PerUID}} {
		dst, src := p.l.bounds(), p.d.bounds()
		for r := range dst {
			if *dst[r] == 0 {
				*dst[r] = *src[r]
			}
		}
	}
	return q
}

// usage is what a session or a user holds.
type usage [nResources]int64

// book keeps the quotas' accounts: what each session and each user
// holds, and the sessions and mappings of all.
type book struct {
	q Quotas

	mu       sync.Mutex
	uids     map[uint32]*uidUse
	sessions int
	mappings int64
	exceeded [nResources + 2]atomic.Uint64 // by resource, then sessions, sessions_per_uid
}

type uidUse struct {
	sessions int
	use      usage
}

func newBook(q Quotas) *book {
	return &book{q: q.withDefaults(DefaultQuotas()), uids: make(map[uint32]*uidUse)}
}

const (
	exSessions = int(nResources)
	exSessionsPerUID
)

func quotaError(name string, held, limit int64, whose string) error {
	return statusErr(ndk.StatusQuotaExceeded, "quota %s exceeded: %s holds %d of %d (the daemon's config: quotas.%s)", name, whose, held, limit, name)
}

// openSession admits a session of uid, or refuses it over a quota.
func (b *book) openSession(uid uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.q.Sessions > 0 && b.sessions >= b.q.Sessions {
		b.exceeded[exSessions].Add(1)
		return quotaError("sessions", int64(b.sessions), int64(b.q.Sessions), "the daemon")
	}
	u := b.uids[uid]
	if u == nil {
		u = &uidUse{}
		b.uids[uid] = u
	}
	if b.q.SessionsPerUID > 0 && u.sessions >= b.q.SessionsPerUID {
		b.exceeded[exSessionsPerUID].Add(1)
		return quotaError("sessions_per_uid", int64(u.sessions), int64(b.q.SessionsPerUID), fmt.Sprintf("uid %d", uid))
	}
	u.sessions++
	b.sessions++
	return nil
}

// closeSession gives back everything the session held.
func (b *book) closeSession(uid uint32, held *usage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.uids[uid]
	if u == nil {
		return
	}
	for r, n := range held {
		u.use[r] -= n
		if resource(r) == resMappings {
			b.mappings -= n
		}
	}
	*held = usage{}
	u.sessions--
	b.sessions--
	if u.sessions == 0 {
		delete(b.uids, uid)
	}
}

// charge takes n of each resource in rs for the session (held) of uid,
// all or none.
func (b *book) charge(uid uint32, held *usage, n int64, rs ...resource) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.uids[uid]
	if u == nil {
		return statusErr(ndk.StatusInvalidDeviceRequest, "session closed")
	}
	for _, r := range rs {
		name := resourceNames[r]
		if l := b.q.PerSession.of(r); l > 0 && held[r]+n > l {
			b.exceeded[r].Add(1)
			return quotaError("per_session."+name, held[r], l, "this session")
		}
		if l := b.q.PerUID.of(r); l > 0 && u.use[r]+n > l {
			b.exceeded[r].Add(1)
			return quotaError("per_uid."+name, u.use[r], l, fmt.Sprintf("uid %d", uid))
		}
		if r == resMappings && b.q.Mappings > 0 && b.mappings+n > int64(b.q.Mappings) {
			b.exceeded[r].Add(1)
			return quotaError("mappings", b.mappings, int64(b.q.Mappings), "all sessions together")
		}
	}
	for _, r := range rs {
		held[r] += n
		u.use[r] += n
		if r == resMappings {
			b.mappings += n
		}
	}
	return nil
}

// release gives back n of each resource in rs.
func (b *book) release(uid uint32, held *usage, n int64, rs ...resource) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.uids[uid]
	if u == nil {
		return
	}
	for _, r := range rs {
		n := min(n, held[r])
		held[r] -= n
		u.use[r] -= n
		if r == resMappings {
			b.mappings -= n
		}
	}
}

// exceededCounts returns the refusals by quota name.
func (b *book) exceededCounts() map[string]uint64 {
	m := make(map[string]uint64, nResources+2)
	for r, name := range resourceNames {
		m[name] = b.exceeded[r].Load()
	}
	m["sessions"] = b.exceeded[exSessions].Load()
	m["sessions_per_uid"] = b.exceeded[exSessionsPerUID].Load()
	return m
}

// take charges the session one of each resource in rs.
func (ss *session) take(rs ...resource) error {
	return ss.srv.book.charge(ss.cred.Uid, &ss.held, 1, rs...)
}

// give returns one of each resource in rs.
func (ss *session) give(rs ...resource) {
	ss.srv.book.release(ss.cred.Uid, &ss.held, 1, rs...)
}
