package mad

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/softroce/softroce/wire"
)

// reserved lists, per message, the reserved bits as (offset after the MAD
// header, mask of the reserved bits), written from IBTA vol. 1 tables
// 106-120 independently of the codec (the vendor ID bytes of the REQ and REP,
// reserved there, carry ECE since IBTA 1.4's annex: defined). Every other
// bit is a defined field.
var reserved = map[AttrID][][2]int{
	AttrREQ: {{4, 0xFF}, {24, 0xFF}, {25, 0xFF}, {26, 0xFF}, {27, 0xFF},
		{90, 0x0F}, {91, 0xC0}, {94, 0x07}, {95, 0x07}, {134, 0x0F}, {135, 0xC0}, {138, 0x07}, {139, 0x03}},
	AttrMRA:     {{8, 0x3F}, {9, 0x07}},
	AttrREJ:     {{8, 0x3F}, {9, 0x01}},
	AttrREP:     {{27, 0x0F}},
	AttrRTU:     {},
	AttrDREQ:    {{11, 0xFF}},
	AttrDREP:    {},
	AttrSIDRREQ: {{6, 0xFF}, {7, 0xFF}},
	AttrSIDRREP: {{6, 0xFF}, {7, 0xFF}, {11, 0xFF}},
	AttrLAP: {{8, 0xFF}, {9, 0xFF}, {10, 0xFF}, {11, 0xFF}, {15, 0x07}, {16, 0xFF}, {17, 0xFF}, {18, 0xFF}, {19, 0xFF},
		{58, 0x0F}, {61, 0xC0}, {62, 0x07}, {63, 0x07}},
	AttrAPR: {{10, 0xFF}, {11, 0xFF}},
}

// canonical returns b with the header's reserved bytes and the message's
// reserved bits cleared: what Append(Parse(b)) must give back.
func canonical(b []byte, a AttrID) []byte {
	c := bytes.Clone(b)
	c[18], c[19] = 0, 0
	for _, r := range reserved[a] {
		c[HeaderLen+r[0]] &^= byte(r[1])
	}
	return c
}

func allAttrs() []AttrID {
	return []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRREQ, AttrSIDRREP, AttrLAP, AttrAPR}
}

// fixHeader makes b (256 bytes) a valid CM MAD header for attribute a.
func fixHeader(b []byte, a AttrID) {
	b[0], b[1], b[2], b[3] = BaseVersion, MgmtClassCM, ClassVersionCM, MethodSend
	binary.BigEndian.PutUint16(b[16:], uint16(a))
}

// TestAllOnes encodes a MAD of all ones for every message type: every defined
// bit must survive the round trip and every reserved bit must come back 0.
func TestAllOnes(t *testing.T) {
	for _, a := range allAttrs() {
		b := bytes.Repeat([]byte{0xFF}, MADLen)
		fixHeader(b, a)
		m, _ := NewMessage(a)
		if err := m.Parse(b); err != nil {
			t.Fatalf("%v: %v", a, err)
		}
		out, err := m.Append(nil)
		if err != nil {
			t.Fatalf("%v: %v", a, err)
		}
		if want := canonical(b, a); !bytes.Equal(out, want) {
			t.Errorf("%v:\n got %x\nwant %x", a, out, want)
		}
	}
}

