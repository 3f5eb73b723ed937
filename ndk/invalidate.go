package ndk

// RegisterInvalidatableMR registers buf like RegisterMR, except that the
// region may be invalidated: by a peer's SendAndInvalidate naming its
// remote token (seed 000/004), after which every use of either token fails
// and a second invalidation fails too (seed 002).
//
// In NDK only fast-registered MRs and memory windows can be invalidated
// (NdkInvalidate "is never used on an MR registered with NdkRegisterMr",
// NDKPI.md §3; Linux rxe refuses it as well): NDK consumers use
// QP.FastRegister or QP.Bind (fastreg.go, mw.go). This is an ndkxdp
// extension for consumers that want a remotely invalidatable region
// without posting a FastRegister; QP.Invalidate accepts it too.
func (pd *PD) RegisterInvalidatableMR(buf []byte, flags MRFlag) (*MR, error) {
	return pd.be.register(buf, flags, true)
}
