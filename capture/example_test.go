package capture_test

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/wire"
)

// Record a RoCEv2 packet as it would leave a device, then read it back.
func Example() {
	var file bytes.Buffer
	w, err := capture.NewWriter(&file, nil) // pcap, LINKTYPE_ETHERNET
	if err != nil {
		panic(err)
	}
	pkt := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 1},
		Payload: []byte("hello")}
	src := netip.MustParseAddrPort("10.0.0.1:49152")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	// The ICRC placeholder is filled for the synthesised IPv4 header.
	if err := w.WritePacket(time.Unix(0, 0), src, dst, pkt.Append(nil)); err != nil {
		panic(err)
	}

	r, err := capture.NewReader(&file, nil)
	if err != nil {
		panic(err)
	}
	var p capture.Packet
	for r.Next(&p) != io.EOF {
		var h wire.BTH
		h.Decode(p.Payload)
		fmt.Println(p.Src, ">", p.Dst, h.Opcode, "ICRC ok:", wire.VerifyICRC(p.IPHdr, p.Src.Port(), p.Dst.Port(), p.Payload))
	}
	// Output: 10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY ICRC ok: true
}
