package rocev2

import (
	"bytes"
	"os"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// fuzzSeeds returns the golden frames and every captured RoCEv2 frame. When
// the capture directory is missing it seeds with the golden frames only,
// except in strict mode, where that fails.
func fuzzSeeds(f *testing.F) [][]byte {
	seeds := [][]byte{mustHex(goldenCNP), mustHex(goldenHuaweiACK)}
	if _, err := os.Stat(captureDir); err != nil {
		if testenv.Strict() {
			testenv.Unavailable(f, "fuzz seeds need %s: %v", captureDir, err)
		}
		f.Logf("no captures (%v): seeding with the golden frames only", err)
		return seeds
	}
	for _, c := range loadCaptures(f) {
		seeds = append(seeds, c.data)
	}
	return seeds
}

// FuzzParse: Parse never panics; whatever parses (with or without the ICRC
// check) rebuilds to the same bytes, pad bytes aside, and when the ICRC
// verifies the rebuilt ICRC is the received one.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	buf := make([]byte, 1<<16+64)
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p Packet
		errVerified := Parse(frame, &p)
		if errVerified != nil && ReasonOf(errVerified) == ReasonNone {
			t.Fatalf("Parse returned an error without a reason: %v", errVerified)
		}
		if err := parse(frame, &p, false); err != nil {
			if errVerified == nil {
				t.Fatalf("parse without ICRC failed (%v) where Parse succeeded", err)
			}
			return
		}
		n, err := p.Encode(buf, p.Payload)
		if err != nil {
			t.Fatalf("parsed frame does not encode: %v\nheaders %+v", err, p.Headers)
		}
		if n != len(p.Frame) {
			t.Fatalf("rebuilt %d bytes, frame has %d", n, len(p.Frame))
		}
		dataEnd := p.PayloadOffset + len(p.Payload)
		if !bytes.Equal(buf[:dataEnd], p.Frame[:dataEnd]) {
			t.Fatalf("rebuilt headers differ\n got %x\nwant %x", buf[:dataEnd], p.Frame[:dataEnd])
		}
		padZero := bytes.Count(p.Frame[dataEnd:n-ICRCLen], []byte{0}) == n-ICRCLen-dataEnd
		if errVerified == nil && padZero && !bytes.Equal(buf[n-ICRCLen:n], p.Frame[n-ICRCLen:]) {
			t.Fatalf("verified frame rebuilt with ICRC %x, received %x", buf[n-ICRCLen:n], p.Frame[n-ICRCLen:])
		}
	})
}

// FuzzDecodeMAD: DecodeMAD never panics, and a decoded MAD re-encodes to
// bytes that decode to the same message.
func FuzzDecodeMAD(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		var p Packet
		if Parse(s, &p) == nil && p.BTH.Opcode == UDSendOnly && p.BTH.DestQP == GSIQP {
			f.Add(bytes.Clone(p.Payload))
		}
	}
	for _, m := range []CMMessage{&CMReq{}, &CMRep{}, &CMRtu{}, &CMRej{Reason: RejInvalidServiceID}, &CMDreq{}, &CMDrep{}, &CMMra{}, &CMSIDRReq{}, &CMSIDRRep{QPN: 0x123456, QKey: 0x01234567}} {
		var b [MADLen]byte
		mad := NewCMMAD(42, m)
		if err := mad.Encode(b[:]); err != nil {
			f.Fatal(err)
		}
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMAD(b)
		if err != nil {
			return
		}
		if req, ok := m.Message.(*CMReq); ok {
			_, _ = DecodeCMAHeader(req.PrivateData[:])
			_, _, _ = ParseServiceID(req.ServiceID)
		}
		var enc, enc2 [MADLen]byte
		if err := m.Encode(enc[:]); err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeMAD(enc[:])
		if err != nil {
			t.Fatalf("re-encoded MAD does not decode: %v", err)
		}
		if m2.Header != m.Header || !equalMessages(m2.Message, m.Message) {
			t.Fatalf("decode(encode(m)) != m:\n%+v\n%+v", m2, m)
		}
		if err := m2.Encode(enc2[:]); err != nil || enc2 != enc {
			t.Fatalf("encoding is not stable: %v", err)
		}
	})
}
