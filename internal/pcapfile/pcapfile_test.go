package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// captureDir holds the project's public captures, read in place from the
// repository root's sibling (never copied here).
const captureDir = "../../../shared/testdata/pcaps"

func TestWriteThenRead(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, 100, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1700000000, 123456789)
	packets := []struct {
		ts   time.Time
		data []byte
	}{
		{base, []byte{1, 2, 3}},
		{base.Add(time.Nanosecond), nil},
		{base.Add(1500 * time.Millisecond), bytes.Repeat([]byte{0xAB}, 100)},
		{base.Add(2 * time.Second), bytes.Repeat([]byte{0xCD}, 150)}, // cut to the snaplen
	}
	for _, p := range packets {
		if err := w.WritePacket(p.ts, p.data); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if f.LinkType != LinkTypeEthernet || f.Snaplen != 100 || !f.Nanosecond {
		t.Fatalf("header: link %d snaplen %d nanosecond %v", f.LinkType, f.Snaplen, f.Nanosecond)
	}
	if len(f.Packets) != len(packets) {
		t.Fatalf("read %d packets, wrote %d", len(f.Packets), len(packets))
	}
	for i, p := range packets {
		got := f.Packets[i]
		want := p.data[:min(len(p.data), 100)]
		if got.Index != i+1 || !got.Time.Equal(p.ts) || got.OrigLen != len(p.data) || !bytes.Equal(got.Data, want) {
			t.Errorf("packet %d: index %d time %v origlen %d data %x; want time %v origlen %d data %x",
				i, got.Index, got.Time, got.OrigLen, got.Data, p.ts, len(p.data), want)
		}
	}
}

func TestNewWriterDefaultSnaplen(t *testing.T) {
	var buf bytes.Buffer
	if _, err := NewWriter(&buf, 0, LinkTypeERF); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Snaplen != DefaultSnaplen || f.LinkType != LinkTypeERF || len(f.Packets) != 0 {
		t.Fatalf("snaplen %d link %d packets %d", f.Snaplen, f.LinkType, len(f.Packets))
	}
}

// classic builds a file by hand in the given byte order and resolution,
// with one 2-byte packet at 5 s + 7 fractional units.
func classic(bo binary.ByteOrder, magic uint32) []byte {
	b := make([]byte, 24+16+2)
	bo.PutUint32(b[0:], magic)
	bo.PutUint16(b[4:], 2)
	bo.PutUint16(b[6:], 4)
	bo.PutUint32(b[16:], 65535)
	bo.PutUint32(b[20:], 0x10000000|LinkTypeEthernet) // FCS bits set: masked off
	bo.PutUint32(b[24:], 5)
	bo.PutUint32(b[28:], 7)
	bo.PutUint32(b[32:], 2)
	bo.PutUint32(b[36:], 60)
	b[40], b[41] = 0xEE, 0xFF
	return b
}

