// Package ndkpi is the NDKPI vocabulary of ndkxdp, in one typed home: the
// NTSTATUS codes (Status) and the error that carries one (Error), the
// per-request flags (OpFlag), the completion types (OperationType) and the
// arm types (CQNotify), with the numbers of ndkpi.h, ntstatus.h and ndis.h
// (NDKPI.md §5-§7).
//
// Package ndk re-exports every name here (ndk.Status, ndk.ErrCancelled,
// ndk.OpFlagDefer...), and the engine under ndk/internal (rc, cm, cq) uses
// them directly, so a status an engine completes with, a flag it acts on
// and the error a caller tests with errors.Is are the same values. It is
// not the API's object model (ndk) and holds no behaviour beyond naming
// and comparing these values.
//
// Example:
//
//	entry.Status = ndkpi.StatusCancelled // a flushed request
//	if wr.Flags&ndkpi.OpFlagDefer == 0 { ring() }
//	return &ndkpi.Error{Status: ndkpi.StatusConnectionRefused, Op: "connect", Err: rej}
package ndkpi