// TestFieldOffsets checks single fields land where ibta_vol1_c12.h puts them.
func TestFieldOffsets(t *testing.T) {
	enc := func(m Message) []byte {
		t.Helper()
		b, err := m.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != MADLen {
			t.Fatalf("len %d", len(b))
		}
		return b[HeaderLen:]
	}
	type check struct {
		name string
		got  []byte
		off  int
		want []byte
	}
	var checks []check
	add := func(name string, m Message, off int, want ...byte) {
		checks = append(checks, check{name, enc(m), off, want})
	}
	add("REQ service ID", &REQ{ServiceID: 0x0102030405060708}, 8, 1, 2, 3, 4, 5, 6, 7, 8)
	add("REQ QPN+resp", &REQ{LocalQPN: 0xABCDEF, ResponderResources: 9}, 32, 0xAB, 0xCD, 0xEF, 9)
	add("REQ remote timeout/transport/e2e", &REQ{RemoteCMResponseTimeout: 20, TransportType: TransportUC, EndToEndFlowControl: true}, 43, 20<<3|1<<1|1)
	add("REQ PSN, local timeout, retry", &REQ{StartingPSN: 0x123456, LocalCMResponseTimeout: 20, RetryCount: 7}, 44, 0x12, 0x34, 0x56, 0xA7)
	add("REQ pkey mtu rdc rnr", &REQ{PKey: 0xFFFF, PathMTU: wire.MTU1024, RDCExists: true, RNRRetryCount: 7}, 48, 0xFF, 0xFF, 0x3F)
	add("REQ max retries srq ext", &REQ{MaxCMRetries: 15, SRQ: true, ExtendedTransportType: 1}, 51, 0xF9)
	add("REQ flow label / rate", &REQ{Primary: Path{FlowLabel: 0xA5250, PacketRate: 0x2A}}, 88, 0xA5, 0x25, 0x00, 0x2A)
	add("REQ tc hop sl local ack", &REQ{Primary: Path{TrafficClass: 0x12, HopLimit: 64, SL: 5, SubnetLocal: true, LocalACKTimeout: 19}}, 92, 0x12, 64, 0x58, 0x98)
	add("REQ alt ack + SAP", &REQ{Alternate: Path{LocalACKTimeout: 31}, SAPSupported: true}, 139, 0xFC)
	add("REQ private data", &REQ{PrivateData: []byte{1, 2}}, 140, 1, 2, 0)
	add("MRA", &MRA{MessageMRAed: MsgREP, ServiceTimeout: 31, PrivateData: []byte{7}}, 8, 0x40, 0xF8, 7)
	add("REJ", &REJ{MessageRejected: MsgOther, RejectInfoLength: 72, Reason: RejConsumerDefined, ARI: []byte{0xEE}}, 8, 0x80, 144, 0, 28, 0xEE)
	add("REJ private data", &REJ{PrivateData: []byte{0xAA}}, 84, 0xAA)
	add("REP qkey qpn eecn psn", &REP{LocalQKey: 0x01234567, LocalQPN: 0x21, LocalEECN: 0x55, StartingPSN: 0xc842d8}, 8,
		1, 0x23, 0x45, 0x67, 0, 0, 0x21, 0, 0, 0, 0x55, 0, 0xc8, 0x42, 0xd8, 0)
	add("REP bits", &REP{ResponderResources: 1, InitiatorDepth: 2, TargetACKDelay: 15, FailoverAccepted: 2, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true}, 24,
		1, 2, 15<<3|2<<1|1, 0xF0)
	add("REP guid+pd", &REP{LocalCAGUID: 0x505400fffe770011, PrivateData: []byte{9}}, 28, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x11, 9)
	add("RTU", &RTU{LocalCommID: 1, RemoteCommID: 2, PrivateData: []byte{3}}, 0, 0, 0, 0, 1, 0, 0, 0, 2, 3)
	add("DREQ", &DREQ{RemoteQPN: 0x21, PrivateData: []byte{4}}, 8, 0, 0, 0x21, 0, 4)
	add("DREP", &DREP{PrivateData: []byte{5}}, 8, 5)
	add("SIDR_REQ", &SIDRREQ{RequestID: 1, PKey: 0xFFFF, ServiceID: ServiceID(PortSpaceUDP, 7174), PrivateData: []byte{6}}, 0,
		0, 0, 0, 1, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1C, 0x06, 6)
	add("SIDR_REP", &SIDRREP{Status: SIDRNoQP, AddInfoLength: 3, QPN: 0x23, ServiceID: 1, QKey: UDPQKey, AddInfo: []byte{8}, PrivateData: []byte{9}}, 4,
		3, 3, 0, 0, 0, 0, 0x23, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0x23, 0x45, 0x67, 8)
	add("SIDR_REP pd", &SIDRREP{PrivateData: []byte{9}}, 96, 9)
	add("LAP", &LAP{RemoteQPN: 0x21, RemoteCMResponseTimeout: 20}, 12, 0, 0, 0x21, 20<<3)
	add("LAP path", &LAP{Alternate: Path{FlowLabel: 0xFFFFF, TrafficClass: 1, HopLimit: 2, PacketRate: 3, SL: 4, SubnetLocal: true, LocalACKTimeout: 5}}, 56,
		0xFF, 0xFF, 0xF0, 1, 2, 3, 0x48, 5<<3)
	add("APR", &APR{AddInfoLength: 1, ARStatus: 2, AddInfo: []byte{3}, PrivateData: []byte{4}}, 8, 1, 2, 0, 0, 3)
	for _, c := range checks {
		if got := c.got[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("%s: bytes at %d = %x, want %x", c.name, c.off, got, c.want)
		}
	}
}

