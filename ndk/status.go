package ndk

import (
	"errors"
	"fmt"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
)

// Status is an NTSTATUS code, as NDKPI returns from provider functions, passes
// to notification callbacks (CqStatus) and stores in NDK_RESULT.Status.
// Values: NDKPI.md §7.
type Status uint32

// Status codes of NDKPI.md §7.
const (
	StatusSuccess               Status = ntstatus.Success
	StatusPending               Status = ntstatus.Pending
	StatusBufferOverflow        Status = ntstatus.BufferOverflow // CqStatus: overrun; completion: receive buffer too small
	StatusAccessViolation       Status = ntstatus.AccessViolation
	StatusInvalidParameter      Status = ntstatus.InvalidParameter
	StatusBufferTooSmall        Status = ntstatus.BufferTooSmall
	StatusInvalidParameterMix   Status = ntstatus.InvalidParameterMix
	StatusSharingViolation      Status = ntstatus.SharingViolation
	StatusInsufficientResources Status = ntstatus.InsufficientResource
	StatusIOTimeout             Status = ntstatus.IOTimeout
	StatusNotSupported          Status = ntstatus.NotSupported
	StatusInternalError         Status = ntstatus.InternalError
	StatusCancelled             Status = ntstatus.Cancelled
	StatusRemoteResources       Status = ntstatus.RemoteResources
	StatusInvalidAddress        Status = ntstatus.InvalidAddress
	StatusTooManyAddresses      Status = ntstatus.TooManyAddresses
	StatusAddressAlreadyExists  Status = ntstatus.AddressAlreadyExists
	StatusConnectionRefused     Status = ntstatus.ConnectionRefused
	StatusConnectionInvalid     Status = ntstatus.ConnectionInvalid
	StatusNetworkUnreachable    Status = ntstatus.NetworkUnreachable
	StatusHostUnreachable       Status = ntstatus.HostUnreachable
	StatusConnectionAborted     Status = ntstatus.ConnectionAborted
	StatusImplementationLimit   Status = ntstatus.ImplementationLimit
	StatusNDISBadVersion        Status = ntstatus.NDISBadVersion
	StatusNDISAdapterNotReady   Status = ntstatus.NDISAdapterNotReady
)

// Completion statuses that NDKPI.md §7 takes from ND2 (IND2CompletionQueue):
// the remaining ones (BUFFER_OVERFLOW, ACCESS_VIOLATION, CANCELLED,
// INTERNAL_ERROR, IO_TIMEOUT, REMOTE_RESOURCES) are above.
const (
	StatusDataOverrun          Status = ntstatus.DataOverrun
	StatusInvalidDeviceRequest Status = ntstatus.InvalidDeviceRequest
)

// Codes outside NDKPI.md §7 (values from ntstatus.h) for situations that
// only a Go API has: StatusInvalidHandle for a call on an object that was
// closed (NDK leaves that undefined; Go must not crash), and
// StatusUnsuccessful, which StatusOf reports for an error that carries no
// status.
const (
	StatusInvalidHandle Status = ntstatus.InvalidHandle
	StatusUnsuccessful  Status = ntstatus.Unsuccessful
)

var statusNames = map[Status]string{
	StatusSuccess:               "STATUS_SUCCESS",
	StatusPending:               "STATUS_PENDING",
	StatusBufferOverflow:        "STATUS_BUFFER_OVERFLOW",
	StatusAccessViolation:       "STATUS_ACCESS_VIOLATION",
	StatusInvalidParameter:      "STATUS_INVALID_PARAMETER",
	StatusBufferTooSmall:        "STATUS_BUFFER_TOO_SMALL",
	StatusInvalidParameterMix:   "STATUS_INVALID_PARAMETER_MIX",
	StatusSharingViolation:      "STATUS_SHARING_VIOLATION",
	StatusInsufficientResources: "STATUS_INSUFFICIENT_RESOURCES",
	StatusIOTimeout:             "STATUS_IO_TIMEOUT",
	StatusNotSupported:          "STATUS_NOT_SUPPORTED",
	StatusInternalError:         "STATUS_INTERNAL_ERROR",
	StatusCancelled:             "STATUS_CANCELLED",
	StatusRemoteResources:       "STATUS_REMOTE_RESOURCES",
	StatusInvalidAddress:        "STATUS_INVALID_ADDRESS",
	StatusTooManyAddresses:      "STATUS_TOO_MANY_ADDRESSES",
	StatusAddressAlreadyExists:  "STATUS_ADDRESS_ALREADY_EXISTS",
	StatusConnectionRefused:     "STATUS_CONNECTION_REFUSED",
	StatusConnectionInvalid:     "STATUS_CONNECTION_INVALID",
	StatusNetworkUnreachable:    "STATUS_NETWORK_UNREACHABLE",
	StatusHostUnreachable:       "STATUS_HOST_UNREACHABLE",
	StatusConnectionAborted:     "STATUS_CONNECTION_ABORTED",
	StatusImplementationLimit:   "STATUS_IMPLEMENTATION_LIMIT",
	StatusNDISBadVersion:        "NDIS_STATUS_BAD_VERSION",
	StatusNDISAdapterNotReady:   "NDIS_STATUS_ADAPTER_NOT_READY",
	StatusDataOverrun:           "STATUS_DATA_OVERRUN",
	StatusInvalidDeviceRequest:  "STATUS_INVALID_DEVICE_REQUEST",
	StatusInvalidHandle:         "STATUS_INVALID_HANDLE",
	StatusUnsuccessful:          "STATUS_UNSUCCESSFUL",
}

