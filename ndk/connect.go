package ndk

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Endpoint is what one side of a connection tells the other out of band,
// the way ibv_rc_pingpong exchanges LID/QPN/PSN over TCP: its address,
// MAC, QP number and the first PSN it sends.
type Endpoint struct {
	IP  netip.Addr
	MAC net.HardwareAddr // may be empty in a remote endpoint: resolved through the kernel's neighbour table
	QPN uint32
	PSN uint32
}

// String formats e as IP/MAC/QPN/PSN, e.g.
// "198.18.0.1/02:00:00:00:00:01/0x000100/0x3a5c01"; ParseEndpoint reads it.
func (e Endpoint) String() string {
	return fmt.Sprintf("%v/%v/%#06x/%#06x", e.IP, e.MAC, e.QPN, e.PSN)
}

// ParseEndpoint reads the form Endpoint.String writes; the MAC may be
// empty ("198.18.0.2//0x100/0x0").
func ParseEndpoint(s string) (Endpoint, error) {
	f := strings.Split(s, "/")
	if len(f) != 4 {
		return Endpoint{}, fmt.Errorf("endpoint %q: want IP/MAC/QPN/PSN", s)
	}
	var e Endpoint
	var err error
	if e.IP, err = netip.ParseAddr(f[0]); err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %q: %w", s, err)
	}
	if f[1] != "" {
		if e.MAC, err = net.ParseMAC(f[1]); err != nil {
			return Endpoint{}, fmt.Errorf("endpoint %q: %w", s, err)
		}
	}
	for i, dst := range []*uint32{&e.QPN, &e.PSN} {
		v, err := strconv.ParseUint(f[2+i], 0, 24)
		if err != nil {
			return Endpoint{}, fmt.Errorf("endpoint %q: %w", s, err)
		}
		*dst = uint32(v)
	}
	return e, nil
}

// ConnectOptions are the connection's transport parameters. Zero fields
// take the defaults listed; both sides should agree on the read limits
// (each side's outbound limit at most the other's inbound), as IB CM's
// REQ/REP negotiation would make them.
type ConnectOptions struct {
	// PathMTU in bytes: 256, 512, 1024, 2048 or 4096 (default the
	// largest the interface carries, Adapter.PathMTU).
	PathMTU int
	// InboundReadLimit and OutboundReadLimit (default 16 each, capped
	// by AdapterInfo's MaxInboundReadLimit and MaxOutboundReadLimit).
	InboundReadLimit, OutboundReadLimit int
	// AckTimeout (default 4.096 us * 2^14, about 67 ms: IB timeout code 14).
	AckTimeout time.Duration
	// RetryCount is how many times an unacknowledged packet is resent
	// (0-7, default 7). RNRRetry is how many RNR NAKs are waited out (0-7,
	// default 7: without limit).
	RetryCount, RNRRetry *int
	// MinRNRTimer is the wait our RNR NAKs ask for (default 10 us,
	// rounded up to IB's table).
	MinRNRTimer time.Duration
	// TrafficClass, if set, is the connection's DSCP, ECN and VLAN
	// priority; nil takes the adapter's (Options.TrafficClass).
	TrafficClass *TrafficClass
}

// LocalEndpoint returns this QP's side of the out-of-band exchange. The
// PSN was drawn at random when the QP was created.
func (q *QP) LocalEndpoint() Endpoint {
	a := q.adapter
	return Endpoint{IP: a.LocalAddress(), MAC: a.MAC(), QPN: q.QPN(), PSN: q.psn}
}

// ConnectOOB connects the QP to remote, which the peer's LocalEndpoint
// gave out of band (ibv_rc_pingpong style): the path for tools and tests
// that set up both ends themselves. Connections with peers that use the
// IB CM (librdmacm applications, other ndkxdp adapters) go through
// Connector and Listener instead. A remote without MAC is resolved
// through the kernel's neighbour table, probing the address if it has no
// entry yet. It must run in the adapter's network namespace.
//
// It fails with STATUS_INVALID_PARAMETER for out-of-range options or a
// remote of the wrong address family, STATUS_HOST_UNREACHABLE when the MAC
// cannot be resolved, and STATUS_CONNECTION_INVALID when the QP is already
// connected, failed or closed.
func (q *QP) ConnectOOB(remote Endpoint, opts ConnectOptions) error {
	return q.be.connectOOB(remote, opts)
}
