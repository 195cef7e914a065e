package wire

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseErrors(t *testing.T) {
	good := func(op Opcode, payload int) []byte {
		p := Packet{BTH: BTH{Opcode: op, PKey: DefaultPKey, DestQP: 0x11, PSN: 1}, Payload: make([]byte, payload)}
		return p.Append(nil)
	}
	mod := func(b []byte, f func([]byte)) []byte { f(b); return b }
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"bth only", good(RCSendOnly, 0)[:12], ErrTruncated},
		{"missing RETH", good(RCWriteOnly, 0)[:20], ErrTruncated},
		{"version", mod(good(RCSendOnly, 4), func(b []byte) { b[1] |= 1 }), ErrBadVersion},
		{"reserved 0x15", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = 0x15 }), ErrUnknownOpcode},
		{"UC read", mod(good(RCReadRequest, 0), func(b []byte) { b[0] = 0x2C }), ErrUnknownOpcode},
		{"UD write", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = 0x6A }), ErrUnknownOpcode},
		{"RD", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = 0x44 }), ErrUnsupportedOpcode},
		{"XRC", mod(good(RCSendOnly, 0), func(b []byte) { b[0] = 0xA4 }), ErrUnsupportedOpcode},
		{"CNP", append(mod(good(RCSendOnly, 0), func(b []byte) { b[0] = 0x81 }), make([]byte, 16)...), ErrUnsupportedOpcode},
		{"pad > payload", mod(good(RCSendOnly, 0), func(b []byte) { b[1] |= 0x30 }), ErrBadPad},
		{"not 4-byte aligned", append(good(RCSendOnly, 4), 0), ErrBadPad},
		{"pad on ack", mod(good(RCAcknowledge, 0), func(b []byte) { b[1] |= 0x10 }), ErrBadPad},
		{"payload on ack", append(good(RCAcknowledge, 0), 0, 0, 0, 0), ErrHeaderMismatch},
		{"payload on read req", append(good(RCReadRequest, 0), 0, 0, 0, 0), ErrHeaderMismatch},
		{"oversized", good(RCSendOnly, MaxPayload+4), ErrOversized},
		{"one byte over MaxPayload", good(RCSendOnly, MaxPayload+1), ErrOversized},
		{"one byte over MaxPayload, UD", good(UDSendOnlyImm, MaxPayload+1), ErrOversized},
		{"one byte over MaxPayload, READ response", good(RCReadResponseMiddle, MaxPayload+1), ErrOversized},
		{"atomic write 4 bytes", good(RCAtomicWrite, 4), ErrHeaderMismatch},
		{"atomic write 9 bytes", good(RCAtomicWrite, 9), ErrHeaderMismatch},
		{"atomic write 12 bytes", good(RCAtomicWrite, 12), ErrHeaderMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			err := p.Parse(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, want %v", err, tt.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Reason == "" {
				t.Fatalf("error %v is not a *ParseError", err)
			}
		})
	}
}

// TestParseLimits: the largest payload parses, with every pad count, and
// so does an ATOMIC_WRITE of exactly 8 bytes.
func TestParseLimits(t *testing.T) {
	for _, c := range []struct {
		op Opcode
		n  int
	}{
		{RCSendOnly, MaxPayload}, {RCSendOnly, MaxPayload - 1}, {RCSendOnly, MaxPayload - 2}, {RCSendOnly, MaxPayload - 3},
		{RCWriteOnlyImm, MaxPayload}, {RCReadResponseFirst, MaxPayload}, {UDSendOnly, MaxPayload}, {UCSendLast, MaxPayload - 1},
		{RCAtomicWrite, 8},
	} {
		in := (&Packet{BTH: BTH{Opcode: c.op, PKey: DefaultPKey, DestQP: 0x11, PSN: 1}, Payload: make([]byte, c.n)}).Append(nil)
		var p Packet
		if err := p.Parse(in); err != nil || len(p.Payload) != c.n {
			t.Errorf("%v with %d payload bytes: %v, %d bytes parsed", c.op, c.n, err, len(p.Payload))
		}
	}
}

