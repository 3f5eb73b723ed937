package rping

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestCaptureDecodes replays rping.pcap (rxe, rping -S 64 -C 5): every
// client SEND decodes as an rping_rdma_info advertising a 64-byte buffer,
// every server SEND is a 16-byte zero go-ahead, each READ response is the
// ping FillPing builds and each WRITE echoes it, in the order rping.c runs.
func TestCaptureDecodes(t *testing.T) {
	path := testenv.RequireFile(t, filepath.Join("..", "..", "..", "..", "shared", "testdata", "pcaps", "linlinw5__rdma_ib_tutorial", "rping.pcap"))
	f, err := pcapfile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		seq      []string
		srcAddrs = map[uint64]bool{}
		sinks    = map[uint64]bool{}
		pings    [][]byte
		echoes   [][]byte
		advert   int
	)
	for _, fr := range f.Packets {
		var p rocev2.Packet
		if err := rocev2.Parse(fr.Data, &p); err != nil {
			t.Fatalf("frame %d: %v", fr.Index, err)
		}
		switch p.BTH.Opcode {
		case rocev2.RCSendOnly:
			if bytes.Equal(p.Payload, make([]byte, InfoLen)) {
				seq = append(seq, "go-ahead")
				continue
			}
			in, err := DecodeInfo(p.Payload)
			if err != nil {
				t.Fatalf("frame %d: %v", fr.Index, err)
			}
			if in.Size != 64 || in.RKey == 0 || in.Addr == 0 {
				t.Fatalf("frame %d: implausible %+v", fr.Index, in)
			}
			// Odd adverts are the ping source, even ones the pong sink.
			if advert%2 == 0 {
				srcAddrs[in.Addr] = true
				seq = append(seq, "src")
			} else {
				sinks[in.Addr] = true
				seq = append(seq, "sink")
			}
			advert++
		case rocev2.RCReadRequest:
			if !srcAddrs[p.RETH.VA] || p.RETH.DMALen != 64 {
				t.Fatalf("frame %d: READ of %d at %#x, not an advertised source", fr.Index, p.RETH.DMALen, p.RETH.VA)
			}
			seq = append(seq, "read")
		case rocev2.RCReadResponseOnly:
			pings = append(pings, p.Payload)
		case rocev2.RCWriteOnly:
			if !sinks[p.RETH.VA] {
				t.Fatalf("frame %d: WRITE to %#x, not an advertised sink", fr.Index, p.RETH.VA)
			}
			echoes = append(echoes, p.Payload)
			seq = append(seq, "write")
		}
	}
	const perPing = "src read go-ahead sink write go-ahead"
	want := ""
	for i := range 5 {
		if i > 0 {
			want += " "
		}
		want += perPing
	}
	if got := join(seq); got != want {
		t.Fatalf("sequence\n%s\nwant\n%s", got, want)
	}
	start := byte('A')
	for i := range pings {
		buf := make([]byte, 64)
		start = FillPing(buf, i, start)
		if !bytes.Equal(pings[i], buf) {
			t.Errorf("ping %d = %q, want %q", i, pings[i], buf)
		}
		if !bytes.Equal(echoes[i], buf) {
			t.Errorf("echo %d = %q, want %q", i, echoes[i], buf)
		}
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	return b.String()
}
