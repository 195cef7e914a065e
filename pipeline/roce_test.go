package pipeline

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// rocePipe opens two devices joined by a pipe and a TCP listener for the
// control connection, all closed when the test ends.
func rocePipe(t *testing.T) (da, db *verbs.Device, ln net.Listener) {
	t.Helper()
	da, db, err := verbs.OpenPipe(pipe.Config{MTU: 9000, QueueLen: 4096}, pipe.Config{MTU: 9000, QueueLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return da, db, ln
}

// roceTransfer runs one RoCE transfer of size bytes between two devices
// joined by a pipe, into hdu, with a reader that sleeps slow per block.
func roceTransfer(t *testing.T, hdu *dada.HDU, size uint64, slow time.Duration, rcfg RoCERecvConfig, scfg RoCESendConfig) (recv, send Summary, rst, sst *Stats) {
	t.Helper()
	ctx := testCtx(t)
	da, db, ln := rocePipe(t)
	rst, sst = new(Stats), new(Stats)
	rcfg.Stats = rst
	rr, err := NewRoCEReceiver(db, hdu, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rr.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Log(rr.Registration())
	type res struct {
		s   Summary
		err error
	}
	rdone := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			rdone <- res{err: err}
			return
		}
		defer c.Close()
		s, err := rr.Receive(ctx, c)
		rdone <- res{s, err}
	}()
	type rd struct {
		hdr  *dada.Header
		data []byte
		err  error
	}
	rdc := make(chan rd, 1)
	go func() {
		h, d, err := readTransfer(ctx, hdu.Key(), slow)
		rdc <- rd{h, d, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr := dada.NewHeader(4096)
	hdr.Set("SOURCE", "B1937+21")
	hdr.Set("TELESCOPE", "Parkes")
	scfg.Header, scfg.Bytes, scfg.Stats = hdr, size, sst
	send, err = SendRoCE(ctx, c, da, scfg)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	r := <-rdone
	if r.err != nil {
		t.Fatalf("receive: %v", r.err)
	}
	got := <-rdc
	if got.err != nil {
		t.Fatalf("reader: %v", got.err)
	}
	if src, _ := got.hdr.Get("SOURCE"); src != "B1937+21" {
		t.Errorf("header at the reader:\n%s", got.hdr)
	}
	if uint64(len(got.data)) != size {
		t.Fatalf("reader got %d bytes, want %d", len(got.data), size)
	}
	if off := CheckPattern(got.data, 0); off >= 0 {
		t.Fatalf("data differ at byte %d", off)
	}
	if r.s.Bytes != size || send.Bytes != size {
		t.Errorf("summaries: receiver %d bytes, sender %d, want %d", r.s.Bytes, send.Bytes, size)
	}
	return r.s, send, rst, sst
}

func TestRoCETransfer(t *testing.T) {
	cases := []struct {
		name   string
		nbufs  int
		bufsz  uint64
		layout dada.Layout
		mode   Mode
		size   uint64
		send   RoCESendConfig
	}{
		{"short last block", 4, 65536, dada.LayoutContiguousTry, Auto, 1000000, RoCESendConfig{}},
		{"block boundary", 4, 65536, dada.LayoutContiguousTry, Auto, 12 * 65536, RoCESendConfig{}},
		{"per block", 3, 65536, dada.LayoutKernel, Auto, 500000, RoCESendConfig{}},
		{"odd block size", 4, 50000, dada.LayoutContiguousTry, Auto, 333333, RoCESendConfig{}},
		{"empty", 4, 65536, dada.LayoutContiguousTry, Single, 0, RoCESendConfig{}},
		{"one QP", 4, 65536, dada.LayoutContiguousTry, Auto, 700000, RoCESendConfig{QPs: 1}},
		{"SEND", 4, 65536, dada.LayoutContiguousTry, Auto, 1000000, RoCESendConfig{UseSend: true, ChunkSize: 8192}},
		{"SEND per block, odd chunks", 3, 65536, dada.LayoutKernel, Auto, 12*65536 + 5, RoCESendConfig{UseSend: true, ChunkSize: 10000, QPs: 2}},
		{"SEND block boundary", 4, 65536, dada.LayoutKernel, PerBlock, 5 * 65536, RoCESendConfig{UseSend: true, ChunkSize: 4096}},
		{"SEND empty", 4, 65536, dada.LayoutContiguousTry, Auto, 0, RoCESendConfig{UseSend: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdu := newRing(t, c.nbufs, c.bufsz, c.layout)
			r, s, _, _ := roceTransfer(t, hdu, c.size, 0, RoCERecvConfig{Register: RegisterOptions{Mode: c.mode}}, c.send)
			wantBlocks := c.size/c.bufsz + 1
			if r.Blocks != wantBlocks || s.Blocks != wantBlocks {
				t.Errorf("blocks: receiver %d, sender %d, want %d", r.Blocks, s.Blocks, wantBlocks)
			}
		})
	}
}

// A slow reader holds the sender back; nothing unread is overwritten.
func TestRoCEBackpressure(t *testing.T) {
	for _, send := range []bool{false, true} {
		t.Run(map[bool]string{false: "write", true: "send"}[send], func(t *testing.T) {
			testRoCEBackpressure(t, RoCESendConfig{UseSend: send, ChunkSize: 16384})
		})
	}
}

func testRoCEBackpressure(t *testing.T, scfg RoCESendConfig) {
	hdu := newRing(t, 3, 65536, dada.LayoutContiguousTry)
	start := time.Now()
	_, _, rst, sst := roceTransfer(t, hdu, 10*65536+100, 30*time.Millisecond, RoCERecvConfig{}, scfg)
	el := time.Since(start)
	if el < 250*time.Millisecond {
		t.Errorf("transfer took %v; the reader alone needs 330 ms", el)
	}
	if sst.WaitNanos.Load() < int64(100*time.Millisecond) || rst.WaitNanos.Load() < int64(100*time.Millisecond) {
		t.Errorf("sender waited %v for credits, receiver %v for blocks: no backpressure",
			time.Duration(sst.WaitNanos.Load()), time.Duration(rst.WaitNanos.Load()))
	}
}

// A sender that gives up mid-transfer: the receiver ends the transfer after
// the last complete block, so the reader sees a clean end of data, and the
// ring takes the next observation.
func TestRoCESenderAbort(t *testing.T) {
	hdu := newRing(t, 4, 65536, dada.LayoutContiguousTry)
	ctx := testCtx(t)
	da, db, err := verbs.OpenPipe(pipe.Config{MTU: 9000}, pipe.Config{MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	defer db.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rr, err := NewRoCEReceiver(db, hdu, RoCERecvConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	type rd struct {
		data []byte
		err  error
	}
	for obs, abort := range []bool{true, false} {
		rerr := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				rerr <- err
				return
			}
			defer c.Close()
			_, err = rr.Receive(ctx, c)
			rerr <- err
		}()
		rdc := make(chan rd, 1)
		go func() {
			_, d, err := readTransfer(ctx, hdu.Key(), 10*time.Millisecond)
			rdc <- rd{d, err}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		var st Stats
		if abort {
			go func() {
				for st.Blocks.Load() < 5 {
					time.Sleep(time.Millisecond)
				}
				cancel()
			}()
		}
		_, serr := SendRoCE(sctx, c, da, RoCESendConfig{Header: dada.NewHeader(4096), Bytes: 40 * 65536, Stats: &st})
		cancel()
		c.Close()
		err = <-rerr
		r := <-rdc
		if r.err != nil {
			t.Fatalf("observation %d: reader: %v", obs, r.err)
		}
		if off := CheckPattern(r.data, 0); off >= 0 {
			t.Fatalf("observation %d: data differ at %d", obs, off)
		}
		if !abort {
			if serr != nil || err != nil || len(r.data) != 40*65536 {
				t.Fatalf("observation %d: send %v, receive %v, %d bytes read", obs, serr, err, len(r.data))
			}
			continue
		}
		if !errors.Is(serr, context.Canceled) || !errors.Is(err, ErrPeer) {
			t.Fatalf("aborted send: %v; receiver: %v", serr, err)
		}
		if len(r.data)%65536 != 0 || len(r.data) == 0 || len(r.data) >= 40*65536 {
			t.Fatalf("reader got %d bytes of an aborted transfer, want whole blocks", len(r.data))
		}
		t.Logf("aborted transfer: %d blocks reached the reader; receiver: %v", len(r.data)/65536, err)
	}
}

// Relay: a local ring's transfer goes, block by block and straight from the
// local ring's memory, into the remote ring.
func TestRoCERelay(t *testing.T) {
	for _, size := range []int{5*65536 + 999, 6 * 65536} {
		src := newRing(t, 4, 65536, dada.LayoutKernel) // per-block registration on the sending side
		dst := newRing(t, 4, 65536, dada.LayoutContiguousTry)
		ctx := testCtx(t)
		// a local writer fills the source ring with the pattern
		werr := make(chan error, 1)
		go func() {
			h, err := dada.Connect(src.Key(), dada.AttachOptions{})
			if err != nil {
				werr <- err
				return
			}
			defer h.Detach()
			w, err := h.OpenWriter(ctx, dada.WriterOptions{})
			if err != nil {
				werr <- err
				return
			}
			hdr := dada.NewHeader(4096)
			hdr.Set("SOURCE", "relayed")
			w.WriteHeader(hdr)
			data := make([]byte, size)
			FillPattern(data, 0)
			_, err = w.Write(data)
			werr <- errors.Join(err, w.Close())
		}()
		da, db, err := verbs.OpenPipe(pipe.Config{MTU: 9000}, pipe.Config{MTU: 9000})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rr, err := NewRoCEReceiver(db, dst, RoCERecvConfig{})
		if err != nil {
			t.Fatal(err)
		}
		rerr := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				rerr <- err
				return
			}
			defer c.Close()
			_, err = rr.Receive(ctx, c)
			rerr <- err
		}()
		type rdres struct {
			hdr  *dada.Header
			data []byte
			err  error
		}
		rdc := make(chan rdres, 1)
		go func() {
			h, d, err := readTransfer(ctx, dst.Key(), 0)
			rdc <- rdres{h, d, err}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sum, err := SendRoCE(ctx, c, da, RoCESendConfig{Source: src})
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := <-rerr; err != nil {
			t.Fatal(err)
		}
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
		r := <-rdc
		if r.err != nil {
			t.Fatal(r.err)
		}
		if s, _ := r.hdr.Get("SOURCE"); s != "relayed" || len(r.data) != size || sum.Bytes != uint64(size) {
			t.Fatalf("relayed %d bytes (sender says %d), SOURCE %q; want %d", len(r.data), sum.Bytes, s, size)
		}
		if off := CheckPattern(r.data, 0); off >= 0 {
			t.Fatalf("relayed data differ at %d", off)
		}
		rr.Close()
		ln.Close()
		da.Close()
		db.Close()
	}
}
