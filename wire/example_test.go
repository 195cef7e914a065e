package wire_test

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/wire"
)

// Build an RDMA WRITE ONLY packet, give it the ICRC of the IPv4 datagram it
// will travel in, then parse and verify it as a receiver on a UDP socket
// does (seeing the addresses but not the IP header).
func Example() {
	src := netip.MustParseAddrPort("192.0.2.1:49152")
	dst := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), wire.UDPPort)

	out := wire.Packet{
		BTH:     wire.BTH{Opcode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 0xFFFFFF},
		RETH:    wire.RETH{VA: 0x1000, RKey: 0x1234, Length: 5},
		Payload: []byte("hello"),
	}
	b := out.Append(nil)          // headers, payload, pad, zero ICRC
	wire.FillICRC(b, src, dst, 0) // Linux sends RoCE with IPv4 ID 0

	var in wire.Packet
	if err := in.Parse(b); err != nil {
		fmt.Println(err)
		return
	}
	id, ok := wire.VerifyICRCAddrs(src, dst, b)
	fmt.Printf("%v to QP %#x, PSN %#x (next %#x), %d pad bytes\n",
		in.BTH.Opcode, in.BTH.DestQP, in.BTH.PSN, wire.PSNAdd(in.BTH.PSN, 1), in.BTH.PadCnt)
	fmt.Printf("RETH va %#x rkey %#x len %d: %q\n", in.RETH.VA, in.RETH.RKey, in.RETH.Length, in.Payload)
	fmt.Printf("ICRC ok %v (IPv4 ID %d), %d bytes in a %d-byte datagram\n",
		ok, id, len(b), wire.IPv4HeaderLen+8+len(b))

	// Output:
	// RC_RDMA_WRITE_ONLY to QP 0x11, PSN 0xffffff (next 0x0), 3 pad bytes
	// RETH va 0x1000 rkey 0x1234 len 5: "hello"
	// ICRC ok true (IPv4 ID 0), 40 bytes in a 68-byte datagram
}

// Build the IPv4 header a RoCE packet travels in and check the packet's
// ICRC against it, as a receiver that sees the whole datagram does.
func ExampleIPv4Header() {
	src, dst := [4]byte{192, 0, 2, 1}, [4]byte{192, 0, 2, 2}
	pkt := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11}, Payload: []byte("hi")}
	b := pkt.Append(nil)
	wire.PutICRC(b, wire.ICRCIPv4(src, dst, 0, true, 49152, wire.UDPPort, b[:len(b)-wire.ICRCLen]))

	h := wire.IPv4Header{TotalLen: uint16(wire.IPv4HeaderLen + 8 + len(b)), DF: true, TTL: 64, Src: src, Dst: dst}
	ip := h.Append(nil)
	fmt.Printf("% x\n", ip[:12])
	fmt.Println("header checksum ok:", wire.IPv4Checksum(ip) == 0)
	fmt.Println("ICRC ok:", wire.VerifyICRC(ip, 49152, wire.UDPPort, b))
	// Output:
	// 45 00 00 30 00 00 40 00 40 11 b6 b9
	// header checksum ok: true
	// ICRC ok: true
}
