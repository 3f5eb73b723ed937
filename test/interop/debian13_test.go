package interop

import (
	"testing"
	"time"
)

// debian13Image is the second peer's image: the Soft-RoCE peer built
// from Debian 13.
func debian13Image(t *testing.T) *Image {
	t.Helper()
	requireVMTools(t)
	img, err := EnsureImage(ctxFor(t, 15*time.Minute), ImageConfig{Suite: Debian13Suite})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestDebian13MTU1500 runs every case against Debian 13's rxe with a
// 1500-byte MTU (IB path MTU 1024): the guest's own checks (versions,
// GID, devinfo), live CM REQs of rping and perftest, rdma_cm within the
// guest, and runInterop's whole matrix.
func TestDebian13MTU1500(t *testing.T) {
	vm := bootVM(t, 15*time.Minute, Config{Image: debian13Image(t)})
	t.Run("rxe_ready", func(t *testing.T) { checkRxeReady(t, vm) })
	t.Run("devinfo", func(t *testing.T) { checkDevinfo(t, vm) })
	t.Run("live_cm_req", func(t *testing.T) { testLiveCMReq(t, vm) })
	t.Run("rdma_cm_loopback", func(t *testing.T) { testRdmaCMLoopback(t, vm) })
	runInterop(t, vm)
}

// TestDebian13MTU9000 boots Debian 13's rxe with a 9000-byte MTU and
// IPv6 (IB path MTU 4096): the jumbo and IPv6 checks of TestBootJumboIPv6,
// then the smoke set (rping and every perftest tool at 64 KiB and 1 MiB,
// both ways, and the frame checks).
func TestDebian13MTU9000(t *testing.T) {
	vm := bootVM(t, 15*time.Minute, Config{Image: debian13Image(t), MTU: 9000, IPv6: true})
	t.Run("jumbo_ipv6", func(t *testing.T) { testJumboIPv6(t, vm) })
	runCases(t, vm, smokeSet)
}
