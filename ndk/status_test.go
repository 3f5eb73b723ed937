package ndk

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// statusTable pins every status to the hex value and header name of
// NDKPI.md §7 (and the two Go-only codes, from ntstatus.h).
var statusTable = []struct {
	s     Status
	hex   uint32
	name  string
	err   *Error
	isErr bool
}{
	{StatusSuccess, 0x00000000, "STATUS_SUCCESS", nil, false},
	{StatusPending, 0x00000103, "STATUS_PENDING", nil, false},
	{StatusBufferOverflow, 0x80000005, "STATUS_BUFFER_OVERFLOW", ErrBufferOverflow, true},
	{StatusAccessViolation, 0xC0000005, "STATUS_ACCESS_VIOLATION", ErrAccessViolation, true},
	{StatusInvalidParameter, 0xC000000D, "STATUS_INVALID_PARAMETER", ErrInvalidParameter, true},
	{StatusBufferTooSmall, 0xC0000023, "STATUS_BUFFER_TOO_SMALL", ErrBufferTooSmall, true},
	{StatusInvalidParameterMix, 0xC0000030, "STATUS_INVALID_PARAMETER_MIX", ErrInvalidParameterMix, true},
	{StatusSharingViolation, 0xC0000043, "STATUS_SHARING_VIOLATION", ErrSharingViolation, true},
	{StatusInsufficientResources, 0xC000009A, "STATUS_INSUFFICIENT_RESOURCES", ErrInsufficientResources, true},
	{StatusIOTimeout, 0xC00000B5, "STATUS_IO_TIMEOUT", ErrIOTimeout, true},
	{StatusNotSupported, 0xC00000BB, "STATUS_NOT_SUPPORTED", ErrNotSupported, true},
	{StatusInternalError, 0xC00000E5, "STATUS_INTERNAL_ERROR", ErrInternalError, true},
	{StatusCancelled, 0xC0000120, "STATUS_CANCELLED", ErrCancelled, true},
	{StatusRemoteResources, 0xC000013D, "STATUS_REMOTE_RESOURCES", ErrRemoteResources, true},
	{StatusInvalidAddress, 0xC0000141, "STATUS_INVALID_ADDRESS", ErrInvalidAddress, true},
	{StatusTooManyAddresses, 0xC0000209, "STATUS_TOO_MANY_ADDRESSES", ErrTooManyAddresses, true},
	{StatusAddressAlreadyExists, 0xC000020A, "STATUS_ADDRESS_ALREADY_EXISTS", ErrAddressAlreadyExists, true},
	{StatusConnectionRefused, 0xC0000236, "STATUS_CONNECTION_REFUSED", ErrConnectionRefused, true},
	{StatusConnectionInvalid, 0xC000023A, "STATUS_CONNECTION_INVALID", ErrConnectionInvalid, true},
	{StatusNetworkUnreachable, 0xC000023C, "STATUS_NETWORK_UNREACHABLE", ErrNetworkUnreachable, true},
	{StatusHostUnreachable, 0xC000023D, "STATUS_HOST_UNREACHABLE", ErrHostUnreachable, true},
	{StatusConnectionAborted, 0xC0000241, "STATUS_CONNECTION_ABORTED", ErrConnectionAborted, true},
	{StatusImplementationLimit, 0xC000042B, "STATUS_IMPLEMENTATION_LIMIT", ErrImplementationLimit, true},
	{StatusNDISBadVersion, 0xC0010004, "NDIS_STATUS_BAD_VERSION", ErrNDISBadVersion, true},
	{StatusNDISAdapterNotReady, 0xC0010011, "NDIS_STATUS_ADAPTER_NOT_READY", ErrNDISAdapterNotReady, true},
	{StatusDataOverrun, 0xC000003C, "STATUS_DATA_OVERRUN", ErrDataOverrun, true},
	{StatusInvalidDeviceRequest, 0xC0000010, "STATUS_INVALID_DEVICE_REQUEST", ErrInvalidDeviceRequest, true},
	{StatusInvalidHandle, 0xC0000008, "STATUS_INVALID_HANDLE", ErrInvalidHandle, true},
	{StatusUnsuccessful, 0xC0000001, "STATUS_UNSUCCESSFUL", ErrUnsuccessful, true},
	{StatusQuotaExceeded, 0xC0000044, "STATUS_QUOTA_EXCEEDED", ErrQuotaExceeded, true},
	{StatusAccessDenied, 0xC0000022, "STATUS_ACCESS_DENIED", ErrAccessDenied, true},
	{StatusConnectionReset, 0xC000020D, "STATUS_CONNECTION_RESET", ErrConnectionReset, true},
}

