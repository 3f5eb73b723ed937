package ndk

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
)

// quiet is how long a test waits to be sure a callback does not come.
const quiet = 50 * time.Millisecond

func newTestAdapter(t *testing.T, tune func(*adapterConfig)) *Adapter {
	t.Helper()
	cfg := defaultConfig()
	if tune != nil {
		tune(&cfg)
	}
	a, err := newAdapter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func TestNewAdapterRejectsBadConfig(t *testing.T) {
	for name, tune := range map[string]func(*adapterConfig){
		"MaxCQDepth 0":    func(c *adapterConfig) { c.info.MaxCQDepth = 0 },
		"MaxCQDepth huge": func(c *adapterConfig) { c.info.MaxCQDepth = cq.MaxDepth + 1 },
		"no regions":      func(c *adapterConfig) { c.regions = 0 },
	} {
		cfg := defaultConfig()
		tune(&cfg)
		if a, err := newAdapter(cfg); err == nil {
			a.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCreateCqChecksDepthAgainstMaxCqDepth(t *testing.T) {
	a := newTestAdapter(t, nil)
	maxDepth := int(a.Info().MaxCQDepth)
	for _, d := range []int{0, -1, maxDepth + 1} {
		if _, err := a.CreateCQ(d, nil); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("CreateCQ(%d): %v, want STATUS_INVALID_PARAMETER", d, err)
		}
	}
	for _, d := range []int{1, 1000, maxDepth} {
		c, err := a.CreateCQ(d, nil)
		if err != nil {
			t.Fatalf("CreateCQ(%d): %v", d, err)
		}
		if c.Depth() < d {
			t.Errorf("CreateCQ(%d) holds only %d", d, c.Depth())
		}
		c.Close()
	}
}

// TestLimitsComeFromAdapterInfo: the checks read the adapter's own
// AdapterInfo, so a lower reported limit is the enforced one.
func TestLimitsComeFromAdapterInfo(t *testing.T) {
	a := newTestAdapter(t, func(c *adapterConfig) {
		c.info.MaxCQDepth = 64
		c.info.MaxRegistrationSize = 4096
	})
	if _, err := a.CreateCQ(65, nil); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("CreateCQ above the lowered MaxCQDepth: %v", err)
	}
	pd, err := a.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegisterMR(make([]byte, 4097), 0); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("RegisterMR above the lowered MaxRegistrationSize: %v", err)
	}
	if _, err := pd.RegisterMR(make([]byte, 4096), 0); err != nil {
		t.Errorf("RegisterMR at MaxRegistrationSize: %v", err)
	}
}

// TestAdapterCloseWaitsForCallbacks: NDKPI.md §8, adapter close blocks
// until every callback on every descendant has returned.
func TestAdapterCloseWaitsForCallbacks(t *testing.T) {
	cfg := defaultConfig()
	a, err := newAdapter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	release := make(chan struct{})
	var returned atomic.Bool
	c, err := a.CreateCQ(8, func(Status) {
		close(entered)
		<-release
		returned.Store(true)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Arm(CQNotifyAny); err != nil {
		t.Fatal(err)
	}
	c.core().Push(&cq.Entry{})
	<-entered
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("adapter Close returned while a callback was running")
	case <-time.After(quiet):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("adapter Close did not return after the callback")
	}
	if !returned.Load() {
		t.Fatal("adapter Close returned before the callback")
	}
}

// TestAdapterCloseReleasesDescendants: objects left open are closed with
// the adapter; their tokens stop working and further calls fail cleanly.
func TestAdapterCloseReleasesDescendants(t *testing.T) {
	a, err := newAdapter(defaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	c, _ := a.CreateCQ(8, func(Status) { calls.Add(1) })
	pd, _ := a.CreatePD()
	mr, err := pd.RegisterMR(make([]byte, 64), MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	c.Arm(CQNotifyAny)
	a.Close()

	c.core().Push(&cq.Entry{})
	time.Sleep(quiet)
	if calls.Load() != 0 {
		t.Error("callback after adapter Close")
	}
	if _, f := a.regions.CheckLocal(pd.id, mr.LocalToken(), mr.Addr(), 1, 0); f != memreg.FaultToken {
		t.Errorf("MR token after adapter Close: %v", f)
	}
	select {
	case <-pd.Closed():
	default:
		t.Error("PD close not complete after adapter Close")
	}
	if err := c.Arm(CQNotifyAny); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("Arm after adapter Close: %v", err)
	}
	if err := mr.Deregister(); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("Deregister after adapter Close: %v", err)
	}
	if _, err := pd.RegisterMR(make([]byte, 8), 0); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("RegisterMR after adapter Close: %v", err)
	}
	if _, err := a.CreateCQ(8, nil); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("CreateCQ after adapter Close: %v", err)
	}
	if _, err := a.CreatePD(); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("CreatePD after adapter Close: %v", err)
	}
	a.Close() // second close is a no-op
}

// TestPDClosePendsUntilMRsDeregistered: NDKPI.md §8, an antecedent closed
// before its successors completes once every successor is closed.
func TestPDClosePendsUntilMRsDeregistered(t *testing.T) {
	a := newTestAdapter(t, nil)
	pd, _ := a.CreatePD()
	mr1, _ := pd.RegisterMR(make([]byte, 64), MRFlagAllowLocalWrite)
	mr2, _ := pd.RegisterMR(make([]byte, 64), MRFlagAllowRemoteRead)
	pd.Close()
	if _, err := pd.RegisterMR(make([]byte, 64), 0); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("RegisterMR on a closing PD: %v", err)
	}
	// The MRs still work while the close pends.
	if _, f := a.regions.CheckRemote(pd.id, mr2.RemoteToken(), mr2.Addr(), 64, memreg.AccessRemoteRead); f != memreg.OK {
		t.Errorf("MR of a closing PD: %v", f)
	}
	if err := mr1.Deregister(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pd.Closed():
		t.Fatal("PD close completed with an MR still registered")
	default:
	}
	if err := mr2.Deregister(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pd.Closed():
	default:
		t.Fatal("PD close did not complete after the last MR")
	}
	pd.Close() // no-op
}

func TestPDCloseWithoutMRsCompletesAtOnce(t *testing.T) {
	a := newTestAdapter(t, nil)
	pd, _ := a.CreatePD()
	pd.Close()
	select {
	case <-pd.Closed():
	default:
		t.Fatal("empty PD close pends")
	}
}

// TestMemoryOfOnePDIsInvisibleToAnother: protection domains separate
// registrations.
func TestMemoryOfOnePDIsInvisibleToAnother(t *testing.T) {
	a := newTestAdapter(t, nil)
	pd1, _ := a.CreatePD()
	pd2, _ := a.CreatePD()
	if pd1.id == pd2.id {
		t.Fatal("two PDs share an id")
	}
	mr, _ := pd1.RegisterMR(make([]byte, 64), MRFlagAllowRemoteRead)
	if _, f := a.regions.CheckRemote(pd2.id, mr.RemoteToken(), mr.Addr(), 8, memreg.AccessRemoteRead); f != memreg.FaultPD {
		t.Fatalf("access from another PD: %v", f)
	}
}