func TestHeaderDefaults(t *testing.T) {
	m := RTU{Header: Header{TID: 0x0102030405060708, AttrMod: 7}}
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 7, 2, 3, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x14, 0, 0, 0, 0, 0, 7}
	if !bytes.Equal(b[:HeaderLen], want) {
		t.Errorf("header %x, want %x", b[:HeaderLen], want)
	}
	if h := NewHeader(5); h.BaseVersion != 1 || h.MgmtClass != 7 || h.ClassVersion != 2 || h.Method != 3 || h.TID != 5 {
		t.Errorf("NewHeader %+v", h)
	}
	// Append appends after existing content.
	b2, _ := m.Append([]byte{0xAA})
	if len(b2) != 1+MADLen || b2[0] != 0xAA || !bytes.Equal(b2[1:], b) {
		t.Error("Append does not append")
	}
}

func TestParseErrors(t *testing.T) {
	good, _ := (&REQ{}).Append(nil)
	mod := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:255], ErrLength},
		{"long", append(bytes.Clone(good), 0), ErrLength},
		{"nil", nil, ErrLength},
		{"base version", mod(func(b []byte) { b[0] = 2 }), ErrBaseVersion},
		{"class", mod(func(b []byte) { b[1] = 0x03 }), ErrNotCM},
		{"class version", mod(func(b []byte) { b[2] = 1 }), ErrClassVersion},
		{"method", mod(func(b []byte) { b[3] = 0x83 }), ErrMethod},
		{"attr", mod(func(b []byte) { b[17] = 0x13 }), ErrAttrMismatch},
	} {
		var m REQ
		err := m.Parse(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		var e *Error
		if !errors.As(err, &e) || e.Reason == "" {
			t.Errorf("%s: not an *Error", tc.name)
		}
	}
	bad := bytes.Clone(good)
	binary.BigEndian.PutUint16(bad[16:], 0x0020)
	if _, err := ParseMessage(bad); !errors.Is(err, ErrUnknownAttr) {
		t.Errorf("unknown attr: %v", err)
	}
}

func TestAppendErrors(t *testing.T) {
	long := make([]byte, 300)
	for _, a := range allAttrs() {
		m, _ := NewMessage(a)
		setPD(m, long)
		if _, err := m.Append(nil); !errors.Is(err, ErrPrivateDataSize) {
			t.Errorf("%v: %v", a, err)
		}
	}
	for _, m := range []Message{&REJ{ARI: long[:73]}, &SIDRREP{AddInfo: long[:73]}, &APR{AddInfo: long[:73]}} {
		if _, err := m.Append(nil); !errors.Is(err, ErrInfoSize) {
			t.Errorf("%v: %v", m.Attr(), err)
		}
	}
	// Exactly the maximum fits.
	for a, n := range map[AttrID]int{AttrREQ: 92, AttrMRA: 222, AttrREJ: 148, AttrREP: 196, AttrRTU: 224, AttrDREQ: 220,
		AttrDREP: 224, AttrSIDRREQ: 216, AttrSIDRREP: 136, AttrLAP: 168, AttrAPR: 148} {
		m, _ := NewMessage(a)
		pd := bytes.Repeat([]byte{0x5A}, n)
		setPD(m, pd)
		b, err := m.Append(nil)
		if err != nil {
			t.Fatalf("%v: %v", a, err)
		}
		if !bytes.Equal(b[MADLen-n:], pd) {
			t.Errorf("%v: private data not at the end of the MAD", a)
		}
		m2, _ := NewMessage(a)
		if err := m2.Parse(b); err != nil || !bytes.Equal(pdOf(m2), pd) {
			t.Errorf("%v: parsed private data %d bytes, %v", a, len(pdOf(m2)), err)
		}
	}
}

