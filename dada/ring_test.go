package dada

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

func TestLayoutOffsets(t *testing.T) {
	// the offsets of the psrdada ABI document, checked against a Go struct
	// with C layout rules
	type ipcsync struct {
		SemkeyConnect int32
		SemkeyData    [8]int32
		Nbufs, Bufsz  uint64
		WBufNext      uint64
		WBufCurr      uint64
		WState        int32
		WXfer         uint64
		RBufs         [8]uint64
		RStates       [8]int32
		RXfers        [8]uint64
		NReaders      uint32
		SBuf, SByte   [8]uint64
		EOD           [8]byte
		EBuf, EByte   [8]uint64
		OnDevice      int32
	}
	var s ipcsync
	got := []uintptr{unsafe.Offsetof(s.SemkeyData), unsafe.Offsetof(s.Nbufs), unsafe.Offsetof(s.Bufsz),
		unsafe.Offsetof(s.WBufNext), unsafe.Offsetof(s.WBufCurr), unsafe.Offsetof(s.WState), unsafe.Offsetof(s.WXfer),
		unsafe.Offsetof(s.RBufs), unsafe.Offsetof(s.RStates), unsafe.Offsetof(s.RXfers), unsafe.Offsetof(s.NReaders),
		unsafe.Offsetof(s.SBuf), unsafe.Offsetof(s.SByte), unsafe.Offsetof(s.EOD), unsafe.Offsetof(s.EBuf),
		unsafe.Offsetof(s.EByte), unsafe.Offsetof(s.OnDevice), unsafe.Sizeof(s)}
	want := []uintptr{offSemkeyData, offNbufs, offBufsz, offWBufNext, offWBufCurr, offWState, offWXfer, offRBufs,
		offRStates, offRXfers, offNReaders, offSBuf, offSByte, offEOD, offEBuf, offEByte, offOnDevice, SyncSize}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("layout (-want +got):\n%s", diff)
	}
}

func TestKeys(t *testing.T) {
	k, err := ParseKey("dada")
	if err != nil || k != 0xdada {
		t.Fatalf("ParseKey(dada) = %v, %v", k, err)
	}
	if k2, _ := ParseKey("0xDADA"); k2 != k {
		t.Fatalf("ParseKey(0xDADA) = %v", k2)
	}
	for _, bad := range []string{"", "xyz", "123456789"} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseKey(%q) err = %v", bad, err)
		}
	}
	// worked example of the ABI document: dada_db -k dada -n 8
	got := []Key{k.ConnectSemKey(), k.ReaderSemKey(0), k.BlockKey(0), k.BlockKey(7), k.HeaderKey().BlockKey(7)}
	want := []Key{0x1dada, 0x2dada, 0xadada, 0x11dada, 0x11dadb}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("derived keys (-want +got):\n%s", diff)
	}
	if s := k.String(); s != "0x0000dada" {
		t.Fatalf("String = %s", s)
	}
}

