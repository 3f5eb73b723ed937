package inproc

import (
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/afxdp"
)

// TestInPlaceReason: a queue's bind reason says that without multi-buffer
// its port sends only whole AllocBuffer buffers in place (one descriptor;
// port.XSK.referable needs a multi-buffer socket to chain), naming
// xdp_zc_max_segs 1 where zero copy cannot have multi-buffer at all, and
// says nothing where chains may be sent.
func TestInPlaceReason(t *testing.T) {
	for _, tc := range []struct {
		mode  afxdp.BindMode
		multi bool
		segs  uint32
		want  []string // substrings; none means ""
	}{
		{afxdp.ModeZeroCopy, false, 1, []string{"in place only whole AllocBuffer buffers", "zero copy without multi-buffer", "xdp_zc_max_segs 1"}},
		{afxdp.ModeZeroCopy, false, 17, []string{"in place only whole AllocBuffer buffers", "MTU fits one frame", "xdp_zc_max_segs 17"}},
		{afxdp.ModeCopy, false, 0, []string{"in place only whole AllocBuffer buffers", "MTU fits one frame"}},
		{afxdp.ModeZeroCopy, true, 17, nil},
		{afxdp.ModeCopy, true, 1, nil},
	} {
		got := inPlaceReason(tc.mode, tc.multi, tc.segs)
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%v multi=%v segs=%d: %q, want none", tc.mode, tc.multi, tc.segs, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v multi=%v segs=%d: %q lacks %q", tc.mode, tc.multi, tc.segs, got, w)
			}
		}
		if tc.mode == afxdp.ModeCopy && strings.Contains(got, "xdp_zc_max_segs") {
			t.Errorf("copy mode: %q blames xdp_zc_max_segs", got)
		}
	}
}
