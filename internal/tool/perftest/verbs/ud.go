package verbs

import "context"

// GRHLen is what a UD receive holds ahead of the payload: the GRH, or for
// RoCEv2 its IP header in rxe's layout (perftest's UD_ADDITION).
const GRHLen = 40

// UDConnector is implemented by Connectors that open unreliable-datagram
// endpoints (perftest -c UD): ConnectUD resolves the peer's UD QP behind
// port through rdma_cm's UDP port space (SIDR) and returns an endpoint
// whose Send goes to it. A refusal (no service on the port yet) is
// returned as a *RejectError with reason RejectInvalidServiceID, as for
// Connect, so that callers retry it alike.
type UDConnector interface {
	ConnectUD(ctx context.Context, port uint16, p ConnParams) (Endpoint, error)
}

// UDListener is implemented by Listeners that serve UD endpoints on their
// port of rdma_cm's UDP port space: AcceptUD makes a UD endpoint,
// prepares it (p.Prepare posts its receives), answers resolution requests
// for it and returns once one was answered. Each receive holds GRHLen
// bytes ahead of the datagram, and its completion counts them. The
// endpoint receives only; its Send fails with ErrInvalid.
type UDListener interface {
	AcceptUD(ctx context.Context, p ConnParams) (Endpoint, error)
}