func TestCreateAttachDestroy(t *testing.T) {
	h := newHDU(t, Config{NBufs: 4, BufSize: 65536, NReaders: 2})
	k := h.Key()
	// the objects dada_db makes: 2 sync + 4 data + 8 header segments; per
	// block 1 connect set + 2 reader sets
	objs := ipcWith(t, k)
	var shm, sem int
	sizes := map[uint64]int{}
	for _, o := range objs {
		if o.Size <= 5 && o.Size >= 2 && o.CPID == 0 {
			sem++
		} else {
			shm++
			sizes[o.Size]++
		}
	}
	if shm != 14 || sem != 6 {
		t.Fatalf("got %d segments, %d semaphore sets; want 14, 6: %v", shm, sem, objs)
	}
	if sizes[SyncSize+5*4] != 1 || sizes[SyncSize+5*8] != 1 || sizes[65536] != 4 || sizes[4096] != 8 {
		t.Fatalf("segment sizes %v", sizes)
	}
	st := h.Data.Stats()
	if st.Write != 1 || st.Read != 2 || len(st.Readers) != 2 {
		t.Fatalf("initial semaphores %+v", st)
	}
	for _, rs := range st.Readers {
		if rs.SODAck != 8 || rs.EODAck != 8 || rs.Full != 0 || rs.Clear != 0 || rs.ReaderConn != 1 {
			t.Fatalf("initial reader semaphores %+v", rs)
		}
	}
	// attach from "another process"
	h2, err := Connect(k, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h2.Data.NBufs() != 4 || h2.Data.BufSize() != 65536 || h2.Data.NReaders() != 2 || h2.Header.NBufs() != 8 || h2.Header.BufSize() != 4096 {
		t.Fatalf("attached ring: %d×%d r=%d hdr %d×%d", h2.Data.NBufs(), h2.Data.BufSize(), h2.Data.NReaders(), h2.Header.NBufs(), h2.Header.BufSize())
	}
	for i, b := range h2.Data.Blocks() {
		if b.Key != k.BlockKey(i) || len(b.Data) != 65536 || b.Addr == 0 {
			t.Fatalf("block %d: %+v", i, b)
		}
	}
	h.Data.Block(2)[100] = 42
	if h2.Data.Block(2)[100] != 42 {
		t.Fatal("blocks are not shared")
	}
	if err := h2.Detach(); err != nil {
		t.Fatal(err)
	}
	// create again: exists
	if _, err := Create(Config{Key: k}); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	if err := h.Destroy(); err != nil {
		t.Fatal(err)
	}
	if left := ipcWith(t, k); len(left) != 0 {
		t.Fatalf("left after Destroy: %v", left)
	}
	if _, err := Connect(k, AttachOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Connect to destroyed ring: %v, want ErrNotFound", err)
	}
	if err := Destroy(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Destroy absent: %v", err)
	}
}

func TestDestroyByKey(t *testing.T) {
	h := newHDU(t, Config{NBufs: 3, BufSize: 8192})
	k := h.Key()
	h.Detach()
	if err := Destroy(k); err != nil {
		t.Fatal(err)
	}
	if left := ipcWith(t, k); len(left) != 0 {
		t.Fatalf("left: %v", left)
	}
}

func TestKeyCollision(t *testing.T) {
	h := newHDU(t, Config{NBufs: 2, BufSize: 4096})
	k := h.Key()
	// a key that differs only above bit 15 uses k's objects as derived keys:
	// k-0x10000 needs k (its connect semaphores' key is k, a shm segment here)
	before := len(ipcWith(t, k))
	other := k - 0x10000
	_, err := Create(Config{Key: other, NBufs: 2, BufSize: 4096})
	var kc *KeyCollisionError
	if !errors.As(err, &kc) || !errors.Is(err, ErrKeyCollision) {
		t.Fatalf("Create(%s) = %v, want a KeyCollisionError", other.Short(), err)
	}
	if kc.Key != other || len(kc.Owners) == 0 || kc.Owners[0] != k && kc.Owners[0] != k+1 {
		t.Fatalf("collision details %+v", kc)
	}
	t.Log(err)
	// k-1's header block would be k itself
	_, err = Create(Config{Key: k - 1, NBufs: 2, BufSize: 4096})
	if !errors.Is(err, ErrExists) && !errors.Is(err, ErrKeyCollision) {
		t.Fatalf("Create(k-1) = %v", err)
	}
	t.Log(err)
	if after := len(ipcWith(t, k)); after != before {
		t.Fatalf("failed creates changed the IPC objects: %d before, %d after", before, after)
	}
}

func TestNoMemory(t *testing.T) {
	needIPC(t)
	k := randomKey(t)
	noStrays(t, k)
	_, err := Create(Config{Key: k, NBufs: 2, BufSize: 1 << 46})
	var nm *NoMemoryError
	if !errors.As(err, &nm) || !errors.Is(err, ErrNoMemory) {
		t.Skipf("kernel accepted a 64 TiB segment request (%v); cannot test", err)
	}
	t.Log(err)
	if left := ipcWith(t, k); len(left) != 0 {
		t.Fatalf("left after failed create: %v", left)
	}
}

func TestInvalidConfig(t *testing.T) {
	needIPC(t)
	k := randomKey(t)
	noStrays(t, k)
	for _, c := range []Config{{Key: k, NReaders: 9}, {Key: k, HeaderSize: 100}, {Key: k, NBufs: 70000},
		// sizes whose product overflows 64 bits
		{Key: k, BufSize: math.MaxUint64}, {Key: k, NBufs: 1, BufSize: math.MaxUint64}, {Key: k, NBufs: 8, BufSize: 1 << 61}} {
		if _, err := Create(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Create(%+v) = %v", c, err)
		}
	}
}

// transfer writes hdr and data in chunks through a Writer.
func transfer(t *testing.T, h *HDU, hdr *Header, data []byte, chunk int) {
	t.Helper()
	w, err := h.OpenWriter(testCtx(t), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		if _, err := w.Write(data[off:end]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// readAll reads one transfer through a new Reader on its own attachment.
func readOne(t *testing.T, r *Reader) (*Header, []byte) {
	t.Helper()
	hdr, err := r.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return hdr, got
}

func TestSingleReaderTransfers(t *testing.T) {
	const bufsz = 16384
	h := newHDU(t, Config{NBufs: 4, BufSize: bufsz})
	rh, err := Connect(h.Key(), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Detach()
	ctx := testCtx(t)
	r, err := rh.OpenReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sizes := []int{10*bufsz + 1234, 3 * bufsz, 0, 5}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, n := range sizes {
			hdr := testHeader(t)
			hdr.SetInt("OBS_XFER", int64(i))
			transfer(t, h, hdr, pattern(n, byte(i)), 5000)
		}
	}()
	for i, n := range sizes {
		hdr, got := readOne(t, r)
		if x, _ := hdr.GetInt("OBS_XFER"); x != int64(i) {
			t.Fatalf("transfer %d: header OBS_XFER %d", i, x)
		}
		if !bytes.Equal(got, pattern(n, byte(i))) {
			t.Fatalf("transfer %d: got %d bytes, want %d (content differs: %v)", i, len(got), n, len(got) == n)
		}
	}
	wg.Wait()
	st := h.Data.Stats()
	// counted as psrdada counts: one w_xfer per transfer, w_buf_curr after
	// the last EOD buffer (the 3*bufsz transfer ends with a full buffer)
	if st.WXfer != 4 || st.WState != StateDiscon {
		t.Fatalf("data stats %+v", st)
	}
	if hs := h.Header.Stats(); hs.WXfer != 4 || hs.WBufCurr != 4 {
		t.Fatalf("header stats %+v", hs)
	}
	// psrdada 1.1.0: after a transfer is read to its end, the reader's
	// r_bufs equals w_buf_curr (the monitor's R and W columns agree)
	for _, rg := range []*Ring{h.Data, h.Header} {
		st := rg.Stats()
		if st.Readers[0].RBuf != st.WBufCurr || st.Readers[0].RXfer != st.WXfer {
			t.Errorf("ring %s after reading every transfer: r_bufs %d r_xfers %d, want w_buf_curr %d w_xfer %d",
				rg.Key().Short(), st.Readers[0].RBuf, st.Readers[0].RXfer, st.WBufCurr, st.WXfer)
		}
	}
}

func TestPartialLastBlockDirect(t *testing.T) {
	const bufsz = 8192
	h := newHDU(t, Config{NBufs: 3, BufSize: bufsz})
	ctx := testCtx(t)
	w, err := h.OpenWriter(ctx, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.OpenBlock(); err == nil {
		t.Fatal("OpenBlock before the header should fail")
	}
	if err := w.WriteHeader(testHeader(t)); err != nil {
		t.Fatal(err)
	}
	rh, err := Connect(h.Key(), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Detach()
	if _, err := h.OpenReader(ctx); !errors.Is(err, ErrState) {
		t.Fatalf("reader on the writer's attachment: %v", err)
	}
	r, err := rh.OpenReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// two full blocks and a 100-byte block ending the transfer
	for i, n := range []int{bufsz, bufsz, 100} {
		b, err := w.OpenBlock()
		if err != nil {
			t.Fatal(err)
		}
		if b.Index != i || len(b.Data) != bufsz {
			t.Fatalf("block %d: index %d len %d", i, b.Index, len(b.Data))
		}
		copy(b.Data, pattern(n, byte(i)))
		if err := w.MarkFilled(n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.OpenBlock(); !errors.Is(err, ErrTransferEnded) {
		t.Fatalf("OpenBlock after the short block: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadHeader(); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{bufsz, bufsz, 100} {
		b, err := r.NextBlock()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Data, pattern(n, byte(i))) || b.Count != uint64(i) {
			t.Fatalf("block %d: %d bytes count %d", i, len(b.Data), b.Count)
		}
		if err := r.MarkCleared(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.NextBlock(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last block: %v, want io.EOF", err)
	}
	st := h.Data.Stats()
	if st.WBufCurr != 3 || st.WXfer != 1 || st.Readers[0].RXfer != 1 || st.Readers[0].State != StateRStop {
		t.Fatalf("stats %+v", st)
	}
}

func TestMultipleReaders(t *testing.T) {
	const bufsz, nr = 4096, 3
	h := newHDU(t, Config{NBufs: 4, BufSize: bufsz, NReaders: nr})
	ctx := testCtx(t)
	data := pattern(20*bufsz+77, 9)
	var wg sync.WaitGroup
	results := make([][]byte, nr)
	slots := make([]int, nr)
	errs := make(chan error, nr)
	for i := 0; i < nr; i++ {
		rh, err := Connect(h.Key(), AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rh.Detach() })
		r, err := rh.OpenReader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slots[i] = r.Slot()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			if _, err := r.ReadHeader(); err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(r)
			if err != nil {
				errs <- err
			}
			results[i] = b
		}()
	}
	// a fourth reader finds no slot
	rh, _ := Connect(h.Key(), AttachOptions{})
	defer rh.Detach()
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := rh.OpenReader(sctx); err == nil {
		t.Fatal("a reader beyond n_readers got a slot")
	}
	cancel()
	transfer(t, h, testHeader(t), data, 3000)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range results {
		if !bytes.Equal(results[i], data) {
			t.Fatalf("reader %d (slot %d) got %d bytes", i, slots[i], len(results[i]))
		}
	}
	if diff := cmp.Diff([]int{0, 1, 2}, sortInts(slots)); diff != "" {
		t.Fatalf("slots %v", slots)
	}
}

func sortInts(s []int) []int {
	out := append([]int(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestWriterBlocksOnSlowReader(t *testing.T) {
	// a writer must never overwrite a buffer a reader has not released
	h := newHDU(t, Config{NBufs: 2, BufSize: 4096})
	ctx := testCtx(t)
	w, err := h.OpenWriter(ctx, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.WriteHeader(testHeader(t))
	rh, _ := Connect(h.Key(), AttachOptions{})
	defer rh.Detach()
	r, err := rh.OpenReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 2; i++ {
		if _, err := w.OpenBlock(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			w.MarkFilled(4096)
		}
	}
	w.MarkFilled(4096)
	sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err = w.OpenBlockContext(sctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("OpenBlock on a full ring: %v, want deadline exceeded", err)
	}
	r.ReadHeader()
	if _, err := r.NextBlock(); err != nil {
		t.Fatal(err)
	}
	r.MarkCleared()
	if _, err := w.OpenBlock(); err != nil {
		t.Fatalf("OpenBlock after a release: %v", err)
	}
	w.MarkFilled(10)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestContiguousAttach(t *testing.T) {
	const bufsz = 64 * 1024
	h := newHDU(t, Config{NBufs: 8, BufSize: bufsz, AttachOptions: AttachOptions{Layout: LayoutContiguous}})
	if h.Data.Layout() != LayoutContiguous || !h.Data.Contiguous() {
		t.Fatalf("layout %v contiguous %v", h.Data.Layout(), h.Data.Contiguous())
	}
	view, ok := h.Data.ContiguousView()
	if !ok || len(view) != 8*bufsz {
		t.Fatal("no contiguous view")
	}
	bl := h.Data.Blocks()
	for i := 1; i < len(bl); i++ {
		if bl[i].Addr != bl[0].Addr+uintptr(i*bufsz) {
			t.Fatalf("block %d at %#x, base %#x", i, bl[i].Addr, bl[0].Addr)
		}
	}
	// write through the single view, read through a kernel-placed attachment
	data := pattern(len(view), 3)
	copy(view, data)
	other, err := Connect(h.Key(), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Detach()
	for i := 0; i < 8; i++ {
		if !bytes.Equal(other.Data.Block(i), data[i*bufsz:(i+1)*bufsz]) {
			t.Fatalf("block %d differs between the views", i)
		}
	}
	// and the other way round
	other.Data.Block(5)[7] ^= 0xff
	if view[5*bufsz+7] != data[5*bufsz+7]^0xff {
		t.Fatal("write through the kernel view not seen in the contiguous view")
	}
	// blocks opened by a writer are the slices of the view
	w, err := h.OpenWriter(testCtx(t), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.WriteHeader(NewHeader(4096))
	for i := 0; i < 3; i++ {
		blk, err := w.OpenBlock()
		if err != nil {
			t.Fatal(err)
		}
		a := uintptr(unsafe.Pointer(&blk.Data[0]))
		if idx, off, ok := h.Data.BlockOf(a + 10); !ok || idx != blk.Index || off != 10 || &blk.Data[0] != &view[blk.Index*bufsz] {
			t.Fatalf("block %d: BlockOf = %d, %d, %v", blk.Index, idx, off, ok)
		}
		w.MarkFilled(bufsz)
	}
	if _, _, ok := h.Data.BlockOf(0); ok {
		t.Fatal("BlockOf(0) found a block")
	}
	w.Close()
	// a non-page-multiple block size cannot be made contiguous
	h2 := newHDU(t, Config{NBufs: 2, BufSize: 5000})
	h2.Detach()
	if _, err := Connect(h2.Key(), AttachOptions{Layout: LayoutContiguous}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("contiguous attach of 5000-byte blocks: %v", err)
	}
	h3, err := Connect(h2.Key(), AttachOptions{Layout: LayoutContiguousTry})
	if err != nil {
		t.Fatal(err)
	}
	if h3.Data.Layout() != LayoutKernel {
		t.Fatalf("fallback layout %v", h3.Data.Layout())
	}
	h3.Destroy()
}

func TestContextCancelsWait(t *testing.T) {
	h := newHDU(t, Config{NBufs: 2, BufSize: 4096})
	rh, _ := Connect(h.Key(), AttachOptions{})
	defer rh.Detach()
	r, err := rh.OpenReader(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := r.ReadHeaderContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadHeader with no writer: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancellation took %v", d)
	}
	// the writer lock is exclusive
	w, err := h.OpenWriter(testCtx(t), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	wh, _ := Connect(h.Key(), AttachOptions{})
	defer wh.Detach()
	if _, err := wh.OpenWriter(ctx2, WriterOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second writer: %v", err)
	}
	w.Close()
}

func TestDestroyedWhileWaiting(t *testing.T) {
	needIPC(t)
	k := randomKey(t)
	noStrays(t, k)
	h, err := Create(Config{Key: k, NBufs: 2, BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := Connect(k, AttachOptions{})
	r, err := other.OpenReader(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.ReadHeader(); done <- err }()
	time.Sleep(50 * time.Millisecond)
	h.Destroy()
	select {
	case err := <-done:
		if !errors.Is(err, ErrDestroyed) {
			t.Fatalf("ReadHeader on a destroyed ring: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader did not notice the ring was destroyed")
	}
	other.Detach()
}

// MaxFull is the largest of Stats' per-reader FULL counts, and allocates
// nothing.
func TestMaxFull(t *testing.T) {
	h := newHDU(t, Config{NBufs: 4, BufSize: 4096, NReaders: 2})
	ctx := testCtx(t)
	w, err := h.OpenWriter(ctx, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.WriteHeader(NewHeader(4096)); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < 3; want++ {
		full := 0
		for _, rs := range h.Data.Stats().Readers {
			full = max(full, rs.Full)
		}
		if got := h.Data.MaxFull(); got != want || full != want {
			t.Fatalf("MaxFull %d, Stats %d, want %d", got, full, want)
		}
		if _, err := w.OpenBlockContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.MarkFilled(4096); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(10, func() { h.Data.MaxFull() }); n != 0 {
		t.Errorf("MaxFull makes %v allocations", n)
	}
}
