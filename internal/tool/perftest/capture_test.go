package perftest

import (
	"bytes"
	"encoding/binary"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Frame 87 of rdma_cm.pcap: the client's pingpong_dest for its data QP.
var capturedDest = []byte{
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x3e, 0x00, 0x8b, 0x44, 0x72,
	0x00, 0x00, 0x35, 0x46, 0xff, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x5b, 0xcb, 0xcc, 0x7c, 0xb0, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x0a, 0x01, 0x10, 0x3e,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
}

func TestDestWireLayout(t *testing.T) {
	d, err := DecodeDest(capturedDest)
	if err != nil {
		t.Fatal(err)
	}
	gid := netip.MustParseAddr("::ffff:10.1.16.62").As16()
	want := Dest{OutReads: 1, QPN: 0x3e, PSN: 0x8b4472, RKey: 0x3546, VAddr: 0x5bcbcc7cb000, GID: gid, GIDIndex: 1}
	if d != want {
		t.Fatalf("decoded %+v, want %+v", d, want)
	}
	var b [DestLen]byte
	if err := d.Put(b[:]); err != nil {
		t.Fatal(err)
	}
	// Identical but for the sender's stack garbage in the padding.
	exp := slices.Clone(capturedDest)
	clear(exp[20:24])
	if !bytes.Equal(b[:], exp) {
		t.Fatalf("Put = % x\nwant  % x", b, exp)
	}
	if _, err := DecodeDest(capturedDest[:55]); err == nil {
		t.Fatal("55-byte dest accepted")
	}
}

// captured is the control-connection conversation of rdma_cm.pcap
// (ib_write_bw --rdma_cm -s 3000 -n 5 on rxe, perftest 6.20).
type captured struct {
	client, server [][]byte // control SEND payloads, in order
	dataREQAfter   int      // client control messages sent before the data REQ
}

func readCapture(t *testing.T) captured {
	t.Helper()
	path := testenv.RequireFile(t, filepath.Join("..", "..", "..", "..", "shared", "testdata", "pcaps", "linlinw5__rdma_ib_tutorial", "rdma_cm.pcap"))
	f, err := pcapfile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c captured
	var ctlServerQP, ctlClientQP uint32
	reqs := 0
	for _, fr := range f.Packets {
		var p rocev2.Packet
		if err := rocev2.Parse(fr.Data, &p); err != nil {
			t.Fatalf("frame %d: %v", fr.Index, err)
		}
		if p.BTH.DestQP == 1 {
			// A CM MAD; attribute ID 0x0010 is REQ.
			if binary.BigEndian.Uint16(p.Payload[16:]) == 0x0010 {
				reqs++
				if reqs == 2 {
					c.dataREQAfter = len(c.client)
				}
			}
			continue
		}
		if p.BTH.Opcode != rocev2.RCSendOnly {
			continue
		}
		// The first SEND is the client's, to the server's control QP.
		if ctlServerQP == 0 {
			ctlServerQP = p.BTH.DestQP
		} else if ctlClientQP == 0 && p.BTH.DestQP != ctlServerQP {
			ctlClientQP = p.BTH.DestQP
		}
		switch p.BTH.DestQP {
		case ctlServerQP:
			c.client = append(c.client, slices.Clone(p.Payload))
		case ctlClientQP:
			c.server = append(c.server, slices.Clone(p.Payload))
		}
	}
	return c
}

func TestCaptureMatchesOurFlow(t *testing.T) {
	c := readCapture(t)
	sizes := func(ms [][]byte) []int {
		var s []int
		for _, m := range ms {
			s = append(s, len(m))
		}
		return s
	}
	// Our own ib_write_bw client, on the in-memory network, sends the same
	// sequence of control messages.
	p := Params{Verb: Write, Kind: BW, Size: 3000, Iterations: 5}
	pr := runPair(t, p, p, 0)
	if pr.cerr != nil || pr.serr != nil {
		t.Fatalf("client %v server %v", pr.cerr, pr.serr)
	}
	if got, want := pr.rec.sent, sizes(c.client); !slices.Equal(got, want) {
		t.Fatalf("our client's control messages %v\ncapture's                %v", got, want)
	}
	if !slices.Equal(sizes(c.server), sizes(c.client)) {
		t.Fatalf("server messages %v do not mirror the client's %v", sizes(c.server), sizes(c.client))
	}
	// The data connection comes right after the first pingpong_dest
	// exchange (create_rdma_cm_connection).
	if c.dataREQAfter != 5 || len(c.client[4]) != DestLen {
		t.Fatalf("data REQ after %d client messages, want 5 (version, 2 x sys data, MTU, handshake)", c.dataREQAfter)
	}

	// Contents: version, system data, MTU, the dests, the report.
	if v, f, err := parseVersion(c.client[0]); err != nil || v != "6.20" || f < minPeerVersion {
		t.Errorf("version %q %v %v", v, f, err)
	}
	if be32(c.client[1]) != 4096 || be32(c.client[2]) != 64 {
		t.Errorf("cycle buffer %d, cache line %d", be32(c.client[1]), be32(c.client[2]))
	}
	if !bytes.Equal(c.client[3], []byte("3\x00")) {
		t.Errorf("MTU message %q, want enum IBV_MTU_1024 as \"3\"", c.client[3])
	}
	for i := 4; i <= 5; i++ {
		d, err := DecodeDest(c.client[i])
		if err != nil || d.RKey != 0 || d.VAddr != 0 || d.QPN != 0 {
			t.Errorf("handshake %d around the data connection should carry zeroed dests: %+v %v", i, d, err)
		}
	}
	d, err := DecodeDest(c.client[6])
	if err != nil || d.RKey == 0 || d.VAddr == 0 {
		t.Errorf("first real dest %+v %v", d, err)
	}
	var f [5]uint64
	for i := range f {
		f[i] = be64(c.client[10+i])
	}
	r := reportFrom(f)
	if r.Size != 3000 || r.Iters != 5 || !(r.BWAvg > 0) || !(r.BWPeak > 0.99*r.BWAvg) || !(r.MsgRate > 0) || math.IsInf(r.BWPeak, 0) {
		t.Errorf("client's report %+v", r)
	}
	// perftest's integer peak windows can leave the peak a hair under the
	// average, as here. The server's report fields are its uninitialised
	// bw_report_data, which the client ignores; ours are zero.
}
