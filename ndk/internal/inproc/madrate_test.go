package inproc

import (
	"net/netip"
	"testing"
	"time"
)

// TestMADRatePerSource: a source gets its burst of MADs, then about
// madRate a second; another source is not held back by it; the table
// never holds more than madSources sources; a charge allocates nothing.
func TestMADRatePerSource(t *testing.T) {
	var tab madRateTable
	flood, other := netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("198.18.0.2")
	start := time.Now()
	passed := 0
	for range 3 * madBurst {
		if tab.allow(flood, madCost) {
			passed++
		}
	}
	elapsed := time.Since(start)
	if max := madBurst + int(elapsed.Seconds()*madRate) + 1; passed < madBurst || passed > max {
		t.Fatalf("%d of %d MADs passed in %v, want %d-%d", passed, 3*madBurst, elapsed, madBurst, max)
	}
	if !tab.allow(other, madCost) {
		t.Fatal("a second source was refused for the first one's flood")
	}
	time.Sleep(10 * time.Millisecond) // 1,000 MADs' worth
	if !tab.allow(flood, madCost) {
		t.Fatal("the flooding source got nothing back after 10 ms")
	}
	for i := range 4 * madSources {
		tab.allow(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), madCost)
		if tab.n > madSources {
			t.Fatalf("%d sources held", tab.n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { tab.allow(other, madCost) }); n != 0 {
		t.Fatalf("%.1f allocations per MAD", n)
	}
}

// TestREQRatePerSource: a source's REQs get a tenth of its MAD share (its
// burst's worth, then about reqRate a second), and a source that spent
// its share on REQs leaves another source's REQs alone.
func TestREQRatePerSource(t *testing.T) {
	var tab madRateTable
	flood, other := netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("198.18.0.2")
	start := time.Now()
	passed := 0
	for range madBurst {
		if tab.allow(flood, reqCost) {
			passed++
		}
	}
	elapsed := time.Since(start)
	burst := int(madBurst * madCost / reqCost)
	if most := burst + int(elapsed.Seconds()*reqRate) + 1; passed < burst || passed > most {
		t.Fatalf("%d of %d REQs passed in %v, want %d-%d", passed, madBurst, elapsed, burst, most)
	}
	if !tab.allow(other, reqCost) {
		t.Fatal("a second source's REQ was refused for the first one's flood")
	}
	time.Sleep(time.Millisecond) // 10 REQs' worth
	if !tab.allow(flood, reqCost) {
		t.Fatal("the flooding source got no REQ through after 1 ms")
	}
}
