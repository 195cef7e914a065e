package capture

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/wire"
)

// gsoPackets returns RoCE packets (BTH, payload, ICRC) of an RDMA WRITE
// from src to dst: n MIDDLE packets of mtu bytes, then a LAST of tail
// bytes; packet i's ICRC is computed with IPv4 Identification i, as
// link/udp fills a GSO run.
func gsoPackets(src, dst netip.AddrPort, n, mtu, tail int) [][]byte {
	var pkts [][]byte
	for i := 0; i <= n; i++ {
		size, op := mtu, byte(0x07) // RC RDMA WRITE MIDDLE
		if i == n {
			size, op = tail, 0x08 // RC RDMA WRITE LAST
		}
		b := make([]byte, wire.BTHLen+size+wire.ICRCLen)
		b[0] = op
		b[2], b[3] = 0xFF, 0xFF
		binary.BigEndian.PutUint32(b[4:], 0x000011)      // dest QP
		binary.BigEndian.PutUint32(b[8:], uint32(100+i)) // PSN
		for j := wire.BTHLen; j < len(b)-wire.ICRCLen; j++ {
			b[j] = byte(j + i)
		}
		wire.FillICRC(b, src, dst, uint16(i))
		pkts = append(pkts, b)
	}
	return pkts
}

// gsoFrame is the Ethernet frame of one UDP datagram carrying payload: the
// super-packet when payload is several packets.
func gsoFrame(src, dst netip.AddrPort, payload []byte) []byte {
	f := make([]byte, 14, 14+48+len(payload))
	if src.Addr().Is4() {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		a, b := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:], a[:])
		copy(ip[16:], b[:])
		f = append(f, ip...)
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x86DD)
		ip := make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, 17, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(8+len(payload)))
		a, b := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:], a[:])
		copy(ip[24:], b[:])
		f = append(f, ip...)
	}
	var udp [8]byte
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	f = append(f, udp[:]...)
	return append(f, payload...)
}

func TestSplitGSO(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
		n, mtu   int
		tail     int
		gsoSize  int
	}{
		{"ipv4-inferred", "127.0.0.1:49152", "127.0.0.2:4791", 3, 1024, 100, 0},
		{"ipv4-256", "10.0.0.1:50000", "10.0.0.2:4791", 5, 256, 256, 0},
		{"ipv4-given", "127.0.0.1:49152", "127.0.0.2:4791", 2, 4096, 8, wire.BTHLen + 4096 + wire.ICRCLen},
		{"ipv6-inferred", "[fd00::1]:49152", "[fd00::2]:4791", 4, 2048, 12, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
			pkts := gsoPackets(src, dst, tc.n, tc.mtu, tc.tail)
			super := gsoFrame(src, dst, bytes.Join(pkts, nil))
			var whole Packet
			if !ParseFrame(LinkTypeEthernet, super, &whole) || wire.VerifyICRC(whole.IPHdr, src.Port(), dst.Port(), whole.Payload) {
				t.Fatal("the super-packet should parse and fail its ICRC as a whole")
			}
			segs := SplitGSO(LinkTypeEthernet, super, tc.gsoSize)
			if len(segs) != len(pkts) {
				t.Fatalf("%d segments, want %d", len(segs), len(pkts))
			}
			for i, f := range segs {
				var p Packet
				if !ParseFrame(LinkTypeEthernet, f, &p) {
					t.Fatalf("segment %d does not parse", i)
				}
				if !bytes.Equal(p.Payload, pkts[i]) || p.Src != src || p.Dst != dst {
					t.Errorf("segment %d: payload or addresses differ", i)
				}
				if !wire.VerifyICRC(p.IPHdr, src.Port(), dst.Port(), p.Payload) {
					t.Errorf("segment %d: bad ICRC", i)
				}
				if src.Addr().Is4() {
					if wire.OnesSum(0, p.IPHdr) != 0xFFFF {
						t.Errorf("segment %d: bad IPv4 header checksum", i)
					}
					if id := binary.BigEndian.Uint16(p.IPHdr[4:]); id != uint16(i) {
						t.Errorf("segment %d: IPv4 ID %d", i, id)
					}
				}
				udp := f[len(f)-len(p.Payload)-8:]
				var s uint32
				if src.Addr().Is4() {
					s = uint32(wire.OnesSum(0, p.IPHdr[12:20]))
				} else {
					s = uint32(wire.OnesSum(0, p.IPHdr[8:40]))
				}
				if wire.OnesSum(s+17+uint32(len(udp))+uint32(wire.OnesSum(0, udp)), nil) != 0xFFFF {
					t.Errorf("segment %d: bad UDP checksum", i)
				}
			}
		})
	}
	// Not super-packets: one good packet; a corrupted run; a truncated frame.
	src, dst := netip.MustParseAddrPort("127.0.0.1:49152"), netip.MustParseAddrPort("127.0.0.2:4791")
	pkts := gsoPackets(src, dst, 2, 1024, 64)
	if segs := SplitGSO(LinkTypeEthernet, gsoFrame(src, dst, pkts[0]), 0); segs != nil {
		t.Errorf("a single good packet was split into %d", len(segs))
	}
	bad := bytes.Join(pkts, nil)
	bad[20] ^= 1 // inside the first packet's payload
	if segs := SplitGSO(LinkTypeEthernet, gsoFrame(src, dst, bad), 0); segs != nil {
		t.Errorf("a corrupted run was split into %d", len(segs))
	}
	f := gsoFrame(src, dst, bytes.Join(pkts, nil))
	if segs := SplitGSO(LinkTypeEthernet, f[:len(f)-10], 0); segs != nil {
		t.Errorf("a truncated frame was split into %d", len(segs))
	}
	// A hostile datagram that looks like a BTH at every offset: no split.
	if segs := SplitGSO(LinkTypeEthernet, gsoFrame(src, dst, bytes.Repeat([]byte{0xFF}, 60000)), 0); segs != nil {
		t.Errorf("an all-0xFF datagram was split into %d", len(segs))
	}
}

// FuzzSplitGSO: splitting never panics, and every segment parses.
func FuzzSplitGSO(f *testing.F) {
	src, dst := netip.MustParseAddrPort("127.0.0.1:49152"), netip.MustParseAddrPort("127.0.0.2:4791")
	f.Add(gsoFrame(src, dst, bytes.Join(gsoPackets(src, dst, 2, 256, 16), nil)), 0)
	f.Add(gsoFrame(src, dst, bytes.Join(gsoPackets(src, dst, 1, 1024, 4), nil)), 64)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		if size < 0 || size > 1<<16 {
			size = 0
		}
		for _, s := range SplitGSO(LinkTypeEthernet, b, size) {
			var p Packet
			if !ParseFrame(LinkTypeEthernet, s, &p) {
				t.Fatalf("a segment does not parse")
			}
		}
	})
}
