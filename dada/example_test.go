package dada_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/softroce/softroce/dada"
)

// An observation header: "KEY value" lines in a fixed-size block.
func ExampleHeader() {
	h := dada.NewHeader(dada.DefaultHeaderSize)
	h.Set("SOURCE", "J0437-4715")
	h.SetInt("NCHAN", 1024)
	n, _ := h.GetInt("NCHAN")
	src, _ := h.Get("SOURCE")
	size, _ := h.Size()
	fmt.Println(src, n, size)
	fmt.Println(h.Validate(dada.DefaultHeaderSize) == nil)
	// Output:
	// J0437-4715 1024 4096
	// true
}

// Create a ring, write one transfer (header and data) into it, and read it
// back through a second attachment, as a psrdada reader in another process
// would.
func Example() {
	key := dada.Key(0x7e570000 | os.Getpid()&0xfff0) // a key no one else uses
	ring, err := dada.Create(dada.Config{Key: key, NBufs: 4, BufSize: 4096})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ring.Destroy()
	ctx := context.Background()

	w, err := ring.OpenWriter(ctx, dada.WriterOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	hdr := dada.NewHeader(dada.DefaultHeaderSize)
	hdr.Set("SOURCE", "J0437-4715")
	w.WriteHeader(hdr)
	w.Write([]byte("ten bytes!"))
	w.Close() // end of data

	other, err := dada.Connect(key, dada.AttachOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer other.Detach()
	r, err := other.OpenReader(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	got, _ := r.ReadHeader()
	src, _ := got.Get("SOURCE")
	data, err := io.ReadAll(r)
	fmt.Printf("%s: %q %v\n", src, data, err)
	// Output:
	// J0437-4715: "ten bytes!" <nil>
}
