package pipe_test

import (
	"fmt"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// A pipe whose A→B direction loses about a quarter of the datagrams,
// always the same ones for a given seed.
func ExampleNew() {
	a, b, err := pipe.New(pipe.Config{Faults: pipe.Faults{Loss: 0.25}, Seed: 42}, pipe.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	defer b.Close()

	pkts := make([]link.Packet, 16)
	for i := range pkts {
		p := wire.Packet{BTH: wire.BTH{Opcode: wire.OpSendOnly, DestQP: 0x11, PSN: uint32(i)}}
		pkts[i].Buf = p.Append(nil) // ICRC placeholder: the link fills it in
		pkts[i].N = len(pkts[i].Buf)
		pkts[i].Dst = b.LocalAddr()
	}
	n, err := a.WriteBatch(pkts)
	fmt.Println("sent", n, err)

	rd := make([]link.Packet, 16)
	for i := range rd {
		rd[i].Buf = make([]byte, b.MTU())
	}
	n, err = b.ReadBatch(rd)
	fmt.Println("received", n, err, "lost", a.Stats().Lost)
	_, ok := wire.VerifyICRCAddrs(rd[0].Src, rd[0].Dst, rd[0].Bytes())
	fmt.Println("ICRC ok:", ok)
	// Output:
	// sent 16 <nil>
	// received 11 <nil> lost 5
	// ICRC ok: true
}
