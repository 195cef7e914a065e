package capture

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// TestTee: datagrams written and read through a TeeEndpoint land in the
// pcap with valid ICRCs over the synthesised headers, and with the traffic
// class they were sent and received with (DSCP 26, ECT(0)).
func TestTee(t *testing.T) {
	a, b, err := pipe.New(pipe.Config{}, pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out bytes.Buffer
	w, err := NewWriter(&out, nil)
	if err != nil {
		t.Fatal(err)
	}
	ta := Tee(a, w)
	defer ta.Close()
	tb := Tee(b, w)
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 7},
		Payload: []byte("hello tee")}
	pkts := []link.Packet{{Buf: p.Append(nil), Dst: b.LocalAddr()}}
	pkts[0].N, pkts[0].TOS = len(pkts[0].Buf), 0x6a
	if n, err := ta.WriteBatch(pkts); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	rx := []link.Packet{{Buf: make([]byte, 2048)}}
	if n, err := tb.ReadBatch(rx); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(out.Bytes()), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var pk Packet
	for r.Next(&pk) == nil {
		got++
		if pk.Src.Addr() != netip.MustParseAddr("10.0.0.1") {
			t.Errorf("packet %d from %v, want 10.0.0.1", got, pk.Src)
		}
		if !wire.VerifyICRC(pk.IPHdr, pk.Src.Port(), pk.Dst.Port(), pk.Payload) {
			t.Errorf("packet %d: bad ICRC in capture", got)
		}
		if len(pk.IPHdr) < 2 || pk.IPHdr[1] != 0x6a {
			t.Errorf("packet %d: IPv4 header %x, want TOS 0x6a", got, pk.IPHdr)
		}
	}
	if got != 2 {
		t.Fatalf("captured %d packets, want 2 (out and in)", got)
	}
	if ta.Err() != nil || tb.Err() != nil {
		t.Fatal(ta.Err(), tb.Err())
	}
}

// TestTeeGathered: behind a link that gathers (zero-copy send), the
// capture tee passes the capability on and writes a datagram sent with its
// payload in place whole, with a valid ICRC.
func TestTeeGathered(t *testing.T) {
	a, b, err := pipe.New(pipe.Config{GatherWrite: true, ReceiveBuffer: 1 << 20}, pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out bytes.Buffer
	w, err := NewWriter(&out, nil)
	if err != nil {
		t.Fatal(err)
	}
	ta := Tee(a, w)
	defer ta.Close()
	if got, want := link.CapabilitiesOf(ta), link.CapabilitiesOf(a); got != want {
		t.Errorf("capture tee's capabilities %+v, the link's %+v", got, want)
	}
	payload := bytes.Repeat([]byte("zero-copy"), 101) // 909 bytes: 3 of pad
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 7},
		Payload: payload}
	whole := p.Append(nil)
	// The headers, then the payload in place, then the pad and the ICRC.
	at := len(whole) - len(payload) - 3 - wire.ICRCLen
	hdr := append(append([]byte(nil), whole[:at]...), whole[at+len(payload):]...)
	pkts := []link.Packet{{Buf: hdr, N: len(hdr), Data: payload, DataAt: at, Dst: b.LocalAddr()}}
	if n, err := ta.WriteBatch(pkts); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(out.Bytes()), nil)
	if err != nil {
		t.Fatal(err)
	}
	var pk Packet
	if err := r.Next(&pk); err != nil {
		t.Fatal(err)
	}
	if len(pk.Payload) != len(whole) || !bytes.Equal(pk.Payload[:at], whole[:at]) ||
		!bytes.Equal(pk.Payload[at:at+len(payload)], payload) {
		t.Errorf("captured %d bytes, want the %d-byte datagram whole", len(pk.Payload), len(whole))
	}
	if !wire.VerifyICRC(pk.IPHdr, pk.Src.Port(), pk.Dst.Port(), pk.Payload) {
		t.Error("bad ICRC in capture")
	}
}
