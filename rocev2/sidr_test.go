package rocev2

import (
	"encoding/binary"
	"testing"
)

// TestSIDRLayout pins SIDR_REQ and SIDR_REP to the offsets of Linux's
// ibta_vol1_c12.h (tables 119 and 120; MAD offset 24 + field offset) and
// round-trips them through DecodeMAD.
func TestSIDRLayout(t *testing.T) {
	req := &CMSIDRReq{RequestID: 0x11223344, PKey: 0xFFFF, ServiceID: ServiceID(PortSpaceUDP, 7174)}
	req.PrivateData[0], req.PrivateData[215] = 0xA5, 0x5A
	rep := &CMSIDRRep{RequestID: 0x11223344, Status: SIDRSuccess, QPN: 0xABCDEF,
		ServiceID: ServiceID(PortSpaceUDP, 7174), QKey: 0x01234567}
	rep.PrivateData[0], rep.PrivateData[135] = 0xA5, 0x5A
	var b [MADLen]byte

	m := NewCMMAD(0x99, req)
	if err := m.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint16(b[16:]) != 0x0017 || binary.BigEndian.Uint32(b[24:]) != 0x11223344 ||
		binary.BigEndian.Uint16(b[28:]) != 0xFFFF || binary.BigEndian.Uint64(b[32:]) != 0x0000000001111C06 ||
		b[40] != 0xA5 || b[255] != 0x5A {
		t.Fatalf("SIDR_REQ layout % x", b)
	}
	d, err := DecodeMAD(b[:])
	if err != nil || *d.Message.(*CMSIDRReq) != *req {
		t.Fatalf("SIDR_REQ round trip: %v %+v", err, d.Message)
	}

	m = NewCMMAD(0x99, rep)
	if err := m.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint16(b[16:]) != 0x0018 || binary.BigEndian.Uint32(b[24:]) != 0x11223344 || b[28] != 0 ||
		b[32] != 0xAB || b[33] != 0xCD || b[34] != 0xEF || b[35] != 0 ||
		binary.BigEndian.Uint64(b[36:]) != 0x0000000001111C06 || binary.BigEndian.Uint32(b[44:]) != 0x01234567 ||
		b[120] != 0xA5 || b[255] != 0x5A {
		t.Fatalf("SIDR_REP layout % x", b)
	}
	d, err = DecodeMAD(b[:])
	if err != nil || *d.Message.(*CMSIDRRep) != *rep {
		t.Fatalf("SIDR_REP round trip: %v %+v", err, d.Message)
	}
	if SIDRUnsupported.String() != "service ID not supported" || SIDRStatus(9).String() != "status 9" {
		t.Error("SIDRStatus names")
	}
}
