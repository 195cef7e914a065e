package udp_test

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// Two endpoints on loopback; the sender leaves the ICRC as a placeholder
// and the link fills it in for the IP header the kernel will write.
func ExampleListen() {
	a, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.WithAnyPort())
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.WithAnyPort())
	if err != nil {
		panic(err)
	}
	defer b.Close()

	p := wire.Packet{BTH: wire.BTH{Opcode: wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11}, Payload: []byte("hello")}
	out := []link.Packet{{Buf: p.Append(nil), Dst: b.LocalAddr()}}
	out[0].N = len(out[0].Buf)
	if _, err := a.WriteBatch(out); err != nil {
		panic(err)
	}

	in := make([]link.Packet, b.BatchSize())
	for i := range in {
		in[i].Buf = make([]byte, 65536)
	}
	n, err := b.ReadBatch(in)
	if err != nil {
		panic(err)
	}
	var q wire.Packet
	_, icrcOK := wire.VerifyICRCAddrs(in[0].Src, in[0].Dst, in[0].Bytes())
	fmt.Println(n, q.Parse(in[0].Bytes()), string(q.Payload), icrcOK)
	// Output: 1 <nil> hello true
}
