package memreg

import "testing"

// TestRemoteAtomicRight: the remote atomic right needs local write, as
// IBV_ACCESS_REMOTE_ATOMIC does, and only it grants AccessRemoteAtomic;
// remote read and write do not imply it.
func TestRemoteAtomicRight(t *testing.T) {
	tab := newTable(t, 4)
	if _, err := tab.Register(Region{PD: pd, VA: 0x1000, Buf: make([]byte, 8), Access: AccessRemoteAtomic}); err == nil {
		t.Fatal("remote atomic without local write was registered")
	}
	with := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 16), Access: AccessLocalWrite | AccessRemoteAtomic})
	without := mustRegister(t, tab, Region{PD: pd, VA: 0x2000, Buf: make([]byte, 16), Access: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead})
	if _, f := tab.CheckRemote(pd, with.Remote, 0x1008, 8, AccessRemoteAtomic); f != OK {
		t.Fatalf("atomic on a region with the right: %v", f)
	}
	if _, f := tab.CheckRemote(pd, with.Remote, 0x1000, 8, AccessRemoteWrite); f != FaultAccess {
		t.Fatalf("remote write on an atomic-only region: %v, want %v", f, FaultAccess)
	}
	if _, f := tab.CheckRemote(pd, without.Remote, 0x2000, 8, AccessRemoteAtomic); f != FaultAccess {
		t.Fatalf("atomic on a read/write region: %v, want %v", f, FaultAccess)
	}
}