func TestDecodeVariants(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     []byte
		nano  bool
		frac7 time.Duration
	}{
		{"little-endian microseconds", classic(binary.LittleEndian, magicMicro), false, 7 * time.Microsecond},
		{"little-endian nanoseconds", classic(binary.LittleEndian, magicNano), true, 7},
		{"big-endian microseconds", classic(binary.BigEndian, magicMicro), false, 7 * time.Microsecond},
		{"big-endian nanoseconds", classic(binary.BigEndian, magicNano), true, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if f.Nanosecond != tc.nano || f.LinkType != LinkTypeEthernet || f.Snaplen != 65535 || len(f.Packets) != 1 {
				t.Fatalf("file %+v", f)
			}
			p := f.Packets[0]
			if want := time.Unix(5, 0).Add(tc.frac7); !p.Time.Equal(want) || p.OrigLen != 60 || !bytes.Equal(p.Data, []byte{0xEE, 0xFF}) {
				t.Fatalf("packet time %v origlen %d data %x; want time %v", p.Time, p.OrigLen, p.Data, want)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	good := classic(binary.LittleEndian, magicMicro)
	badVersion := bytes.Clone(good)
	badVersion[4] = 3
	for name, b := range map[string][]byte{
		"empty":                 nil,
		"short header":          good[:10],
		"pcapng":                append([]byte{0x0A, 0x0D, 0x0D, 0x0A}, good[4:]...),
		"version 3":             badVersion,
		"truncated record head": good[:24+8],
		"truncated data":        good[:len(good)-1],
	} {
		if _, err := Decode(b); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.pcap")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want os.ErrNotExist", err)
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.after == 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(b), nil
}

func TestWriteErrorSticks(t *testing.T) {
	if _, err := NewWriter(&failingWriter{}, 0, LinkTypeEthernet); err == nil {
		t.Fatal("NewWriter succeeded on a failing writer")
	}
	w, err := NewWriter(&failingWriter{after: 2}, 0, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(time.Now(), []byte{1}); err != nil {
		t.Fatalf("first packet: %v", err)
	}
	err1 := w.WritePacket(time.Now(), []byte{2})
	if err1 == nil || !strings.Contains(err1.Error(), "disk full") {
		t.Fatalf("second packet: err = %v, want the writer's error", err1)
	}
	if err2 := w.WritePacket(time.Now(), []byte{3}); err2 != err1 || w.Err() != err1 {
		t.Fatalf("later calls: %v, Err() %v; want the first error again", err2, w.Err())
	}
}

// TestConcurrentWriters checks that records from several goroutines never
// interleave: each packet reads back whole.
func TestConcurrentWriters(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, 0, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				data := bytes.Repeat([]byte{byte(g)}, 10+i)
				if err := w.WritePacket(time.Now(), data); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	f, err := Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Packets) != writers*each {
		t.Fatalf("%d packets, want %d", len(f.Packets), writers*each)
	}
	seen := make(map[[2]int]bool)
	for _, p := range f.Packets {
		g := p.Data[0]
		if !bytes.Equal(p.Data, bytes.Repeat([]byte{g}, len(p.Data))) {
			t.Fatalf("packet %d mixes writers: %x", p.Index, p.Data)
		}
		seen[[2]int{int(g), len(p.Data)}] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct packets, want %d", len(seen), writers*each)
	}
}

// TestReadPublicCaptures reads captures from other stacks; the counts and
// link types are those of testdata/pcaps/README.md.
func TestReadPublicCaptures(t *testing.T) {
	testenv.RequireFile(t, captureDir)
	for _, tc := range []struct {
		file   string
		frames int
		link   uint32
	}{
		{"oferby__proxy/roce.pcap", 123, LinkTypeEthernet},
		{"montybeatnik__rdma-roce-lab/roce_capture_read-write-ecn.pcap", 12, LinkTypeEthernet},
		{"linlinw5__rdma_ib_tutorial/rdma_cm.pcap", 96, LinkTypeEthernet},
		{"srinivaskoritala__rdma-softroce-demo/infiniband.pcap", 43, LinkTypeERF},
		{"from-hex/scapy_roce-uts_connectx4lx_cnp.pcap", 1, LinkTypeEthernet},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := ReadFile(filepath.Join(captureDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Packets) != tc.frames || f.LinkType != tc.link {
				t.Fatalf("%d packets, link type %d; want %d, %d", len(f.Packets), f.LinkType, tc.frames, tc.link)
			}
		})
	}
}

// tsharkFrames runs tshark on path and returns, per frame, its length,
// captured length and epoch time as tshark prints them.
func tsharkFrames(t *testing.T, tshark, path string, extra ...string) [][]string {
	t.Helper()
	args := []string{"-r", path, "-T", "fields", "-E", "separator=,", "-e", "frame.len", "-e", "frame.cap_len", "-e", "frame.time_epoch"}
	for _, e := range extra {
		args = append(args, "-e", e)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark %v: %v", args, err)
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rows = append(rows, strings.Split(line, ","))
	}
	return rows
}

func epoch(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// TestReaderAgreesWithTshark reads a capture from a hardware NIC with both
// the reader and tshark and compares lengths and timestamps frame by frame.
func TestReaderAgreesWithTshark(t *testing.T) {
	tshark := testenv.RequireTool(t, "tshark")
	path := testenv.RequireFile(t, filepath.Join(captureDir, "oferby__proxy/roce.pcap"))
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows := tsharkFrames(t, tshark, path)
	if len(rows) != len(f.Packets) {
		t.Fatalf("tshark sees %d frames, the reader %d", len(rows), len(f.Packets))
	}
	for i, p := range f.Packets {
		want := []string{strconv.Itoa(p.OrigLen), strconv.Itoa(len(p.Data)), epoch(p.Time)}
		if strings.Join(rows[i], ",") != strings.Join(want, ",") {
			t.Fatalf("frame %d: tshark %v, reader %v", p.Index, rows[i], want)
		}
	}
}

// TestWrittenFileReadsInTshark rewrites real RoCEv2 frames with Writer and
// checks that tshark reads the result: same lengths, nanosecond timestamps,
// and the frames still dissect as RoCEv2 (UDP 4791 with a BTH).
func TestWrittenFileReadsInTshark(t *testing.T) {
	tshark := testenv.RequireTool(t, "tshark")
	src, err := ReadFile(testenv.RequireFile(t, filepath.Join(captureDir, "montybeatnik__rdma-roce-lab/roce_capture_read-write-ecn.pcap")))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.pcap")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(out, 0, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1750000000, 1)
	for i, p := range src.Packets {
		if err := w.WritePacket(base.Add(time.Duration(i)*time.Microsecond+time.Duration(i)), p.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	rows := tsharkFrames(t, tshark, path, "udp.dstport", "infiniband.bth.destqp")
	if len(rows) != len(src.Packets) {
		t.Fatalf("tshark sees %d frames, wrote %d", len(rows), len(src.Packets))
	}
	for i, p := range src.Packets {
		ts := base.Add(time.Duration(i)*time.Microsecond + time.Duration(i))
		r := rows[i]
		if r[0] != strconv.Itoa(len(p.Data)) || r[1] != strconv.Itoa(len(p.Data)) || r[2] != epoch(ts) {
			t.Errorf("frame %d: tshark %v, wrote %d bytes at %s", i+1, r, len(p.Data), epoch(ts))
		}
		if r[3] != "4791" || r[4] == "" {
			t.Errorf("frame %d: tshark does not dissect it as RoCEv2: %v", i+1, r)
		}
	}
}

func TestWriteRejectsUnrepresentableTime(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, 0, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	n := buf.Len()
	for _, ts := range []time.Time{time.Unix(-1, 0), time.Unix(1<<32, 0)} {
		if err := w.WritePacket(ts, []byte{1}); err == nil {
			t.Errorf("WritePacket(%v) succeeded", ts)
		}
	}
	if buf.Len() != n || w.Err() != nil {
		t.Fatalf("rejected packets wrote %d bytes, Err() = %v", buf.Len()-n, w.Err())
	}
	if err := w.WritePacket(time.Unix(1<<32-1, 999999999), []byte{1}); err != nil {
		t.Fatalf("last representable second: %v", err)
	}
}