func setPD(m Message, pd []byte) {
	switch m := m.(type) {
	case *REQ:
		m.PrivateData = pd
	case *MRA:
		m.PrivateData = pd
	case *REJ:
		m.PrivateData = pd
	case *REP:
		m.PrivateData = pd
	case *RTU:
		m.PrivateData = pd
	case *DREQ:
		m.PrivateData = pd
	case *DREP:
		m.PrivateData = pd
	case *SIDRREQ:
		m.PrivateData = pd
	case *SIDRREP:
		m.PrivateData = pd
	case *LAP:
		m.PrivateData = pd
	case *APR:
		m.PrivateData = pd
	}
}

func pdOf(m Message) []byte {
	switch m := m.(type) {
	case *REQ:
		return m.PrivateData
	case *MRA:
		return m.PrivateData
	case *REJ:
		return m.PrivateData
	case *REP:
		return m.PrivateData
	case *RTU:
		return m.PrivateData
	case *DREQ:
		return m.PrivateData
	case *DREP:
		return m.PrivateData
	case *SIDRREQ:
		return m.PrivateData
	case *SIDRREP:
		return m.PrivateData
	case *LAP:
		return m.PrivateData
	case *APR:
		return m.PrivateData
	}
	return nil
}

func TestCMAHeader(t *testing.T) {
	v6 := CMAHeader{SrcPort: 40000, Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("2001:db8::2")}
	b, err := v6.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != CMAHeaderLen || b[0] != 0 || b[1] != 0x60 || binary.BigEndian.Uint16(b[2:]) != 40000 {
		t.Errorf("v6 header %x", b)
	}
	got, user, err := ParseCMAHeader(append(b, 1, 2, 3))
	if err != nil || got != v6 || !bytes.Equal(user, []byte{1, 2, 3}) {
		t.Errorf("v6 round trip %+v %x %v", got, user, err)
	}
	v4 := CMAHeader{SrcPort: 0xd876, Src: netip.MustParseAddr("10.77.0.12"), Dst: netip.MustParseAddr("10.77.0.11")}
	b, _ = v4.Append(nil)
	want := make([]byte, 36)
	want[1], want[2], want[3] = 0x40, 0xd8, 0x76
	copy(want[16:], []byte{10, 77, 0, 12})
	copy(want[32:], []byte{10, 77, 0, 11})
	if !bytes.Equal(b, want) {
		t.Errorf("v4 header\n got %x\nwant %x", b, want)
	}
	for _, tc := range []struct {
		b    []byte
		want error
	}{
		{want[:35], ErrCMAHeaderLen},
		{append([]byte{1}, want[1:]...), ErrCMAVersion},
		{append([]byte{0, 0x50}, want[2:]...), ErrCMAIPVersion},
	} {
		if _, _, err := ParseCMAHeader(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%x: %v, want %v", tc.b[:2], err, tc.want)
		}
	}
	for _, h := range []CMAHeader{{}, {Src: v4.Src, Dst: v6.Dst}, {Src: v4.Src}} {
		if _, err := h.Append(nil); !errors.Is(err, ErrCMAAddr) {
			t.Errorf("%+v: %v", h, err)
		}
	}
}