func TestStatusValuesAndNames(t *testing.T) {
	if len(statusTable) != len(ndkpi.StatusNames) {
		t.Fatalf("table has %d statuses, ndkpi.StatusNames %d: a status is untested or unnamed", len(statusTable), len(ndkpi.StatusNames))
	}
	for _, tc := range statusTable {
		if uint32(tc.s) != tc.hex {
			t.Errorf("%s = %#08x, want %#08x", tc.name, uint32(tc.s), tc.hex)
		}
		if got := tc.s.String(); got != tc.name {
			t.Errorf("%#08x.String() = %q, want %q", tc.hex, got, tc.name)
		}
		if tc.s.IsSuccess() == tc.isErr {
			t.Errorf("%s.IsSuccess() = %v", tc.name, tc.s.IsSuccess())
		}
	}
	if got := Status(0xC0001234).String(); got != "NTSTATUS(0xc0001234)" {
		t.Errorf("unknown status prints %q", got)
	}
}

// TestErrorsIsSurvivesWrapping: for every sentinel, an error built with
// context and wrapped twice still matches it, matches no other sentinel,
// and StatusOf recovers the code.
func TestErrorsIsSurvivesWrapping(t *testing.T) {
	for _, tc := range statusTable {
		if tc.err == nil {
			continue
		}
		if tc.err.Status != tc.s {
			t.Errorf("sentinel for %s carries %v", tc.name, tc.err.Status)
		}
		base := errorf(tc.s, "create cq", "depth %d", 7)
		wrapped := fmt.Errorf("service start: %w", fmt.Errorf("open queue: %w", base))
		if !errors.Is(wrapped, tc.err) {
			t.Errorf("%s: errors.Is(wrapped, sentinel) = false", tc.name)
		}
		for _, other := range statusTable {
			if other.err != nil && other.s != tc.s && errors.Is(wrapped, other.err) {
				t.Errorf("%s matches the sentinel of %s", tc.name, other.name)
			}
		}
		if got := StatusOf(wrapped); got != tc.s {
			t.Errorf("StatusOf(wrapped %s) = %v", tc.name, got)
		}
		if got := StatusOf(tc.err); got != tc.s {
			t.Errorf("StatusOf(sentinel %s) = %v", tc.name, got)
		}
	}
}

func TestStatusOfNilAndForeignErrors(t *testing.T) {
	if s := StatusOf(nil); s != StatusSuccess {
		t.Errorf("StatusOf(nil) = %v", s)
	}
	if s := StatusOf(io.EOF); s != StatusUnsuccessful {
		t.Errorf("StatusOf(io.EOF) = %v", s)
	}
	if errors.Is(io.EOF, ErrUnsuccessful) {
		t.Error("a foreign error matches ErrUnsuccessful")
	}
}

func TestErrorMessageSaysWhatFailed(t *testing.T) {
	msg := errorf(StatusInvalidParameter, "create cq", "depth %d exceeds MaxCQDepth %d", 70000, 65536).Error()
	for _, want := range []string{"create cq", "depth 70000 exceeds MaxCQDepth 65536", "STATUS_INVALID_PARAMETER"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if got := ErrConnectionInvalid.Error(); got != "ndk: STATUS_CONNECTION_INVALID" {
		t.Errorf("sentinel message %q", got)
	}
}

func TestErrorKeepsItsCause(t *testing.T) {
	err := fmt.Errorf("setup: %w", &Error{Status: StatusInsufficientResources, Op: "open adapter", Detail: "token table", Err: io.ErrShortBuffer})
	if !errors.Is(err, io.ErrShortBuffer) || !errors.Is(err, ErrInsufficientResources) {
		t.Fatalf("%v: cause or status lost", err)
	}
	if !strings.Contains(err.Error(), io.ErrShortBuffer.Error()) {
		t.Fatalf("message %q omits the cause", err)
	}
}
