package ndkpi

import "fmt"

// Status is an NTSTATUS code, as NDKPI returns from provider functions, passes
// to notification callbacks (CqStatus) and stores in NDK_RESULT.Status.
// Values: NDKPI.md §7, from mingw-w64 ntstatus.h and ndis.h.
type Status uint32

// Status codes of NDKPI.md §7.
const (
	StatusSuccess               Status = 0x00000000
	StatusPending               Status = 0x00000103
	StatusBufferOverflow        Status = 0x80000005 // CqStatus: overrun; completion: receive buffer too small
	StatusAccessViolation       Status = 0xC0000005
	StatusInvalidParameter      Status = 0xC000000D
	StatusBufferTooSmall        Status = 0xC0000023
	StatusInvalidParameterMix   Status = 0xC0000030
	StatusSharingViolation      Status = 0xC0000043
	StatusInsufficientResources Status = 0xC000009A
	StatusIOTimeout             Status = 0xC00000B5
	StatusNotSupported          Status = 0xC00000BB
	StatusInternalError         Status = 0xC00000E5
	StatusCancelled             Status = 0xC0000120
	StatusRemoteResources       Status = 0xC000013D
	StatusInvalidAddress        Status = 0xC0000141
	StatusTooManyAddresses      Status = 0xC0000209
	StatusAddressAlreadyExists  Status = 0xC000020A
	StatusConnectionRefused     Status = 0xC0000236
	StatusConnectionInvalid     Status = 0xC000023A
	StatusNetworkUnreachable    Status = 0xC000023C
	StatusHostUnreachable       Status = 0xC000023D
	StatusConnectionAborted     Status = 0xC0000241
	StatusImplementationLimit   Status = 0xC000042B
	StatusNDISBadVersion        Status = 0xC0010004
	StatusNDISAdapterNotReady   Status = 0xC0010011
)

// Completion statuses that NDKPI.md §7 takes from ND2 (IND2CompletionQueue):
// the remaining ones (BUFFER_OVERFLOW, ACCESS_VIOLATION, CANCELLED,
// INTERNAL_ERROR, IO_TIMEOUT, REMOTE_RESOURCES) are above.
const (
	StatusDataOverrun          Status = 0xC000003C
	StatusInvalidDeviceRequest Status = 0xC0000010
)

// Codes outside NDKPI.md §7 (values from ntstatus.h) for situations that
// only a Go API has: StatusInvalidHandle for a call on an object that was
// closed (NDK leaves that undefined; Go must not crash), and
// StatusUnsuccessful, which StatusOf reports for an error that carries no
// status; StatusQuotaExceeded for a daemon's client that reached one of
// the daemon's quotas (the error names which), StatusAccessDenied for one
// the daemon's allow list does not admit, and StatusConnectionReset for a
// daemon-backed adapter whose daemon is gone.
const (
	StatusInvalidHandle Status = 0xC0000008
	StatusUnsuccessful  Status = 0xC0000001
	StatusQuotaExceeded Status = 0xC0000044
	StatusAccessDenied  Status = 0xC0000022
	// StatusConnectionReset: a daemon-backed adapter's daemon went away
	// (its socket hung up), as ECONNRESET is a socket's peer going away.
	StatusConnectionReset Status = 0xC000020D
)

// StatusNames is the header name of every status above; tests hold it to
// the constants.
var StatusNames = map[Status]string{
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
	StatusQuotaExceeded:         "STATUS_QUOTA_EXCEEDED",
	StatusAccessDenied:          "STATUS_ACCESS_DENIED",
	StatusConnectionReset:       "STATUS_CONNECTION_RESET",
}

// String returns the header name, e.g. "STATUS_CONNECTION_INVALID", or the
// hex value for a code ndkxdp does not name.
func (s Status) String() string {
	if n, ok := StatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("NTSTATUS(%#08x)", uint32(s))
}

// IsSuccess mirrors NT_SUCCESS: true for success and informational codes
// (STATUS_PENDING included), false for warnings and errors.
func (s Status) IsSuccess() bool { return int32(s) >= 0 }
