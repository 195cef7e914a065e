package pipeline

import (
	"bytes"
	"context"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/dada"
)

func TestPacketFormat(t *testing.T) {
	cases := []struct {
		f    PacketFormat
		want []byte
	}{
		{PacketFormat{}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{PacketFormat{SeqWidth: 8, LittleEndian: true}, []byte{8, 7, 6, 5, 4, 3, 2, 1}},
		{PacketFormat{HeaderLen: 16, SeqOffset: 4, SeqWidth: 4}, []byte{0, 0, 0, 0, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0}},
		{PacketFormat{HeaderLen: 6, SeqOffset: 2, SeqWidth: 4, LittleEndian: true}, []byte{0, 0, 8, 7, 6, 5}},
	}
	const seq = 0x0102030405060708
	for _, c := range cases {
		f, err := c.f.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		h := make([]byte, f.HeaderLen)
		f.PutSeq(h, seq)
		if diff := cmp.Diff(c.want, h); diff != "" {
			t.Errorf("%+v: header (-want +got):\n%s", c.f, diff)
		}
		want := uint64(seq)
		if f.SeqWidth == 4 {
			want &= 0xffffffff
		}
		if got := f.Seq(h); got != want {
			t.Errorf("%+v: Seq %#x, want %#x", c.f, got, want)
		}
	}
	for _, bad := range []PacketFormat{{SeqWidth: 2}, {HeaderLen: 4, SeqWidth: 8}, {SeqOffset: -1}, {PayloadSize: 70000}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestPattern(t *testing.T) {
	// against the definition, byte by byte, at every alignment and length
	for pos := uint64(0); pos < 9; pos++ {
		for n := 0; n < 80; n++ {
			b := make([]byte, n)
			FillPattern(b, pos+1<<33)
			for i := range b {
				p := pos + 1<<33 + uint64(i)
				if want := byte((p &^ 7) >> (8 * (p % 8))); b[i] != want {
					t.Fatalf("pos %d len %d: byte %d is %#x, want %#x", pos, n, i, b[i], want)
				}
			}
		}
	}
	b := make([]byte, 100)
	for _, pos := range []uint64{0, 3, 8, 1 << 40} {
		FillPattern(b, pos)
		if i := CheckPattern(b, pos); i != -1 {
			t.Fatalf("pos %d: mismatch at %d", pos, i)
		}
		// any sub-slice checks at its own position
		if i := CheckPattern(b[13:57], pos+13); i != -1 {
			t.Fatalf("pos %d: sub-slice mismatch at %d", pos, i)
		}
		b[42] ^= 1
		if i := CheckPattern(b, pos); i != 42 {
			t.Fatalf("pos %d: corruption found at %d, want 42", pos, i)
		}
	}
}

// udpPair returns a receiving socket and a sender connected to it.
func udpPair(t *testing.T) (rx, tx *net.UDPConn) {
	t.Helper()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	rx.SetReadBuffer(8 << 20)
	tx, err = net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close(); tx.Close() })
	return rx, tx
}

// readTransfer reads one transfer from the ring at key with the dada reader.
func readTransfer(ctx context.Context, key dada.Key, slow time.Duration) (*dada.Header, []byte, error) {
	h, err := dada.Connect(key, dada.AttachOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer h.Detach()
	r, err := h.OpenReader(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	hdr, err := r.ReadHeader()
	if err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	for {
		b, err := r.NextBlock()
		if err == io.EOF {
			return hdr, out.Bytes(), nil
		}
		if err != nil {
			return hdr, out.Bytes(), err
		}
		out.Write(b.Data)
		time.Sleep(slow)
		if err := r.MarkCleared(); err != nil {
			return hdr, out.Bytes(), err
		}
	}
}

func TestUDPTransfer(t *testing.T) {
	cases := []struct {
		name          string
		loss, reorder float64
		window        int
		seqWidth      int
		noOffload     bool
	}{
		{"clean", 0, 0, 2, 8, false},
		{"clean without GSO/GRO", 0, 0, 2, 8, true},
		{"loss", 0.03, 0, 2, 8, false},
		{"loss without GSO/GRO", 0.03, 0, 2, 8, true},
		{"reorder", 0, 0.2, 2, 4, false},
		{"reorder without GSO/GRO", 0, 0.2, 2, 4, true},
		{"loss and reorder, window 1", 0.02, 0.1, 1, 8, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const payload, packets = 1024, 1000
			hdu := newRing(t, 4, 65536, dada.LayoutContiguousTry)
			rx, tx := udpPair(t)
			ctx := testCtx(t)
			f := PacketFormat{HeaderLen: 16, SeqOffset: 8, SeqWidth: c.seqWidth, PayloadSize: payload, SeqStep: 2}
			type result struct {
				hdr  *dada.Header
				data []byte
				err  error
			}
			rd := make(chan result, 1)
			go func() {
				h, d, err := readTransfer(ctx, hdu.Key(), 0)
				rd <- result{h, d, err}
			}()
			tmpl := dada.NewHeader(4096)
			tmpl.Set("SOURCE", "J0437-4715")
			var rst, sst Stats
			sum := make(chan Summary, 1)
			errc := make(chan error, 1)
			go func() {
				s, err := RecvUDP(ctx, rx, hdu, UDPRecvConfig{Format: f, Window: c.window, Packets: packets,
					IdleTimeout: 500 * time.Millisecond, Header: tmpl, Batch: 16, Stats: &rst, NoGRO: c.noOffload})
				sum <- s
				errc <- err
			}()
			const start = 1000
			if err := SendUDP(ctx, tx, UDPSendConfig{Format: f, Packets: packets + 50, StartSeq: start, Rate: 20e6,
				Loss: c.loss, Reorder: c.reorder, Seed: 7, Stats: &sst, Batch: 8, NoGSO: c.noOffload}); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			s := <-sum
			r := <-rd
			if r.err != nil {
				t.Fatal(r.err)
			}
			if src, _ := r.hdr.Get("SOURCE"); src != "J0437-4715" {
				t.Errorf("header lost SOURCE:\n%s", r.hdr)
			}
			ps, _ := r.hdr.GetUint("PKT_START")
			if ps != start && c.loss+c.reorder == 0 || ps != s.StartSeq {
				t.Errorf("PKT_START %d, want %d (summary %d)", ps, start, s.StartSeq)
			}
			if len(r.data) != packets*payload {
				t.Fatalf("read %d bytes, want %d packets from seq %d", len(r.data), packets, ps)
			}
			zero := 0
			for i := 0; i < len(r.data)/payload; i++ {
				p := r.data[i*payload : (i+1)*payload]
				if off := CheckPattern(p, (ps/2+uint64(i))*payload); off >= 0 {
					if !bytes.Equal(p, make([]byte, payload)) {
						t.Fatalf("packet %d: wrong byte at %d", i, off)
					}
					zero++
				}
			}
			t.Logf("summary %+v; stats lost=%d late=%d dup=%d reordered=%d bad=%d; sender skipped %d",
				s, rst.Lost.Load(), rst.Late.Load(), rst.Dup.Load(), rst.Reordered.Load(), rst.Bad.Load(), sst.Skipped.Load())
			if uint64(zero) != s.Lost || uint64(zero) != rst.Lost.Load() {
				t.Errorf("%d zero-filled packets, summary says %d lost, stats %d", zero, s.Lost, rst.Lost.Load())
			}
			if c.loss > 0 && zero == 0 {
				t.Error("loss injected but nothing zero-filled")
			}
			if c.reorder > 0 && rst.Reordered.Load() == 0 {
				t.Error("reordering injected but none seen")
			}
			if c.reorder == 0 && rst.Reordered.Load() != 0 {
				t.Errorf("%d packets counted reordered, none were", rst.Reordered.Load())
			}
			if s.Offload == c.noOffload && runtime.GOOS == "linux" {
				t.Errorf("GRO used: %v", s.Offload)
			}
			if rst.Dup.Load()+rst.Bad.Load() != 0 {
				t.Errorf("dup %d bad %d", rst.Dup.Load(), rst.Bad.Load())
			}
		})
	}
}

// FuzzPacketFormat: any layout is either refused or reads back what it
// writes, without touching bytes outside the sequence number.
func FuzzPacketFormat(f *testing.F) {
	f.Add(8, 8192, 0, 8, false, uint64(1), uint64(0x0102030405060708))
	f.Add(16, 1024, 4, 4, true, uint64(2), uint64(77))
	f.Add(0, 0, 0, 0, false, uint64(0), uint64(1))
	f.Fuzz(func(t *testing.T, hlen, payload, off, width int, le bool, step, seq uint64) {
		pf, err := PacketFormat{HeaderLen: hlen, PayloadSize: payload, SeqOffset: off, SeqWidth: width, LittleEndian: le, SeqStep: step}.withDefaults()
		if err != nil {
			return
		}
		h := bytes.Repeat([]byte{0xa5}, pf.HeaderLen)
		pf.PutSeq(h, seq)
		want := seq
		if pf.SeqWidth == 4 {
			want &= 0xffffffff
		}
		if got := pf.Seq(h); got != want {
			t.Fatalf("%+v: Seq %#x after PutSeq %#x", pf, got, seq)
		}
		for i, b := range h {
			if (i < pf.SeqOffset || i >= pf.SeqOffset+pf.SeqWidth) && b != 0xa5 {
				t.Fatalf("%+v: PutSeq wrote byte %d", pf, i)
			}
		}
	})
}
