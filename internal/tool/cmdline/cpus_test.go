package cmdline

import (
	"slices"
	"testing"
)

// TestCPUList: CPU lists read as taskset -c writes them and are written
// back with ranges joined; anything else is refused.
func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		out  string
	}{
		{"", nil, ""},
		{"3", []int{3}, "3"},
		{"0,2-4", []int{0, 2, 3, 4}, "0,2-4"},
		{"1,2,3,7", []int{1, 2, 3, 7}, "1-3,7"},
		{"5-5", []int{5}, "5"},
	} {
		got, err := CPUList(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("CPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if s := FormatCPUList(got); s != tc.out {
			t.Errorf("FormatCPUList(%v) = %q, want %q", got, s, tc.out)
		}
	}
	for _, bad := range []string{"x", "1,", "-1", "4-2", "1-x", "99999", ","} {
		if got, err := CPUList(bad); err == nil {
			t.Errorf("CPUList(%q) = %v, want an error", bad, got)
		}
	}
}
