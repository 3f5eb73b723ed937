package ndk

import "github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"

// Status is an NTSTATUS code, as NDKPI returns from provider functions, passes
// to notification callbacks (CqStatus) and stores in NDK_RESULT.Status.
// Values: NDKPI.md §7.
type Status = ndkpi.Status

// Status codes of NDKPI.md §7.
const (
	StatusSuccess               Status = ndkpi.StatusSuccess
	StatusPending               Status = ndkpi.StatusPending
	StatusBufferOverflow        Status = ndkpi.StatusBufferOverflow // CqStatus: overrun; completion: receive buffer too small
	StatusAccessViolation       Status = ndkpi.StatusAccessViolation
	StatusInvalidParameter      Status = ndkpi.StatusInvalidParameter
	StatusBufferTooSmall        Status = ndkpi.StatusBufferTooSmall
	StatusInvalidParameterMix   Status = ndkpi.StatusInvalidParameterMix
	StatusSharingViolation      Status = ndkpi.StatusSharingViolation
	StatusInsufficientResources Status = ndkpi.StatusInsufficientResources
	StatusIOTimeout             Status = ndkpi.StatusIOTimeout
	StatusNotSupported          Status = ndkpi.StatusNotSupported
	StatusInternalError         Status = ndkpi.StatusInternalError
	StatusCancelled             Status = ndkpi.StatusCancelled
	StatusRemoteResources       Status = ndkpi.StatusRemoteResources
	StatusInvalidAddress        Status = ndkpi.StatusInvalidAddress
	StatusTooManyAddresses      Status = ndkpi.StatusTooManyAddresses
	StatusAddressAlreadyExists  Status = ndkpi.StatusAddressAlreadyExists
	StatusConnectionRefused     Status = ndkpi.StatusConnectionRefused
	StatusConnectionInvalid     Status = ndkpi.StatusConnectionInvalid
	StatusNetworkUnreachable    Status = ndkpi.StatusNetworkUnreachable
	StatusHostUnreachable       Status = ndkpi.StatusHostUnreachable
	StatusConnectionAborted     Status = ndkpi.StatusConnectionAborted
	StatusImplementationLimit   Status = ndkpi.StatusImplementationLimit
	StatusNDISBadVersion        Status = ndkpi.StatusNDISBadVersion
	StatusNDISAdapterNotReady   Status = ndkpi.StatusNDISAdapterNotReady
)

// Completion statuses that NDKPI.md §7 takes from ND2 (IND2CompletionQueue):
// the remaining ones (BUFFER_OVERFLOW, ACCESS_VIOLATION, CANCELLED,
// INTERNAL_ERROR, IO_TIMEOUT, REMOTE_RESOURCES) are above.
const (
	StatusDataOverrun          Status = ndkpi.StatusDataOverrun
	StatusInvalidDeviceRequest Status = ndkpi.StatusInvalidDeviceRequest
)

// Codes outside NDKPI.md §7 (values from ntstatus.h) for situations that
// only a Go API has: StatusInvalidHandle for a call on an object that was
// closed (NDK leaves that undefined; Go must not crash), and
// StatusUnsuccessful, which StatusOf reports for an error that carries no
// status; StatusQuotaExceeded for a daemon-backed adapter that reached
// one of the daemon's quotas (the error names which), StatusAccessDenied
// for one the daemon's allow list does not admit, and
// StatusConnectionReset for every call of a daemon-backed adapter (Dial)
// whose daemon went away.
const (
	StatusInvalidHandle   Status = ndkpi.StatusInvalidHandle
	StatusUnsuccessful    Status = ndkpi.StatusUnsuccessful
	StatusQuotaExceeded   Status = ndkpi.StatusQuotaExceeded
	StatusAccessDenied    Status = ndkpi.StatusAccessDenied
	StatusConnectionReset Status = ndkpi.StatusConnectionReset
)

// Error is a failed NDK call: the NTSTATUS code a Windows provider would
// return, what ndkxdp was doing (Op), what was wrong (Detail) and the
// underlying cause (Err).
//
// errors.Is matches an *Error against the sentinel of the same status (for
// example ErrInvalidParameter), however deep it is wrapped.
type Error = ndkpi.Error

// Sentinel errors, one per failure status: test with errors.Is.
var (
	ErrBufferOverflow        = ndkpi.ErrBufferOverflow
	ErrAccessViolation       = ndkpi.ErrAccessViolation
	ErrInvalidParameter      = ndkpi.ErrInvalidParameter
	ErrBufferTooSmall        = ndkpi.ErrBufferTooSmall
	ErrInvalidParameterMix   = ndkpi.ErrInvalidParameterMix
	ErrSharingViolation      = ndkpi.ErrSharingViolation
	ErrInsufficientResources = ndkpi.ErrInsufficientResources
	ErrIOTimeout             = ndkpi.ErrIOTimeout
	ErrNotSupported          = ndkpi.ErrNotSupported
	ErrInternalError         = ndkpi.ErrInternalError
	ErrCancelled             = ndkpi.ErrCancelled
	ErrRemoteResources       = ndkpi.ErrRemoteResources
	ErrInvalidAddress        = ndkpi.ErrInvalidAddress
	ErrTooManyAddresses      = ndkpi.ErrTooManyAddresses
	ErrAddressAlreadyExists  = ndkpi.ErrAddressAlreadyExists
	ErrConnectionRefused     = ndkpi.ErrConnectionRefused
	ErrConnectionInvalid     = ndkpi.ErrConnectionInvalid
	ErrNetworkUnreachable    = ndkpi.ErrNetworkUnreachable
	ErrHostUnreachable       = ndkpi.ErrHostUnreachable
	ErrConnectionAborted     = ndkpi.ErrConnectionAborted
	ErrImplementationLimit   = ndkpi.ErrImplementationLimit
	ErrNDISBadVersion        = ndkpi.ErrNDISBadVersion
	ErrNDISAdapterNotReady   = ndkpi.ErrNDISAdapterNotReady
	ErrDataOverrun           = ndkpi.ErrDataOverrun
	ErrInvalidDeviceRequest  = ndkpi.ErrInvalidDeviceRequest
	ErrInvalidHandle         = ndkpi.ErrInvalidHandle
	ErrUnsuccessful          = ndkpi.ErrUnsuccessful
	ErrQuotaExceeded         = ndkpi.ErrQuotaExceeded
	ErrAccessDenied          = ndkpi.ErrAccessDenied
	ErrConnectionReset       = ndkpi.ErrConnectionReset
)

// StatusOf returns the NTSTATUS carried by err: StatusSuccess for nil, the
// status of the first *Error in err's chain, or StatusUnsuccessful for an
// error that carries none.
func StatusOf(err error) Status { return ndkpi.StatusOf(err) }

// errorf builds the error an ndk call returns; off the data path only.
func errorf(s Status, op, format string, args ...any) error {
	return ndkpi.Errorf(s, op, nil, format, args...)
}