func TestRoundTripAllOpcodes(t *testing.T) {
	n := 0
	for op := 0; op < 256; op++ {
		info, ok := Opcode(op).Info()
		if !ok {
			continue
		}
		n++
		p := Packet{
			BTH:          BTH{Opcode: Opcode(op), SE: true, PKey: DefaultPKey, DestQP: 0xABCDEF, AckReq: true, PSN: 0xFFFFFE},
			RETH:         RETH{VA: 0x1122334455667788, RKey: 0xCAFE, Length: 12345},
			AETH:         AETH{Syndrome: SyndromeNAKRemAcc, MSN: 0x123456},
			AtomicETH:    AtomicETH{VA: 8, RKey: 9, SwapAdd: 10, Compare: 11},
			AtomicAckETH: AtomicAckETH{Orig: 0xDEADBEEF},
			DETH:         DETH{QKey: GSIQKey, SrcQP: 1},
			FETH:         FETH{PLT: FlushPersistence, SEL: FlushSelWholeMR},
			Imm:          0x01020304,
			IETH:         0x0A0B0C0D,
		}
		if info.Mask&HasPayload != 0 {
			p.Payload = []byte("abcdefg")
			if info.Mask&IsAtomicWrite != 0 {
				p.Payload = []byte("12345678")
			}
		}
		b := p.Append(nil)
		if got := len(b); got != info.HdrLen+len(p.Payload)+PadLen(len(p.Payload))+ICRCLen {
			t.Errorf("%v: length %d", p.BTH.Opcode, got)
		}
		var q Packet
		if err := q.Parse(b); err != nil {
			t.Fatalf("%v: %v", p.BTH.Opcode, err)
		}
		// Only the headers the opcode carries survive.
		want := Packet{BTH: p.BTH, Mask: info.Mask, Payload: p.Payload}
		m := info.Mask
		if m&HasRETH != 0 {
			want.RETH = p.RETH
		}
		if m&HasAETH != 0 {
			want.AETH = p.AETH
		}
		if m&HasAtomicETH != 0 {
			want.AtomicETH = p.AtomicETH
		}
		if m&HasAtomicAckETH != 0 {
			want.AtomicAckETH = p.AtomicAckETH
		}
		if m&HasDETH != 0 {
			want.DETH = p.DETH
		}
		if m&HasFETH != 0 {
			want.FETH = p.FETH
		}
		if m&HasImmDt != 0 {
			want.Imm = p.Imm
		}
		if m&HasIETH != 0 {
			want.IETH = p.IETH
		}
		if want.Payload == nil {
			want.Payload = []byte{}
		}
		if diff := cmp.Diff(want, q); diff != "" {
			t.Errorf("%v round trip (-want +got):\n%s", p.BTH.Opcode, diff)
		}
	}
	// RC 25 (incl. FLUSH, ATOMIC_WRITE), UC 12, UD 2.
	if n != 39 {
		t.Errorf("implemented opcodes = %d, want 39", n)
	}
}

