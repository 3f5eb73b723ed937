package rc

import (
	"reflect"
	"testing"
)

// TestStatsAddCoversEveryField: Add totals every counter, so each field
// must be a uint64; a field of another kind would be skipped or panic.
func TestStatsAddCoversEveryField(t *testing.T) {
	var a, b Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		if k := va.Field(i).Kind(); k != reflect.Uint64 {
			t.Fatalf("Stats.%s is a %v, not a uint64 count", va.Type().Field(i).Name, k)
		}
		va.Field(i).SetUint(uint64(i + 1))
		vb.Field(i).SetUint(uint64(100 * (i + 1)))
	}
	a.Add(b)
	for i := range va.NumField() {
		if got := va.Field(i).Uint(); got != uint64(101*(i+1)) {
			t.Fatalf("Stats.%s after Add = %d, want %d", va.Type().Field(i).Name, got, 101*(i+1))
		}
	}
}
