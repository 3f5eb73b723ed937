package cm

import (
	"errors"
	"fmt"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Error is a failed connection-management call or a connection that ended
// badly. Status is the NTSTATUS NDKPI gives the situation (NDKPI.md §3
// Connector and Listener tables, §7); package ndk turns it into its own
// error type with StatusOf.
//
// errors.Is matches an *Error against the sentinel of the same status.
type Error struct {
	Status uint32
	Op     string // e.g. "connect", "accept"
	Detail string
	Err    error // cause, e.g. a *RejectError or a QP error
}

func (e *Error) Error() string {
	msg := "cm: "
	if e.Op != "" {
		msg += e.Op + ": "
	}
	if e.Detail != "" {
		msg += e.Detail + " "
	}
	msg += fmt.Sprintf("(NTSTATUS %#08x %s)", e.Status, statusName(e.Status))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Detail == "" && t.Err == nil && t.Status == e.Status
}

// Sentinels, one per status this package produces.
var (
	ErrConnectionRefused    = &Error{Status: ntstatus.ConnectionRefused}
	ErrIOTimeout            = &Error{Status: ntstatus.IOTimeout}
	ErrConnectionAborted    = &Error{Status: ntstatus.ConnectionAborted}
	ErrConnectionInvalid    = &Error{Status: ntstatus.ConnectionInvalid}
	ErrAddressAlreadyExists = &Error{Status: ntstatus.AddressAlreadyExists}
	ErrSharingViolation     = &Error{Status: ntstatus.SharingViolation}
	ErrInvalidAddress       = &Error{Status: ntstatus.InvalidAddress}
	ErrTooManyAddresses     = &Error{Status: ntstatus.TooManyAddresses}
	ErrNetworkUnreachable   = &Error{Status: ntstatus.NetworkUnreachable}
	ErrHostUnreachable      = &Error{Status: ntstatus.HostUnreachable}
	ErrInvalidParameter     = &Error{Status: ntstatus.InvalidParameter}
	ErrCancelled            = &Error{Status: ntstatus.Cancelled}
	ErrInvalidHandle        = &Error{Status: ntstatus.InvalidHandle}
)

// StatusOf returns the NTSTATUS carried by err: Success for nil, the status
// of the first *Error in its chain, or Unsuccessful.
func StatusOf(err error) uint32 {
	if err == nil {
		return ntstatus.Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return ntstatus.Unsuccessful
}

func errorf(status uint32, op string, cause error, format string, args ...any) error {
	return &Error{Status: status, Op: op, Detail: fmt.Sprintf(format, args...), Err: cause}
}

func statusName(s uint32) string {
	switch s {
	case ntstatus.ConnectionRefused:
		return "CONNECTION_REFUSED"
	case ntstatus.IOTimeout:
		return "IO_TIMEOUT"
	case ntstatus.ConnectionAborted:
		return "CONNECTION_ABORTED"
	case ntstatus.ConnectionInvalid:
		return "CONNECTION_INVALID"
	case ntstatus.AddressAlreadyExists:
		return "ADDRESS_ALREADY_EXISTS"
	case ntstatus.SharingViolation:
		return "SHARING_VIOLATION"
	case ntstatus.InvalidAddress:
		return "INVALID_ADDRESS"
	case ntstatus.TooManyAddresses:
		return "TOO_MANY_ADDRESSES"
	case ntstatus.NetworkUnreachable:
		return "NETWORK_UNREACHABLE"
	case ntstatus.HostUnreachable:
		return "HOST_UNREACHABLE"
	case ntstatus.InvalidParameter:
		return "INVALID_PARAMETER"
	case ntstatus.Cancelled:
		return "CANCELLED"
	case ntstatus.InvalidHandle:
		return "INVALID_HANDLE"
	}
	return "NTSTATUS"
}

// RejectError is the cause of a CONNECTION_REFUSED or CONNECTION_ABORTED
// that a peer's REJ produced: its reason and private data (IBTA table 108).
type RejectError struct {
	Reason      rocev2.RejectReason
	PrivateData []byte // the REJ's 148 private-data bytes
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("peer sent REJ reason %d (%v)", e.Reason, e.Reason)
}
