package ndk

import (
	"errors"
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
)

// Adapter is an open NDK adapter (NDK_ADAPTER): the parent of CQs and PDs,
// and the owner of the memory-token table its engines consult.
type Adapter struct {
	info    AdapterInfo
	regions *memreg.Table

	mu     sync.Mutex
	closed bool
	nextPD uint32
	cqs    map[*CQ]struct{}
	pds    map[*PD]struct{}

	// be is the provider (backend.go): in process (inproc_adapter.go)
	// for an adapter from Open, the daemon (dial.go) for one from Dial.
	be adapterBackend
	// buffers is the AllocBuffer pool, nil without one.
	buffers *bufferPool
	// conns are the CM objects the adapter closes with it (cm.go).
	conns connections
}

// adapterConfig is what an adapter is built from. Open (with the provider)
// fills it from the interface and options; tests lower limits with it.
type adapterConfig struct {
	version Version // requested NDK version
	info    AdapterInfo
	regions int // capacity of the token table
}

// defaultRegions is how many MRs an adapter can hold at once: 2^16 slots of
// one pointer each (512 KiB) per adapter.
const defaultRegions = 1 << 16

func defaultConfig() adapterConfig {
	return adapterConfig{version: providerVersion, info: providerInfo(), regions: defaultRegions}
}

// newAdapter builds an adapter without engines: the object model alone.
func newAdapter(cfg adapterConfig) (*Adapter, error) {
	v, err := negotiateVersion(cfg.version)
	if err != nil {
		return nil, err
	}
	cfg.info.Version = v
	if cfg.info.MaxCQDepth < 1 || cfg.info.MaxCQDepth > cq.MaxDepth {
		return nil, errorf(StatusInvalidParameter, "open adapter", "MaxCQDepth %d out of range [1, %d]", cfg.info.MaxCQDepth, cq.MaxDepth)
	}
	regions, err := memreg.New(cfg.regions)
	if err != nil {
		return nil, &Error{Status: StatusInsufficientResources, Op: "open adapter", Detail: "token table", Err: err}
	}
	a := &Adapter{
		info:    cfg.info,
		regions: regions,
		cqs:     make(map[*CQ]struct{}),
		pds:     make(map[*PD]struct{}),
	}
	a.be = &inprocAdapter{a: a}
	return a, nil
}

// Info returns the adapter's limits and capabilities (NdkQueryAdapterInfo).
// Every create and post on this adapter is checked against them.
func (a *Adapter) Info() AdapterInfo { return a.info }

// CreateCQ creates a completion queue holding at least depth completions
// (NdkCreateCq; rounded up to a power of two, as verbs providers do).
// notify is called once per fired Arm, on a goroutine of the CQ's own,
// with STATUS_SUCCESS or the CQ error (STATUS_BUFFER_OVERFLOW on overrun,
// STATUS_INTERNAL_ERROR on a fatal failure). A nil notify makes a CQ that is
// only polled. A depth of 0 or above MaxCQDepth fails with
// STATUS_INVALID_PARAMETER.
func (a *Adapter) CreateCQ(depth int, notify func(Status)) (*CQ, error) {
	if depth < 1 || depth > int(a.info.MaxCQDepth) {
		return nil, errorf(StatusInvalidParameter, "create cq", "depth %d out of range [1, MaxCQDepth %d]", depth, a.info.MaxCQDepth)
	}
	return a.backend().createCQ(depth, notify)
}

// CreatePD creates a protection domain (NdkCreatePd).
func (a *Adapter) CreatePD() (*PD, error) {
	if a.be == nil {
		return nil, errorf(StatusInvalidHandle, "create pd", "adapter not opened (ndk.Open or ndk.Dial)")
	}
	return a.be.createPD()
}

// Close closes the adapter (CLOSE_NDK_ADAPTER_HANDLER). Objects still open
// are closed with it: CQs stop notifying, MRs are deregistered, PDs close.
// Close returns only after every callback on every descendant has
// returned (CQ notifications, a listener's connect callbacks, connectors'
// disconnect callbacks), so the caller may release what the callbacks
// use. It must
// not be called from a callback. A second Close does nothing.
func (a *Adapter) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	cqs, pds := a.cqs, a.pds
	a.cqs, a.pds = nil, nil
	a.mu.Unlock()
	a.backend().close(cqs, pds)
}

// forgetCQ and forgetPD drop a closed child; after Adapter.Close the maps
// are nil and deleting from them is a no-op.
func (a *Adapter) forgetCQ(c *CQ) {
	a.mu.Lock()
	delete(a.cqs, c)
	a.mu.Unlock()
}

func (a *Adapter) forgetPD(pd *PD) {
	a.mu.Lock()
	delete(a.pds, pd)
	a.mu.Unlock()
}

// registrationError maps a token-table refusal to the NDK status.
func registrationError(op string, err error) error {
	s := StatusInvalidParameter
	if errors.Is(err, memreg.ErrFull) {
		s = StatusInsufficientResources
	}
	return &Error{Status: s, Op: op, Err: err}
}
