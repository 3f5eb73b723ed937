package ntstatus

// NTSTATUS codes of NDKPI.md §7, plus the ND2 completion statuses listed
// there, plus two codes ndkxdp needs for Go-only situations (Unsuccessful,
// InvalidHandle).
const (
	Success              = 0x00000000
	Pending              = 0x00000103
	BufferOverflow       = 0x80000005
	Unsuccessful         = 0xC0000001
	AccessViolation      = 0xC0000005
	InvalidHandle        = 0xC0000008
	InvalidParameter     = 0xC000000D
	InvalidDeviceRequest = 0xC0000010
	BufferTooSmall       = 0xC0000023
	InvalidParameterMix  = 0xC0000030
	DataOverrun          = 0xC000003C
	SharingViolation     = 0xC0000043
	InsufficientResource = 0xC000009A
	IOTimeout            = 0xC00000B5
	NotSupported         = 0xC00000BB
	InternalError        = 0xC00000E5
	Cancelled            = 0xC0000120
	RemoteResources      = 0xC000013D
	InvalidAddress       = 0xC0000141
	TooManyAddresses     = 0xC0000209
	AddressAlreadyExists = 0xC000020A
	ConnectionRefused    = 0xC0000236
	ConnectionInvalid    = 0xC000023A
	NetworkUnreachable   = 0xC000023C
	HostUnreachable      = 0xC000023D
	ConnectionAborted    = 0xC0000241
	ImplementationLimit  = 0xC000042B
	NDISBadVersion       = 0xC0010004
	NDISAdapterNotReady  = 0xC0010011
)
