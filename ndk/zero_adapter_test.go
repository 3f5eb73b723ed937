package ndk

import (
	"net/netip"
	"testing"
)

// TestZeroAdapterAnswersWithoutPanic: an Adapter no Open or Dial made
// answers every call as an adapter without a transport: zero values, or
// an error for what needs one, never a nil dereference.
func TestZeroAdapterAnswersWithoutPanic(t *testing.T) {
	a := new(Adapter)
	mac := a.MAC()
	for _, b := range mac {
		if b != 0 {
			t.Errorf("zero adapter MAC %v", mac)
			break
		}
	}
	if a.LocalAddress().IsValid() || a.PathMTU() != 0 || len(a.Stats()) != 0 {
		t.Errorf("zero adapter: address %v, path MTU %d, %d engines, MAC %v; want none", a.LocalAddress(), a.PathMTU(), len(a.Stats()), a.MAC())
	}
	_ = a.CMStats()
	if _, err := a.CreatePD(); err == nil {
		t.Error("CreatePD on a zero adapter succeeded")
	}
	if _, err := a.CreateCQ(4, nil); err == nil {
		t.Error("CreateCQ on a zero adapter succeeded")
	}
	if a.Err() != nil {
		t.Errorf("zero adapter Err: %v", a.Err())
	}
	if _, err := a.CreateConnector(); err == nil {
		t.Error("CreateConnector on a zero adapter succeeded")
	}
	if _, err := a.CreateListener(func(*Connector) {}); err == nil {
		t.Error("CreateListener on a zero adapter succeeded")
	}
	if _, err := a.ResolveUD(t.Context(), netip.MustParseAddrPort("198.18.0.2:1")); err == nil {
		t.Error("ResolveUD on a zero adapter succeeded")
	}
	if _, err := a.Memory(4096); err != nil {
		t.Logf("Memory on a zero adapter: %v", err)
	}
	a.Close()
}
