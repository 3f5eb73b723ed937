package interop

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// testPerftestUC runs perftest's send and write tests with -c UC against
// rxe, each side as server and as client: control over TCP (the UC QPs
// connected out of band) for every test, and through rdma_cm (-z) for
// ib_send_bw and ib_write_lat. Both sides print their rows, and every
// frame of a data connection, either way, is a UC SEND or RDMA WRITE
// without AckReq: nothing answers them.
func testPerftestUC(t *testing.T, p *peer) {
	const size = 4096
	for _, c := range []perfCase{
		{"ib_send_bw", perftest.Send, perftest.BW},
		{"ib_write_bw", perftest.Write, perftest.BW},
		{"ib_send_lat", perftest.Send, perftest.Lat},
		{"ib_write_lat", perftest.Write, perftest.Lat},
	} {
		prm := c.params(size)
		prm.MTU, prm.UC = p.dev.Adapter.PathMTU(), true
		args := fmt.Sprintf("-d rxe0 -x %d -F -n %d -p %d -s %d -c UC", p.vm.Guest.GIDIndex, prm.Iterations, prm.Port, prm.Size)
		tcpBothWays(t, p, c.tool+"_uc", prm, c.timeout(), c.tool+" "+args, func(t *testing.T, rxeServer bool, theirs, ours string, res perftest.Result) {
			requireRow(t, "rxe", theirs, theirs, prm)
			who, calib := "ndkxdp", ours
			if !rxeServer && prm.Kind == perftest.BW && prm.Verb != perftest.Send {
				who, calib = "ndkxdp's server (printing rxe's report)", theirs
			}
			requireRow(t, who, ours, calib, prm)
			requireOOBAddresses(t, theirs, ours, res)
			requireUCFrames(t, p, res)
		})
	}
	// -z: the control connection through rdma_cm, the UC data QPs out
	// of band (perftest refuses -R with UC: "UC is not supported in
	// librdmacm").
	for _, c := range []perfCase{{"ib_send_bw", perftest.Send, perftest.BW}, {"ib_write_lat", perftest.Write, perftest.Lat}} {
		prm := c.params(size)
		prm.MTU, prm.UC, prm.Comm = p.dev.Adapter.PathMTU(), true, perftest.CommRDMACMControl
		cmd := fmt.Sprintf("%s -z -d rxe0 -x %d -F -n %d -s %d -p %d -c UC", c.tool, p.vm.Guest.GIDIndex, prm.Iterations, prm.Size, prm.Port)
		zBothWays(t, p, c.tool+"_uc_z", prm, c.timeout(), cmd, func(t *testing.T, _ bool, theirs, ours string, res perftest.Result) {
			requireRow(t, "rxe", theirs, theirs, prm)
			requireRow(t, "ndkxdp", ours, ours, prm)
			requireOOBAddresses(t, theirs, ours, res)
			requireUCFrames(t, p, res)
		})
	}
}

// requireUCFrames checks the frames of the data connection(s) of res,
// both ways: some, each a UC opcode without AckReq (rxe's UC packets
// ask for none either), and nothing else: no ACK, no RC packet.
func requireUCFrames(t *testing.T, p *peer, res perftest.Result) {
	t.Helper()
	locals, peers := res.Locals, res.Peers
	if peers == nil {
		locals, peers = []perftest.Dest{res.Local}, []perftest.Dest{res.Peer}
	}
	data := map[uint32]bool{}
	for _, d := range append(slices.Clone(locals), peers...) {
		data[uint32(d.QPN)] = true
	}
	n := 0
	for _, f := range p.framesNow(t) {
		var pkt rocev2.Packet
		if rocev2.Parse(f.Data, &pkt) != nil || !data[pkt.BTH.DestQP] {
			continue
		}
		if pkt.BTH.Opcode.Transport() != rocev2.TransportUC || pkt.BTH.AckReq {
			t.Fatalf("%v (AckReq %v) on the UC data connection, to QP %#x", pkt.BTH.Opcode, pkt.BTH.AckReq, pkt.BTH.DestQP)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("no frame on the data connection(s) %v <-> %v", locals, peers)
	}
}
