package daemon_test

import (
	"errors"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestInProcessOnlyObjectsRefused: SRQs, memory windows and fast
// registration are not carried by the daemon's protocol yet; a client
// adapter refuses them with STATUS_NOT_SUPPORTED and does not advertise
// them (MaxSRQDepth 0: no SRQ support).
func TestInProcessOnlyObjectsRefused(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	if i := c.a.Info(); i.MaxSRQDepth != 0 || i.MaxWindowSize != 0 || i.FRMRPageCount != 0 || i.AdapterFlags&ndk.AdapterFlagRDMAReadLocalInvalidateSupported != 0 {
		t.Errorf("client advertises SRQ %d, window %d, FRMR %d", i.MaxSRQDepth, i.MaxWindowSize, i.FRMRPageCount)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ndk.ErrNotSupported) {
			t.Errorf("%s through the daemon: %v, want STATUS_NOT_SUPPORTED", what, err)
		}
	}
	_, err := c.pd.CreateSRQ(16, 1, 0, nil)
	check("CreateSRQ", err)
	_, err = c.pd.CreateMW()
	check("CreateMW", err)
	_, err = c.pd.CreateMR(true)
	check("CreateMR(FastRegister=TRUE)", err)
	check("FastRegister", c.qp.FastRegister(nil, c.mr, c.mem, 0))
	check("Invalidate", c.qp.Invalidate(nil, c.mr, 0))
	check("Bind", c.qp.Bind(nil, c.mr, nil, 0, 0, 0))
}