func TestServiceID(t *testing.T) {
	for _, tc := range []struct {
		ps   PortSpace
		port uint16
		id   uint64
	}{
		{PortSpaceTCP, 7174, 0x0000000001061C06},
		{PortSpaceUDP, 7174, 0x0000000001111C06},
		{PortSpaceIB, 1, 0x00000000013F0001},
		{PortSpaceIPoIB, 18515, 0x0000000000024853},
	} {
		if got := ServiceID(tc.ps, tc.port); got != tc.id {
			t.Errorf("ServiceID(%v, %d) = %#x, want %#x", tc.ps, tc.port, got, tc.id)
		}
		ps, port, ok := ParseServiceID(tc.id)
		if !ok || ps != tc.ps || port != tc.port {
			t.Errorf("ParseServiceID(%#x) = %v %d %v", tc.id, ps, port, ok)
		}
	}
	for _, id := range []uint64{0x0000000102061C06, 0x1000000001061C06, 0x0000000001071C06, 0} {
		if _, _, ok := ParseServiceID(id); ok {
			t.Errorf("ParseServiceID(%#x) accepted", id)
		}
	}
	if PortSpaceTCP.String() != "TCP" || PortSpace(9).String() != "PS(9)" {
		t.Error("PortSpace.String")
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{RejInvalidServiceID.String(), "INVALID_SERVICE_ID"},
		{RejConsumerDefined.String(), "CONSUMER_DEFINED"},
		{RejTimeout.String(), "TIMEOUT"},
		{RejNoQP.String(), "NO_QP"},
		{RejectReason(34).String(), "REJ_REASON(34)"},
		{RejVendorOptionNotSupported.String(), "VENDOR_OPTION_NOT_SUPPORTED"},
		{AttrSIDRREP.String(), "SIDR_REP"},
		{AttrREQ.String(), "REQ"},
		{AttrID(0x1234).String(), "ATTR(0x1234)"},
		{AttrClassPortInfo.String(), "ClassPortInfo"},
		{SIDRNoQP.String(), "NO_QP"},
		{SIDRStatus(9).String(), "SIDR_STATUS(9)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if MaxREQUserData != 56 || MaxSIDRREQUserData != 180 || MaxREPUserData != 196 || MaxREJUserData != 148 ||
		MaxRTUUserData != 224 || MaxDREQUserData != 220 || MaxDREPUserData != 224 || MaxSIDRREPUserData != 136 {
		t.Error("rdma_cm private data limits")
	}
}

// TestStructRoundTrip encodes populated structs and parses them back.
func TestStructRoundTrip(t *testing.T) {
	pd := []byte("hello")
	full := func(n int) []byte { b := make([]byte, n); copy(b, pd); return b }
	req := &REQ{Header: NewHeader(42), LocalCommID: 1, ServiceID: ServiceID(PortSpaceTCP, 7174), LocalCAGUID: 3,
		LocalQKey: 4, LocalQPN: 0x11, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		StartingPSN: 0xabcdef, LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xFFFF, PathMTU: wire.MTU4096,
		RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: gidOf(client), RemoteGID: gidOf(server),
			FlowLabel: 0xFFFFF, TrafficClass: 0x20, HopLimit: 64, SL: 3, LocalACKTimeout: 19},
		PrivateData: full(REQPrivateDataLen)}
	b, err := req.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got REQ
	if err := got.Parse(b); err != nil {
		t.Fatal(err)
	}
	req.AttrID = AttrREQ
	if diff := cmp.Diff(req, &got); diff != "" {
		t.Errorf("REQ (-want +got):\n%s", diff)
	}
	rej := &REJ{Header: NewHeader(7), LocalCommID: 1, RemoteCommID: 2, MessageRejected: MsgREQ, RejectInfoLength: 2,
		Reason: RejInvalidServiceID, ARI: full(InfoLen), PrivateData: full(REJPrivateDataLen)}
	b, _ = rej.Append(nil)
	var grej REJ
	if err := grej.Parse(b); err != nil {
		t.Fatal(err)
	}
	rej.AttrID = AttrREJ
	if diff := cmp.Diff(rej, &grej); diff != "" {
		t.Errorf("REJ (-want +got):\n%s", diff)
	}
	if !bytes.Equal(grej.ValidARI(), []byte("he")) {
		t.Errorf("ValidARI %q", grej.ValidARI())
	}
}

func TestParseNoAlloc(t *testing.T) {
	mads := cmMADs(t, "rping.pcap")
	var (
		req  REQ
		rep  REP
		hdr  CMAHeader
		user []byte
	)
	buf := make([]byte, 0, MADLen)
	n := testing.AllocsPerRun(100, func() {
		if _, err := ParseHeader(mads[0].pkt.Payload); err != nil {
			t.Fatal(err)
		}
		if err := req.Parse(mads[0].pkt.Payload); err != nil {
			t.Fatal(err)
		}
		if err := rep.Parse(mads[1].pkt.Payload); err != nil {
			t.Fatal(err)
		}
		var err error
		if hdr, user, err = ParseCMAHeader(req.PrivateData); err != nil {
			t.Fatal(err)
		}
		buf, _ = req.Append(buf[:0])
	})
	if n != 0 {
		t.Errorf("%v allocations per parse+append", n)
	}
	_, _ = hdr, user
}

func BenchmarkParseREQ(b *testing.B) {
	mads := cmMADs(b, "rping.pcap")
	var m REQ
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Parse(mads[0].pkt.Payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendREQ(b *testing.B) {
	mads := cmMADs(b, "rping.pcap")
	var m REQ
	if err := m.Parse(mads[0].pkt.Payload); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, MADLen)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = m.Append(buf[:0])
	}
}

// TestECEFields: the ECE vendor ID sits in the REQ's bytes 5-7 of the
// message and in the REP's bytes 15, 19 and 23 (the kernel's ibta_vol1_c12.h:
// CM_REQ_VENDOR_ID, CM_REP_VENDOR_ID_H/M/L), the options in the MAD
// header's attribute modifier, and both survive a round trip without
// touching the fields around them.
func TestECEFields(t *testing.T) {
	req := REQ{Header: NewHeader(1), LocalCommID: 0x01020304, VendorID: 0xA1B2C3, ServiceID: 0x0106000000001234}
	req.AttrMod = 0xDEADBEEF
	b, err := req.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := b[HeaderLen:]
	if got := [3]byte{d[5], d[6], d[7]}; got != [3]byte{0xA1, 0xB2, 0xC3} || d[4] != 0 {
		t.Errorf("REQ bytes 4-7 %x, want 00a1b2c3", d[4:8])
	}
	if got := binary.BigEndian.Uint32(b[20:]); got != 0xDEADBEEF {
		t.Errorf("REQ attribute modifier %#x", got)
	}
	var r2 REQ
	if err := r2.Parse(b); err != nil || r2.VendorID != 0xA1B2C3 || r2.AttrMod != 0xDEADBEEF || r2.LocalCommID != 0x01020304 || r2.ServiceID != req.ServiceID {
		t.Errorf("REQ round trip: %+v, %v", r2, err)
	}
	rep := REP{Header: NewHeader(2), LocalQPN: 0x111111, LocalEECN: 0x222222, StartingPSN: 0x333333, VendorID: 0xA1B2C3}
	rep.AttrMod = 5
	b, err = rep.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	d = b[HeaderLen:]
	if d[15] != 0xA1 || d[19] != 0xB2 || d[23] != 0xC3 || get24(d[12:]) != 0x111111 || get24(d[16:]) != 0x222222 || get24(d[20:]) != 0x333333 {
		t.Errorf("REP bytes 12-23 %x", d[12:24])
	}
	var p2 REP
	if err := p2.Parse(b); err != nil || p2.VendorID != 0xA1B2C3 || p2.AttrMod != 5 || p2.LocalQPN != 0x111111 || p2.StartingPSN != 0x333333 {
		t.Errorf("REP round trip: %+v, %v", p2, err)
	}
}
