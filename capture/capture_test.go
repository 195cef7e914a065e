package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/wire"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v1 is ICRC test vector V1 of wire/icrc_test.go: IPv4 header, UDP header,
// RC SEND_ONLY with a valid ICRC (docs/protocol.md §4.1).
const v1 = "45000038123440004011a52dc0a80101c0a80102 c13212b700240000 0400ffff0000001280000001 526f43457632207465737421 a83d6211"

// v4 is test vector V4 (IPv6 UD SEND_ONLY_WITH_IMMEDIATE).
const v4 = "6001234500281140 fe800000000000000000000000000001 fe800000000000000000000000000002 c00012b700280000 6510ffff0000002200000007 1111111100000013 deadbeef 78797a00 e969b309"

// readAll returns copies of every packet in a pcap image.
func readAll(t testing.TB, img []byte, opts *ReaderOptions) ([]Packet, ReaderStats) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(img), opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []Packet
	for {
		var p Packet
		err := r.Next(&p)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p.IPHdr = bytes.Clone(p.IPHdr)
		p.Payload = bytes.Clone(p.Payload)
		out = append(out, p)
	}
	return out, r.Stats()
}

func TestWriterPreserveICRCMatchesVector(t *testing.T) {
	// With PreserveICRC the Writer solves the IPv4 ID from the ICRC, so the
	// synthesised IP and UDP headers must come out byte-identical to V1
	// (TOS 0, TTL 64, DF, UDP checksum 0).
	vec := unhex(t, v1)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, &Options{PreserveICRC: true})
	if err != nil {
		t.Fatal(err)
	}
	src := netip.MustParseAddrPort("192.168.1.1:49458")
	dst := netip.MustParseAddrPort("192.168.1.2:4791")
	ts := time.Unix(1700000000, 123456000)
	if err := w.WritePacket(ts, src, dst, vec[28:]); err != nil {
		t.Fatal(err)
	}
	img := buf.Bytes()
	if len(img) != 24+16+14+len(vec) {
		t.Fatalf("file is %d bytes", len(img))
	}
	frame := img[40:]
	wantEth := unhex(t, "02 00 c0 a8 01 02 02 00 c0 a8 01 01 08 00")
	if !bytes.Equal(frame[:14], wantEth) {
		t.Errorf("ethernet header %x, want %x", frame[:14], wantEth)
	}
	if !bytes.Equal(frame[14:], vec) {
		t.Errorf("frame\n got %x\nwant %x", frame[14:], vec)
	}
	pkts, _ := readAll(t, img, nil)
	if len(pkts) != 1 {
		t.Fatalf("read %d packets", len(pkts))
	}
	p := pkts[0]
	if !p.Time.Equal(ts) || p.Src != src || p.Dst != dst || p.VLAN != -1 || p.Truncated {
		t.Errorf("read back %+v", p)
	}
}

func TestWriterRecomputesICRC(t *testing.T) {
	// A packet as a link hands it over: ICRC placeholder zero. The record must
	// carry a valid ICRC for the synthesised header, IPv4 and IPv6, and the
	// caller's buffer must stay untouched.
	for _, tc := range []struct {
		name     string
		src, dst string
		ipLen    int
	}{
		{"ipv4", "10.0.0.1:49152", "10.0.0.2:4791", 20},
		{"ipv4-mapped", "[::ffff:10.0.0.1]:49152", "[::ffff:10.0.0.2]:4791", 20},
		{"ipv6", "[fd00::1]:49152", "[fd00::2]:4791", 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x12, AckReq: true, PSN: 7},
				RETH: wire.RETH{VA: 0x1000, RKey: 0x55, Length: 5}, Payload: []byte("hello")}
			pkt := p.Append(nil)
			orig := bytes.Clone(pkt)
			var buf bytes.Buffer
			w, err := NewWriter(&buf, &Options{TTL: 1, TOS: 0x02})
			if err != nil {
				t.Fatal(err)
			}
			src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
			if err := w.WritePacket(time.Unix(1, 0), src, dst, pkt); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pkt, orig) {
				t.Error("WritePacket modified its input")
			}
			got, st := readAll(t, buf.Bytes(), nil)
			if len(got) != 1 || st.Frames != 1 || st.RoCE != 1 {
				t.Fatalf("read %d packets, stats %+v", len(got), st)
			}
			g := got[0]
			if len(g.IPHdr) != tc.ipLen {
				t.Fatalf("IP header %d bytes", len(g.IPHdr))
			}
			if !wire.VerifyICRC(g.IPHdr, g.Src.Port(), g.Dst.Port(), g.Payload) {
				t.Error("ICRC in the record does not verify against its IP header")
			}
			if !bytes.Equal(g.Payload[:len(pkt)-4], pkt[:len(pkt)-4]) {
				t.Error("payload changed")
			}
			if g.Src.Addr() != src.Addr().Unmap() || g.Dst.Addr() != dst.Addr().Unmap() {
				t.Errorf("addresses %v > %v", g.Src, g.Dst)
			}
			if tc.ipLen == 20 {
				h := g.IPHdr
				if h[1] != 0x02 || h[8] != 1 || h[6] != 0x40 || binary.BigEndian.Uint16(h[4:]) != 0 {
					t.Errorf("IPv4 header %x: want TOS 2, TTL 1, DF, ID 0", h)
				}
				if wire.IPv4Checksum(h) != 0 {
					t.Error("bad IPv4 header checksum")
				}
			}
		})
	}
}

