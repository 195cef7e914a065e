package dada

import (
	"context"
	"errors"
	"io"
	"testing"
)

// BenchmarkRingThroughput moves data from a writer to a reader through a ring
// in one process with direct block access (what an RDMA receiver and a
// consumer do): the writer fills each block with a memset-like copy, the
// reader touches every byte. It reports bytes per second.
func BenchmarkRingThroughput(b *testing.B) {
	for _, bs := range []struct {
		name  string
		bufsz uint64
		copy  bool
	}{{"4MiB", 4 << 20, true}, {"64KiB", 64 << 10, true}, {"4MiB-nocopy", 4 << 20, false}} {
		b.Run(bs.name, func(b *testing.B) { benchThroughput(b, bs.bufsz, bs.copy) })
	}
}

// benchThroughput with docopy false measures the ring's own cost per block
// (semaphores and bookkeeping): data placed in place costs nothing more.
func benchThroughput(b *testing.B, bufsz uint64, docopy bool) {
	needIPC(b)
	k := randomKey(b)
	h, err := Create(Config{Key: k, NBufs: 8, BufSize: bufsz})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Destroy()
	rh, err := Connect(k, AttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer rh.Detach()
	ctx := context.Background()
	w, err := h.OpenWriter(ctx, WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.WriteHeader(NewHeader(4096)); err != nil {
		b.Fatal(err)
	}
	r, err := rh.OpenReader(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.ReadHeader(); err != nil {
		b.Fatal(err)
	}
	src := make([]byte, bufsz)
	for i := range src {
		src[i] = byte(i)
	}
	done := make(chan error, 1)
	blocks := b.N
	go func() {
		var sum byte
		for {
			blk, err := r.NextBlock()
			if errors.Is(err, io.EOF) {
				done <- nil
				return
			}
			if err != nil {
				done <- err
				return
			}
			if docopy {
				for i := 0; i < len(blk.Data); i += 64 {
					sum += blk.Data[i]
				}
			}
			r.MarkCleared()
		}
	}()
	b.SetBytes(int64(bufsz))
	b.ReportAllocs()
	b.ResetTimer()
	for range blocks {
		blk, err := w.OpenBlock()
		if err != nil {
			b.Fatal(err)
		}
		if docopy {
			copy(blk.Data, src)
		}
		if err := w.MarkFilled(len(blk.Data)); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func TestHotPathAllocs(t *testing.T) {
	h := newHDU(t, Config{NBufs: 4, BufSize: 4096})
	rh, _ := Connect(h.Key(), AttachOptions{})
	defer rh.Detach()
	ctx := testCtx(t)
	w, _ := h.OpenWriter(ctx, WriterOptions{})
	w.WriteHeader(NewHeader(4096))
	r, err := rh.OpenReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.ReadHeader()
	allocs := testing.AllocsPerRun(200, func() {
		blk, err := w.OpenBlock()
		if err != nil {
			t.Fatal(err)
		}
		w.MarkFilled(len(blk.Data))
		if _, err := r.NextBlock(); err != nil {
			t.Fatal(err)
		}
		r.MarkCleared()
	})
	if allocs != 0 {
		t.Errorf("a block through the ring allocates %v times", allocs)
	}
	w.Close()
}