// String returns the header name, e.g. "STATUS_CONNECTION_INVALID", or the
// hex value for a code ndkxdp does not name.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("NTSTATUS(%#08x)", uint32(s))
}

// IsSuccess mirrors NT_SUCCESS: true for success and informational codes
// (STATUS_PENDING included), false for warnings and errors.
func (s Status) IsSuccess() bool { return int32(s) >= 0 }

// Error is a failed NDK call: the NTSTATUS code a Windows provider would
// return, what ndkxdp was doing, and why.
//
// errors.Is matches an *Error against the sentinel of the same status (for
// example ErrInvalidParameter), however deep it is wrapped.
type Error struct {
	Status Status
	Op     string // the call that failed, e.g. "create cq"
	Detail string // what was wrong, e.g. "depth 70000 exceeds MaxCQDepth 65536"
	Err    error  // the underlying cause, if any
}

func (e *Error) Error() string {
	msg := "ndk: "
	if e.Op != "" {
		msg += e.Op + ": "
	}
	if e.Detail != "" {
		msg += e.Detail + " "
	}
	if e.Op == "" && e.Detail == "" {
		msg += e.Status.String()
	} else {
		msg += "(" + e.Status.String() + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Detail == "" && t.Err == nil && t.Status == e.Status
}

// Sentinel errors, one per failure status: test with errors.Is.
var (
	ErrBufferOverflow        = &Error{Status: StatusBufferOverflow}
	ErrAccessViolation       = &Error{Status: StatusAccessViolation}
	ErrInvalidParameter      = &Error{Status: StatusInvalidParameter}
	ErrBufferTooSmall        = &Error{Status: StatusBufferTooSmall}
	ErrInvalidParameterMix   = &Error{Status: StatusInvalidParameterMix}
	ErrSharingViolation      = &Error{Status: StatusSharingViolation}
	ErrInsufficientResources = &Error{Status: StatusInsufficientResources}
	ErrIOTimeout             = &Error{Status: StatusIOTimeout}
	ErrNotSupported          = &Error{Status: StatusNotSupported}
	ErrInternalError         = &Error{Status: StatusInternalError}
	ErrCancelled             = &Error{Status: StatusCancelled}
	ErrRemoteResources       = &Error{Status: StatusRemoteResources}
	ErrInvalidAddress        = &Error{Status: StatusInvalidAddress}
	ErrTooManyAddresses      = &Error{Status: StatusTooManyAddresses}
	ErrAddressAlreadyExists  = &Error{Status: StatusAddressAlreadyExists}
	ErrConnectionRefused     = &Error{Status: StatusConnectionRefused}
	ErrConnectionInvalid     = &Error{Status: StatusConnectionInvalid}
	ErrNetworkUnreachable    = &Error{Status: StatusNetworkUnreachable}
	ErrHostUnreachable       = &Error{Status: StatusHostUnreachable}
	ErrConnectionAborted     = &Error{Status: StatusConnectionAborted}
	ErrImplementationLimit   = &Error{Status: StatusImplementationLimit}
	ErrNDISBadVersion        = &Error{Status: StatusNDISBadVersion}
	ErrNDISAdapterNotReady   = &Error{Status: StatusNDISAdapterNotReady}
	ErrDataOverrun           = &Error{Status: StatusDataOverrun}
	ErrInvalidDeviceRequest  = &Error{Status: StatusInvalidDeviceRequest}
	ErrInvalidHandle         = &Error{Status: StatusInvalidHandle}
	ErrUnsuccessful          = &Error{Status: StatusUnsuccessful}
)

// StatusOf returns the NTSTATUS carried by err: StatusSuccess for nil, the
// status of the first *Error in err's chain, or StatusUnsuccessful for an
// error that carries none.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return StatusUnsuccessful
}

// errorf builds the error an ndk call returns; off the data path only.
func errorf(s Status, op, format string, args ...any) error {
	return &Error{Status: s, Op: op, Detail: fmt.Sprintf(format, args...)}
}
