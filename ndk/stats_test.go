package ndk

import (
	"reflect"
	"testing"
)

// TestDocumentedTypes: the types a user gets from Stats and from a
// rejected Connect are ndk's own, so `go doc ndk.EngineStats` and `go doc
// ndk.RejectError` show their fields.
func TestDocumentedTypes(t *testing.T) {
	for _, v := range []any{EngineStats{}, RejectError{}} {
		if typ := reflect.TypeOf(v); typ.PkgPath() != "github.com/ndkxdp/ndkxdp/ndk" {
			t.Errorf("%v is declared in %s, not in package ndk", typ, typ.PkgPath())
		}
	}
}

// TestEngineStatsAdd: Add totals every counter.
func TestEngineStatsAdd(t *testing.T) {
	var one EngineStats
	v := reflect.ValueOf(&one).Elem()
	for i := range v.NumField() {
		v.Field(i).SetUint(uint64(i + 1))
	}
	var sum EngineStats
	sum.Add(one)
	sum.Add(one)
	s := reflect.ValueOf(sum)
	for i := range s.NumField() {
		if got := s.Field(i).Uint(); got != 2*uint64(i+1) {
			t.Errorf("%s = %d after adding %d twice", s.Type().Field(i).Name, got, i+1)
		}
	}
}
