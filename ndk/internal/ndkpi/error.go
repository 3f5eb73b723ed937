package ndkpi

import (
	"errors"
	"fmt"
)

// Error is a failed NDK call: the NTSTATUS code a Windows provider would
// return, what ndkxdp was doing, and why. The engine's connection
// management returns it too, so a caller sees one error type whichever
// layer failed.
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
	ErrQuotaExceeded         = &Error{Status: StatusQuotaExceeded}
	ErrAccessDenied          = &Error{Status: StatusAccessDenied}
	ErrConnectionReset       = &Error{Status: StatusConnectionReset}
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

// Errorf returns an *Error with status s, op, cause and a formatted detail;
// off the data path only.
func Errorf(s Status, op string, cause error, format string, args ...any) error {
	return &Error{Status: s, Op: op, Detail: fmt.Sprintf(format, args...), Err: cause}
}
