package ndk

import (
	"context"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The daemon does not relay UD QPs or SIDR: the UD extension (ud.go) runs
// in process only, and a daemon-backed adapter says so.

const udInProcessOnly = "UD QPs and services run in process only, not through a daemon"

func (b *daemonPD) createUDQP(QPConfig, uint32) (*QP, error) {
	return nil, errorf(StatusNotSupported, "create ud qp", udInProcessOnly)
}

func (r *daemonLink) serveUD(netip.AddrPort, *QP) (*cm.UDService, error) {
	return nil, errorf(StatusNotSupported, "serve ud", udInProcessOnly)
}

func (r *daemonLink) resolveUD(context.Context, netip.AddrPort) (UDDestination, error) {
	return UDDestination{}, errorf(StatusNotSupported, "resolve ud", udInProcessOnly)
}

func (r *daemonLink) nextHop(netip.Addr) (rocev2.MAC, error) {
	return rocev2.MAC{}, errorf(StatusNotSupported, "ud reply to", udInProcessOnly)
}
