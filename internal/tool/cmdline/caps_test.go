package cmdline

import (
	"strings"
	"testing"
)

// TestMissingCapabilities: the check reads CapEff and names each missing
// capability with its use; CAP_SYS_ADMIN only for the commands that build
// namespaces.
func TestMissingCapabilities(t *testing.T) {
	const status = "Name:\tndkxdp\nCapPrm:\t000001ffffffffff\nCapEff:\t000000c000007000\n"
	eff, err := EffectiveCaps(strings.NewReader(status))
	if err != nil || eff != 0xc000007000 {
		t.Fatalf("effectiveCaps = %#x, %v", eff, err)
	}
	// 0xc000007000: CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK, CAP_PERFMON
	// and CAP_BPF.
	if err := MissingCaps(eff, ToolCaps); err != nil {
		t.Errorf("a tool with NET_ADMIN, NET_RAW, IPC_LOCK, PERFMON and BPF refused: %v", err)
	}
	err = MissingCaps(eff, PairCaps)
	if err == nil || !strings.Contains(err.Error(), "CAP_SYS_ADMIN (to create network namespaces)") || strings.Contains(err.Error(), "CAP_BPF (") {
		t.Errorf("demo without CAP_SYS_ADMIN: %v", err)
	}
	err = MissingCaps(eff&^(1<<39), ToolCaps)
	if err == nil || !strings.Contains(err.Error(), "CAP_BPF") || strings.Contains(err.Error(), "CAP_NET_ADMIN (") {
		t.Errorf("a tool without CAP_BPF: %v", err)
	}
	if _, err := EffectiveCaps(strings.NewReader("Name:\tx\n")); err == nil {
		t.Error("a status without CapEff was accepted")
	}
}
