package oob

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softroce/softroce/wire"
)

// TestRpingCapture checks the client's buffer advertisements in rping.pcap
// against the server's RDMA READ and WRITE that follow, and the ping data
// against RpingFill.
func TestRpingCapture(t *testing.T) {
	c := readCapture(t, "rping.pcap")
	var advs []RDMAInfo
	var reads, writes []wire.RETH
	var pings [][]byte
	for _, f := range c.roce {
		p := &f.pkt
		switch {
		case f.src == clientIP && p.BTH.Opcode == wire.RCSendOnly:
			info, err := ParseRDMAInfo(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if enc := info.Append(nil); !bytes.Equal(enc, p.Payload) {
				t.Errorf("re-encoding %x, captured %x", enc, p.Payload)
			}
			advs = append(advs, info)
		case f.src == serverIP && p.BTH.Opcode == wire.RCReadRequest:
			reads = append(reads, p.RETH)
		case f.src == serverIP && p.BTH.Opcode == wire.RCWriteOnly:
			writes = append(writes, p.RETH)
			pings = append(pings, p.Payload)
		case f.src == serverIP && p.BTH.Opcode == wire.RCSendOnly:
			if len(p.Payload) != RDMAInfoLen {
				t.Errorf("server SEND of %d bytes", len(p.Payload))
			}
		}
	}
	if len(advs) != 6 || len(reads) != 3 || len(writes) != 3 {
		t.Fatalf("%d advertisements, %d reads, %d writes; want 6, 3, 3", len(advs), len(reads), len(writes))
	}
	for i := range 3 {
		src, sink := advs[2*i], advs[2*i+1]
		if src != (RDMAInfo{0x558066cc55c0, 0x120a, 64}) || sink != (RDMAInfo{0x558066cc1ae0, 0x115d, 64}) {
			t.Errorf("ping %d: advertisements %+v %+v", i, src, sink)
		}
		if reads[i].VA != src.Addr || reads[i].RKey != src.RKey || reads[i].Length != src.Size {
			t.Errorf("ping %d: READ %+v does not match %+v", i, reads[i], src)
		}
		if writes[i].VA != sink.Addr || writes[i].RKey != sink.RKey || writes[i].Length != sink.Size {
			t.Errorf("ping %d: WRITE %+v does not match %+v", i, writes[i], sink)
		}
		buf := make([]byte, 64)
		RpingFill(buf, i)
		if !bytes.Equal(buf, pings[i]) {
			t.Errorf("ping %d data\n got %q\nwant %q", i, buf, pings[i])
		}
	}
}

func TestRDMAInfo(t *testing.T) {
	if _, err := ParseRDMAInfo(make([]byte, 15)); !errors.Is(err, ErrRDMAInfo) {
		t.Errorf("short: %v", err)
	}
	in := RDMAInfo{Addr: 0x0102030405060708, RKey: 0x090a0b0c, Size: 0x0d0e0f10}
	b := in.Append([]byte{0xff})
	if !bytes.Equal(b[1:], []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) {
		t.Errorf("encoding %x", b)
	}
	for _, tc := range []struct {
		size, ping int
		want       string
	}{
		{20, 0, "rdma-ping-0: ABCDEF\x00"},
		{16, 57, "rdma-ping-57: z\x00"},
		{18, 58, "rdma-ping-58: ABC\x00"},
		{19, 1, "rdma-ping-1: BCDEF\x00"},
		{8, 1234, "rdma-pi\x00"},
		{1, 0, "\x00"},
	} {
		buf := make([]byte, tc.size)
		RpingFill(buf, tc.ping)
		if string(buf) != tc.want {
			t.Errorf("RpingFill(%d, %d) = %q, want %q", tc.size, tc.ping, buf, tc.want)
		}
	}
	RpingFill(nil, 3) // no panic
}
