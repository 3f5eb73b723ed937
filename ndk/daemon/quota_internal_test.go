package daemon

import (
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// fill opens as many sessions of uid as it may (checking that one more is
// refused) and charges each with r until refused; it returns how many of r
// the user got.
func fill(t *testing.T, b *book, uid uint32, r resource) (n int64) {
	t.Helper()
	for i := range b.q.SessionsPerUID {
		var held usage
		if err := b.openSession(uid); err != nil {
			t.Fatalf("session %d of uid %d: %v", i, uid, err)
		}
		for b.charge(uid, &held, 1, r) == nil {
			n++
		}
	}
	if err := b.openSession(uid); statusOf(err) != ndk.StatusQuotaExceeded {
		t.Fatalf("session past sessions_per_uid: %v", err)
	}
	return n
}

// TestDefaultQuotasLeaveRoom: under the default quotas one user, with as
// many sessions as it may open, takes at most half the token table and a
// quarter of vm.max_map_count; a second user still gets both after the
// first is refused.
func TestDefaultQuotasLeaveRoom(t *testing.T) {
	for _, c := range []struct {
		r    resource
		want int64
	}{{resTokens, tokenTable / 2}, {resMappings, int64(maxMapCount() / 4)}} {
		b := newBook(Quotas{})
		if n := fill(t, b, 1000, c.r); n != c.want {
			t.Errorf("one user took %d %s, want %d", n, resourceNames[c.r], c.want)
		}
		var other usage
		if err := b.openSession(1001); err != nil {
			t.Fatal(err)
		}
		if err := b.charge(1001, &other, 1, c.r); err != nil {
			t.Errorf("second user refused %s: %v", resourceNames[c.r], err)
		}
	}
}

// TestQuotaRelease: a refused charge takes nothing; what a session held
// is free for its user once it closes; the error names the quota.
func TestQuotaRelease(t *testing.T) {
	b := newBook(Quotas{PerUID: Limits{QPs: 2}})
	var s1, s2 usage
	_ = b.openSession(7)
	_ = b.openSession(7)
	if b.charge(7, &s1, 1, resQPs, resMappings) != nil || b.charge(7, &s2, 1, resQPs, resMappings) != nil {
		t.Fatal("two QPs within the quota refused")
	}
	err := b.charge(7, &s2, 1, resMappings, resQPs)
	if statusOf(err) != ndk.StatusQuotaExceeded || err.Error() != "quota per_uid.qps exceeded: uid 7 holds 2 of 2 (the daemon's config: quotas.per_uid.qps)" {
		t.Fatalf("third QP: %v", err)
	}
	if s2[resMappings] != 1 || b.mappings != 2 {
		t.Fatalf("a refused charge took mappings: session %d, all %d", s2[resMappings], b.mappings)
	}
	b.closeSession(7, &s1)
	if err := b.charge(7, &s2, 1, resQPs); err != nil {
		t.Fatalf("QP after the other session closed: %v", err)
	}
	if b.mappings != 1 {
		t.Fatalf("mappings held by all: %d, want 1", b.mappings)
	}
}
