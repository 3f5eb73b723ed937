package daemon_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestUDNotSupportedThroughDaemon: the UD extension runs in process only;
// through a daemon each of its calls is STATUS_NOT_SUPPORTED, saying so.
func TestUDNotSupportedThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	_, err := c.pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4}, ndk.RDMAUDPQKey)
	if !errors.Is(err, ndk.ErrNotSupported) {
		t.Fatalf("CreateUDQP through a daemon: %v, want STATUS_NOT_SUPPORTED", err)
	}
	if _, err := c.a.ServeUD(netip.MustParseAddrPort("0.0.0.0:7174"), c.qp); !errors.Is(err, ndk.ErrNotSupported) {
		t.Fatalf("ServeUD through a daemon: %v", err)
	}
	if _, err := c.a.ResolveUD(context.Background(), netip.MustParseAddrPort("198.18.0.2:7174")); !errors.Is(err, ndk.ErrNotSupported) {
		t.Fatalf("ResolveUD through a daemon: %v", err)
	}
	if _, err := c.a.UDReplyTo(make([]byte, ndk.UDGRHSize), 2, ndk.RDMAUDPQKey); err == nil {
		t.Fatal("UDReplyTo through a daemon succeeded")
	}
	if err := c.qp.SendTo(nil, nil, ndk.UDDestination{}, 0); !errors.Is(err, ndk.ErrInvalidDeviceRequest) {
		t.Fatalf("SendTo on a daemon's RC QP: %v", err)
	}
}
