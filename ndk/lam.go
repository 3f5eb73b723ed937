package ndk

// Logical addresses: NdkGetPrivilegedMemoryRegionToken, NdkBuildLAM and
// NdkReleaseLAM (NDKPI.md §3, "Tokens"). In NDK they let a kernel
// consumer name memory by the adapter's logical (DMA) page addresses: a
// LAM maps an MDL to them, and SGEs that carry the privileged token hold
// such an address instead of a virtual one, with local read and write and
// no registration.
//
// ndkxdp has no such addresses to give. Its "adapter" is a goroutine that
// reaches memory only through Go slices held by the token table: an
// address in an SGE is an index into a registered region, never
// dereferenced (seed 001), and a Go program has no MDLs or physical pages
// to map (the collector owns its memory and pins nothing for a device).
// A privileged token would have to let any SGE address reach any memory
// of the process, which the engine cannot check and the daemon mode (a
// client's SGEs read by another process) must never allow. Both calls
// therefore fail with STATUS_NOT_SUPPORTED. AdapterInfo still sets
// RDMA_READ_SINK_NOT_REQUIRED for what it says of registered memory (a
// read sink needs no special right); its other half, that a LAM with the
// privileged token may be a sink, is moot without LAMs. Consumers
// register memory (PD.RegisterMR) or fast-register it (QP.FastRegister
// with the buffer itself in place of a page array).

// errNotThroughDaemon refuses, on a daemon-backed adapter (Dial), what the
// daemon's protocol does not carry yet: SRQs, memory windows and fast
// registration (their engine parts run only in-process).
func errNotThroughDaemon(op string) error {
	return errorf(StatusNotSupported, op, "not offered through the daemon yet (SRQ, MW and fast registration run in-process only): open the adapter with Open")
}

// withoutInProcessOnly clears, in a daemon client's AdapterInfo, the limits
// of what errNotThroughDaemon refuses, so the adapter advertises only what
// it has (MaxSRQDepth 0 is NDKPI's "no SRQ support"). Without fast MRs no
// READ's sink could be invalidated, so RDMA_READ_LOCAL_INVALIDATE goes too.
func withoutInProcessOnly(info *AdapterInfo) {
	info.MaxSRQDepth, info.MaxWindowSize, info.FRMRPageCount = 0, 0, 0
	info.AdapterFlags &^= AdapterFlagRDMAReadLocalInvalidateSupported
}

// errNoLogicalAddresses is the STATUS_NOT_SUPPORTED of the calls above.
var errNoLogicalAddresses = errorf(StatusNotSupported, "logical addresses",
	"ndkxdp has no adapter logical addresses (a Go engine reaches memory only through registered slices): register or fast-register the memory instead")

// PrivilegedMemoryRegionToken is NdkGetPrivilegedMemoryRegionToken. It
// always fails with STATUS_NOT_SUPPORTED (see above); the token it would
// return is 0, which no region ever has.
func (pd *PD) PrivilegedMemoryRegionToken() (uint32, error) {
	return 0, errNoLogicalAddresses
}

// LogicalAddressMapping is NDK_LOGICAL_ADDRESS_MAPPING: the page addresses
// NdkBuildLAM returns. ndkxdp never builds one.
type LogicalAddressMapping struct {
	AdapterPageArray []uint64
}

// BuildLAM is NdkBuildLAM for length bytes of buf. It always fails with
// STATUS_NOT_SUPPORTED (see above).
func (a *Adapter) BuildLAM(buf []byte, length int) (*LogicalAddressMapping, int, error) {
	return nil, 0, errNoLogicalAddresses
}

// ReleaseLAM is NdkReleaseLAM. Since BuildLAM never returns a mapping,
// there is never one to release; it does nothing.
func (a *Adapter) ReleaseLAM(*LogicalAddressMapping) {}
