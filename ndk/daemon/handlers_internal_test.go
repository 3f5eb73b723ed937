package daemon

import (
	"slices"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// TestHandlerTable: the operations that may wait on the network (and so
// run on their own goroutine, under a deadline, and can be cancelled)
// are the CM exchanges and a UD resolution (SIDR); those a client may
// send before its hello are the hello, a cancel and the operator's
// requests; only hello and arena keep the descriptors sent with them.
func TestHandlerTable(t *testing.T) {
	var blocking, early, fds, admins []string
	for op, h := range handlers {
		if h.op != op {
			t.Errorf("handler of %q is filed under %q", h.op, op)
		}
		if h.blocks {
			blocking = append(blocking, op)
		}
		if h.beforeHello {
			early = append(early, op)
		}
		if h.takesFDs {
			fds = append(fds, op)
		}
		if h.admin {
			admins = append(admins, op)
		}
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"blocking", blocking, []string{proto.OpAccept, proto.OpCompleteConnect, proto.OpConnect, proto.OpConnectOOB, proto.OpDisconnect, proto.OpReject, proto.OpResolveUD}},
		{"before hello", early, []string{OpAdminDump, OpAdminInfo, OpAdminQPs, OpAdminStats, OpAdminStatus, proto.OpCancel, proto.OpHello}},
		{"with descriptors", fds, []string{proto.OpArena, proto.OpHello}},
		{"operator", admins, []string{OpAdminDump, OpAdminInfo, OpAdminQPs, OpAdminStats, OpAdminStatus}},
	} {
		slices.Sort(c.got)
		slices.Sort(c.want)
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
}
