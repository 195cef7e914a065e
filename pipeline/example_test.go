package pipeline_test

import (
	"context"
	"fmt"
	"net"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/pipeline"
	"github.com/softroce/softroce/verbs"
)

// Register an existing ring (made by "softroce dada db" or psrdada's dada_db)
// and look up the keys of the block a receive loop fills next.
func ExampleRegisterRing() {
	h, err := dada.Connect(0xdada, dada.AttachOptions{Layout: dada.LayoutContiguousTry})
	if err != nil {
		panic(err)
	}
	defer h.Detach()
	dev, err := verbs.OpenUDP("192.0.2.10:4791", nil)
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	mrs, err := pipeline.RegisterRing(pd, h.Data, pipeline.RegisterOptions{})
	if err != nil {
		panic(err)
	}
	defer mrs.Close()
	fmt.Println(mrs.Mode, mrs.Reason) // single, blocks are contiguous

	w, _ := h.OpenWriter(context.Background(), dada.WriterOptions{})
	defer w.Close()
	w.WriteHeader(dada.NewHeader(4096))
	blk, _ := w.OpenBlock()
	b, addr, _ := mrs.Lookup(blk.Data) // the current block's lkey/rkey and address
	fmt.Printf("block %d at %#x lkey %#x\n", blk.Index, addr, b.LKey)
}

// Receive RoCE observations into the ring at key dada, one per connection.
func ExampleRoCEReceiver() {
	h, err := dada.Connect(0xdada, dada.AttachOptions{Layout: dada.LayoutContiguousTry})
	if err != nil {
		panic(err)
	}
	defer h.Detach()
	dev, err := verbs.OpenUDP("192.0.2.10:4791", nil)
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	rr, err := pipeline.NewRoCEReceiver(dev, h, pipeline.RoCERecvConfig{})
	if err != nil {
		panic(err)
	}
	defer rr.Close()
	ln, _ := net.Listen("tcp", ":18520")
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		sum, err := rr.Receive(context.Background(), c)
		c.Close()
		fmt.Println(sum.Bytes, sum.Blocks, sum.Gbps(), err)
	}
}