func TestOpcodeTable(t *testing.T) {
	tests := []struct {
		op     Opcode
		name   string
		hdrLen int
	}{
		{RCSendOnly, "RC_SEND_ONLY", 12},
		{RCWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32},
		{RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 12},
		{RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", 24},
		{RCCompareSwap, "RC_COMPARE_SWAP", 40},
		{RCSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", 16},
		{RCFlush, "RC_FLUSH", 32},
		{RCAtomicWrite, "RC_ATOMIC_WRITE", 28},
		{UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", 24},
		{UCWriteFirst, "UC_RDMA_WRITE_FIRST", 28},
	}
	for _, tt := range tests {
		if got := tt.op.String(); got != tt.name {
			t.Errorf("%#x name %q, want %q", uint8(tt.op), got, tt.name)
		}
		if got := tt.op.HdrLen(); got != tt.hdrLen {
			t.Errorf("%v hdrlen %d, want %d", tt.op, got, tt.hdrLen)
		}
	}
	for _, op := range []Opcode{0x15, 0x2C, 0x33, 0x36, 0x60, 0x6A} {
		if op.Valid() {
			t.Errorf("%#x must not be valid", uint8(op))
		}
	}
	if s := Opcode(0x81).String(); s != "CNP" {
		t.Errorf("CNP name %q", s)
	}
}

func TestPSN(t *testing.T) {
	tests := []struct {
		a, b uint32
		diff int32
	}{
		{5, 5, 0}, {6, 5, 1}, {5, 6, -1}, {0, 0xFFFFFF, 1}, {0xFFFFFF, 0, -1},
		{0x7FFFFF, 0, 0x7FFFFF}, {0x800000, 0, -0x800000}, {0x10, 0xFFFFF0, 0x20},
	}
	for _, tt := range tests {
		if got := PSNDiff(tt.a, tt.b); got != tt.diff {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.diff)
		}
	}
	if PSNAdd(0xFFFFFF, 1) != 0 || PSNAdd(0, -1) != 0xFFFFFF || PSNAdd(10, 100) != 110 {
		t.Error("PSNAdd wraps wrong")
	}
	if !PSNAfter(0, 0xFFFFFF) || PSNBefore(0, 0xFFFFFF) || PSNCompare(3, 3) != 0 {
		t.Error("PSN compare wrong at wrap")
	}
}

func TestAETHAndTables(t *testing.T) {
	if a := (AETH{Syndrome: 0x1F}); !a.IsACK() || a.IsNAK() || a.IsRNR() {
		t.Error("0x1F must be an ACK")
	}
	if a := (AETH{Syndrome: 0x2C}); !a.IsRNR() || a.Value() != 12 {
		t.Error("0x2C must be RNR timer 12")
	}
	if a := (AETH{Syndrome: 0x62}); !a.IsNAK() || a.Value() != NAKRemAccessErr {
		t.Error("0x62 must be NAK remote access")
	}
	if c, ok := Credits(16); !ok || c != 256 {
		t.Error("credit code 16")
	}
	if _, ok := Credits(31); ok {
		t.Error("credit code 31 is invalid")
	}
	if RNRTimeout(25).Microseconds() != 61440 || RNRTimeout(0).Microseconds() != 655360 || RNRTimeout(12).Microseconds() != 640 {
		t.Error("RNR timer table")
	}
	if MTU4096.Bytes() != 4096 || MTU256.Bytes() != 256 || MTU(0).Bytes() != 0 || ActiveMTU(1500) != MTU1024 || ActiveMTU(9000) != MTU4096 {
		t.Error("MTU")
	}
}

func TestNoAllocs(t *testing.T) {
	p := Packet{BTH: BTH{Opcode: RCWriteFirst, PKey: DefaultPKey, DestQP: 0x11, PSN: 1},
		RETH: RETH{VA: 1 << 40, RKey: 0x1234, Length: 1 << 20}, Payload: make([]byte, 4096)}
	buf := make([]byte, 0, 8192)
	src := netip.MustParseAddrPort("10.0.0.1:49152")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	b := p.Append(buf[:0])
	var q Packet
	allocs := testing.AllocsPerRun(100, func() {
		b = p.Append(buf[:0])
		FillICRC(b, src, dst, 0)
		if err := q.Parse(b); err != nil {
			t.Fatal(err)
		}
		if _, ok := VerifyICRCAddrs(src, dst, b); !ok {
			t.Fatal("ICRC")
		}
		var bad Packet
		_ = bad.Parse(b[:5])
	})
	if allocs != 0 {
		t.Errorf("allocs per packet = %v, want 0", allocs)
	}
}

func BenchmarkAppendICRC4K(b *testing.B) {
	p := Packet{BTH: BTH{Opcode: RCWriteMiddle, PKey: DefaultPKey, DestQP: 0x11}, Payload: make([]byte, 4096)}
	buf := make([]byte, 0, 8192)
	src := netip.MustParseAddrPort("10.0.0.1:49152")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		FillICRC(p.Append(buf[:0]), src, dst, 0)
	}
}

func BenchmarkParseVerify4K(b *testing.B) {
	p := Packet{BTH: BTH{Opcode: RCWriteMiddle, PKey: DefaultPKey, DestQP: 0x11}, Payload: make([]byte, 4096)}
	src := netip.MustParseAddrPort("10.0.0.1:49152")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	pkt := p.Append(nil)
	FillICRC(pkt, src, dst, 34605)
	b.SetBytes(4096)
	b.ReportAllocs()
	var q Packet
	for b.Loop() {
		if q.Parse(pkt) != nil {
			b.Fatal("parse")
		}
		if _, ok := VerifyICRCAddrs(src, dst, pkt); !ok {
			b.Fatal("icrc")
		}
	}
}