func TestWriterErrors(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, nil)
	err := w.WritePacket(time.Now(), netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("[fd00::1]:4791"), make([]byte, 16))
	if !errors.Is(err, ErrAddrFamily) {
		t.Errorf("mixed families: %v", err)
	}
	err = w.WritePacket(time.Now(), netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:4791"), make([]byte, 70000))
	if !errors.Is(err, ErrTooLong) {
		t.Errorf("oversized: %v", err)
	}
	w2, _ := NewWriter(&buf, &Options{LinkType: LinkTypeLinuxSLL})
	err = w2.WritePacket(time.Now(), netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:4791"), make([]byte, 16))
	if !errors.Is(err, ErrSynthLinkType) {
		t.Errorf("SLL synth: %v", err)
	}
}

func TestWriterConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	w, err := Create(path, &Options{Nanoseconds: true})
	if err != nil {
		t.Fatal(err)
	}
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11}, Payload: make([]byte, 100)}
	shared := p.Append(nil)
	const G, N = 4, 50
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			pkt := shared
			for i := range N {
				src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(g)}), uint16(i))
				if err := w.WritePacket(time.Unix(0, int64(i)), src, netip.MustParseAddrPort("10.0.1.1:4791"), pkt); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(time.Now(), netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:4791"), make([]byte, 16)); err == nil {
		t.Error("write after Close succeeded")
	}
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, img, nil)
	if len(got) != G*N || w.Packets() != G*N {
		t.Fatalf("read %d packets, Packets() = %d", len(got), w.Packets())
	}
	for _, g := range got {
		if !wire.VerifyICRC(g.IPHdr, g.Src.Port(), g.Dst.Port(), g.Payload) {
			t.Fatalf("frame %d: bad ICRC", g.Frame)
		}
		if g.Time.Nanosecond() != int(g.Src.Port()) {
			t.Fatalf("frame %d: nanosecond timestamp %v lost", g.Frame, g.Time)
		}
	}
}

func TestWritePacketAllocs(t *testing.T) {
	w, _ := NewWriter(io.Discard, nil)
	pkt := (&wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly}, Payload: make([]byte, 4096)}).Append(nil)
	src, dst := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	ts := time.Now()
	if n := testing.AllocsPerRun(100, func() { _ = w.WritePacket(ts, src, dst, pkt) }); n != 0 {
		t.Errorf("WritePacket allocates %v times", n)
	}
}

func TestSnaplen(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, &Options{Snaplen: 60})
	pkt := (&wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly}, Payload: make([]byte, 100)}).Append(nil)
	if err := w.WritePacket(time.Unix(5, 0), netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:4791"), pkt); err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, buf.Bytes(), nil)
	if len(got) != 1 || !got[0].Truncated || len(got[0].Payload) != 60-14-20-8 || got[0].WireLen != 14+20+8+len(pkt) {
		t.Fatalf("got %+v", got)
	}
}

func TestWriterRawIP(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, &Options{LinkType: LinkTypeRaw})
	if err != nil {
		t.Fatal(err)
	}
	pkt := (&wire.Packet{BTH: wire.BTH{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 3}, DETH: wire.DETH{QKey: 1, SrcQP: 2}, Payload: []byte("abc")}).Append(nil)
	if err := w.WritePacket(time.Unix(9, 0), netip.MustParseAddrPort("[fd00::1]:49152"), netip.MustParseAddrPort("[fd00::2]:0"), pkt); err != nil {
		t.Fatal(err)
	}
	img := buf.Bytes()
	if lt := binary.LittleEndian.Uint32(img[20:]); lt != uint32(LinkTypeRaw) {
		t.Errorf("link type %d", lt)
	}
	if img[40]>>4 != 6 {
		t.Errorf("frame does not start with an IPv6 header: %x", img[40:48])
	}
	got, _ := readAll(t, img, nil)
	if len(got) != 1 || got[0].Dst.Port() != wire.UDPPort || !wire.VerifyICRC(got[0].IPHdr, got[0].Src.Port(), got[0].Dst.Port(), got[0].Payload) {
		t.Fatalf("got %+v", got)
	}
}

func BenchmarkWritePacket4K(b *testing.B) {
	w, _ := NewWriter(io.Discard, nil)
	pkt := (&wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendMiddle}, Payload: make([]byte, 4096)}).Append(nil)
	src, dst := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	ts := time.Now()
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		_ = w.WritePacket(ts, src, dst, pkt)
	}
}

func BenchmarkReaderNext(b *testing.B) {
	img, _ := os.ReadFile("../testdata/captures/ud_pingpong.pcap")
	b.ReportAllocs()
	var p Packet
	br := bytes.NewReader(img)
	r, _ := NewReader(br, nil)
	for b.Loop() {
		if r.Next(&p) != nil {
			br.Reset(img)
			r, _ = NewReader(br, nil)
		}
	}
}
