package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// TestKeyText: a pingpong_dest as ethernet_write_keys prints it
// (KEY_PRINT_FMT_GID: 107 characters and a NUL) and as ethernet_read_keys
// reads it back; malformed text is a protocol error.
func TestKeyText(t *testing.T) {
	d := Dest{OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000, SRQN: 7,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 1}}
	b := EncodeKey(&d)
	want := "0000:0010:000011:abcdef:00001234:00007f0000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:01:00000007:"
	if got := string(b[:len(want)]); got != want || len(want) != KeyMsgLen-1 || b[KeyMsgLen-1] != 0 {
		t.Fatalf("encoded %q, want %q and a NUL", b, want)
	}
	back, err := DecodeKey(b[:])
	if err != nil || back != d {
		t.Fatalf("decoded %+v, %v; want %+v", back, err, d)
	}
	for _, bad := range []string{"", "0000:0010:000011", strings.Replace(want, "abcdef", "abcdeg", 1), strings.Replace(want, "c6", "1c6", 1)} {
		if _, err := DecodeKey([]byte(bad)); !errors.Is(err, ErrProtocol) {
			t.Errorf("DecodeKey(%q): %v, want ErrProtocol", bad, err)
		}
	}
}

// TestPrintDest: the address lines as rxe's perftest printed them in a
// live run (ctx_print_pingpong_data: %#06x counts the 0x; a read test
// adds OUT, send and atomic tests print no RKey).
func TestPrintDest(t *testing.T) {
	d := Dest{QPN: 0x15, PSN: 0xc29b70, OutReads: 0x80, RKey: 0x633, VAddr: 0x5559656bc000}
	for verb, want := range map[Verb]string{
		Read:   " local address: LID 0000 QPN 0x0015 PSN 0xc29b70 OUT 0x80 RKey 0x000633 VAddr 0x005559656bc000\n",
		Write:  " local address: LID 0000 QPN 0x0015 PSN 0xc29b70 RKey 0x000633 VAddr 0x005559656bc000\n",
		Send:   " local address: LID 0000 QPN 0x0015 PSN 0xc29b70\n",
		Atomic: " local address: LID 0000 QPN 0x0015 PSN 0xc29b70\n",
	} {
		var b strings.Builder
		printDest(&b, "local", &Params{Verb: verb}, &d)
		if got, _, _ := strings.Cut(b.String(), " GID"); got != want {
			t.Errorf("%v: %q, want %q", verb, got, want)
		}
	}
}

// TestSockChannel: over TCP the client writes each message first and the
// server answers (ctx_xchg_data_ethernet), a handshake is the 108-byte
// text, the closing handshake ends with "done" and its NUL, and a
// cancelled run unblocks a read at once.
func TestSockChannel(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := newSockChannel(a)
	mine := Dest{QPN: 0x12, PSN: 0x345, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 2}}
	theirs := Dest{QPN: 0x99, PSN: 0x1, OutReads: 16, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 1}}
	peer := make(chan error, 1)
	go func() {
		peer <- func() error {
			var in [KeyMsgLen + 5]byte
			for round := 0; round < 2; round++ {
				if _, err := io.ReadFull(b, in[:KeyMsgLen]); err != nil {
					return err
				}
				if want := EncodeKey(&mine); !bytes.Equal(in[:KeyMsgLen], want[:]) {
					return fmt.Errorf("round %d: read %q", round, in[:KeyMsgLen])
				}
				k := EncodeKey(&theirs)
				if _, err := b.Write(k[:]); err != nil {
					return err
				}
			}
			if _, err := io.ReadFull(b, in[:5]); err != nil || string(in[:5]) != "done\x00" {
				return fmt.Errorf("after the closing handshake: %q, %v", in[:5], err)
			}
			return b.Close()
		}()
	}()
	ctx := context.Background()
	if got, err := s.handshake(ctx, true, &mine); err != nil || got != theirs {
		t.Fatalf("handshake: %+v, %v", got, err)
	}
	if err := s.closing(ctx, true, &mine); err != nil {
		t.Fatalf("closing: %v", err)
	}
	if err := <-peer; err != nil {
		t.Fatal(err)
	}

	c, d := net.Pipe()
	defer c.Close()
	defer d.Close()
	s = newSockChannel(c)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if _, err := s.read(cctx, 8); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("cancel took %v", el)
	}
}

// unboundConnector is an in-memory network whose connector could speak
// perftest over TCP, from an address no interface here has (to loopback,
// so that even a host that binds non-local addresses sends nowhere).
type unboundConnector struct {
	*verbstest.Network
}

func (u *unboundConnector) Unconnected(verbs.ConnParams) (verbs.OOB, error) {
	return nil, errors.New("not reached")
}
func (u *unboundConnector) PeerAddress() netip.Addr  { return netip.MustParseAddr("127.0.0.1") }
func (u *unboundConnector) LocalAddress() netip.Addr { return netip.MustParseAddr("198.18.255.254") }

// TestDialFromTheAdapter: the TCP control connection is dialled from the
// connector's own address, so where that address is not this namespace's
// nothing is sent (EADDRNOTAVAIL): -comm tcp fails, and a default client
// whose REQ met no listener keeps to rdma_cm and connects there.
func TestDialFromTheAdapter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := Params{Verb: Write, Kind: BW, Size: 64, Iterations: 10, Comm: CommTCP}
	_, err := RunClient(ctx, p, &unboundConnector{Network: &verbstest.Network{}}, io.Discard)
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("-comm tcp: %v, want EADDRNOTAVAIL", err)
	}
	n := &verbstest.Network{RejectFirst: 1}
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p.Comm, p.ConnectRetry = CommAuto, Retry{Attempts: 5, Interval: 10 * time.Millisecond}
	srv := make(chan error, 1)
	go func() { _, err := RunServer(ctx, p, l, io.Discard); srv <- err }()
	if _, err := RunClient(ctx, p, &unboundConnector{Network: n}, io.Discard); err != nil {
		t.Fatalf("default client: %v", err)
	}
	if err := <-srv; err != nil {
		t.Fatalf("server: %v", err)
	}
	if n.Connects < 2 {
		t.Errorf("%d rdma_cm connects: the one rejected, then the control and data ones", n.Connects)
	}
}
