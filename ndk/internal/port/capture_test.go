package port_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
)

// frameWithID builds a test frame of size bytes that starts with id.
func frameWithID(id uint32, size int) []byte {
	f := make([]byte, max(size, 4))
	binary.BigEndian.PutUint32(f, id)
	for i := 4; i < len(f); i++ {
		f[i] = byte(id) + byte(i)
	}
	return f
}

func newPipe(t testing.TB, cfg porttest.PipeConfig) *porttest.Pipe {
	t.Helper()
	p, err := porttest.NewPipe(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// drain receives everything queued at e and returns the frame IDs, checking
// that each frame is intact.
func drain(t testing.TB, e port.Port, size int) []uint32 {
	t.Helper()
	var ids []uint32
	out := make([][]byte, 7) // odd batch size: exercises partial batches
	for {
		n := e.Receive(out)
		if n == 0 {
			return ids
		}
		for _, f := range out[:n] {
			id := binary.BigEndian.Uint32(f)
			if !bytes.Equal(f, frameWithID(id, size)) {
				t.Fatalf("frame %d arrived damaged", id)
			}
			ids = append(ids, id)
		}
	}
}

func TestCaptureRecordsBothWaysUnchanged(t *testing.T) {
	var file bytes.Buffer
	w, err := pcapfile.NewWriter(&file, 0, pcapfile.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	p := newPipe(t, porttest.PipeConfig{Depth: 4})
	a, b := port.Capture(p.A(), w), port.Capture(p.B(), w) // one file for both ends
	begin := time.Now()
	var sent [][]byte
	for i := range uint32(4) {
		f := frameWithID(i, 100+int(i))
		sent = append(sent, f)
		if err := a.Transmit([][]byte{f[:14], f[14:60], f[60:]}); err != nil {
			t.Fatal(err)
		}
	}
	// Refused frames did not leave, so they are not recorded.
	if err := a.Transmit([][]byte{frameWithID(9, 100)}); !errors.Is(err, port.ErrTxFull) {
		t.Fatalf("fifth frame: %v, want ErrTxFull", err)
	}
	out := make([][]byte, 8)
	n := b.Receive(out)
	if n != len(sent) {
		t.Fatalf("received %d frames", n)
	}
	for i, f := range out[:n] {
		if !bytes.Equal(f, sent[i]) {
			t.Fatalf("frame %d changed on the way: %x", i, f)
		}
	}
	b.Release()
	if a.MaxFrame() != porttest.DefaultPipeMaxFrame {
		t.Fatalf("MaxFrame %d is not the wrapped port's", a.MaxFrame())
	}

	c, err := pcapfile.Decode(file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Packets) != 2*len(sent) {
		t.Fatalf("capture holds %d frames, want %d transmitted + %d received", len(c.Packets), len(sent), len(sent))
	}
	var got [][]byte
	for _, pk := range c.Packets {
		if pk.Time.Before(begin.Add(-time.Second)) || pk.Time.After(time.Now()) {
			t.Errorf("frame %d stamped %v, outside the test's run", pk.Index, pk.Time)
		}
		got = append(got, pk.Data)
	}
	want := append(slices.Clone(sent), sent...) // as transmitted, then as received
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("capture frame %d is %x, want %x", i+1, got[i], want[i])
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

type brokenDisk struct{ writes int }

func (d *brokenDisk) Write(b []byte) (int, error) {
	if d.writes++; d.writes > 1 { // the file header gets through
		return 0, errors.New("no space left on device")
	}
	return len(b), nil
}

func TestCaptureWriteFailureStopsNothing(t *testing.T) {
	w, err := pcapfile.NewWriter(&brokenDisk{}, 0, pcapfile.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	p := newPipe(t, porttest.PipeConfig{})
	a, b := port.Capture(p.A(), w), p.B()
	for i := range uint32(3) {
		if err := a.Transmit([][]byte{frameWithID(i, 64)}); err != nil {
			t.Fatalf("transmit with a failing capture: %v", err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatalf("flush with a failing capture: %v", err)
	}
	if ids := drain(t, b, 64); !slices.Equal(ids, []uint32{0, 1, 2}) {
		t.Fatalf("delivered %v", ids)
	}
	err = a.Close()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("no space left on device")) {
		t.Fatalf("Close: %v, want the capture's write error", err)
	}
}

func TestCaptureDoorbellReachesThePort(t *testing.T) {
	w, err := pcapfile.NewWriter(&bytes.Buffer{}, 0, pcapfile.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	p := newPipe(t, porttest.PipeConfig{})
	b := port.Capture(p.B(), w)
	b.Doorbell()
	start := time.Now()
	if err := b.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait after Doorbell through the capture took %v", d)
	}
}
