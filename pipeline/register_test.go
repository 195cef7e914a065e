package pipeline

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/verbs"
)

func TestRegisterRing(t *testing.T) {
	cases := []struct {
		name     string
		bufsz    uint64
		layout   dada.Layout
		mode     Mode
		want     Mode
		reason   string
		wantErr  error
		nbufs    int
		writeBlk int
	}{
		{"contiguous auto", 65536, dada.LayoutContiguousTry, Auto, Single, "contiguous", nil, 4, 2},
		{"contiguous forced per block", 65536, dada.LayoutContiguousTry, PerBlock, PerBlock, "requested", nil, 4, 3},
		{"kernel layout auto", 65536, dada.LayoutKernel, Auto, PerBlock, "kernel", nil, 4, 1},
		{"odd size auto", 5000, dada.LayoutContiguousTry, Auto, PerBlock, "page size", nil, 3, 2},
		{"odd size single", 5000, dada.LayoutContiguousTry, Single, 0, "", ErrNotContiguous, 3, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newRing(t, c.nbufs, c.bufsz, c.layout)
			a, b := rcPair(t)
			m, err := RegisterRing(b.pd, h.Data, RegisterOptions{Mode: c.mode})
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("RegisterRing: %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := m.Close(); err != nil {
					t.Error(err)
				}
				if n := b.dev.Stats().MRs.Load(); n != 0 {
					t.Errorf("%d MRs left after Close", n)
				}
			}()
			if m.Mode != c.want || !strings.Contains(m.Reason, c.reason) {
				t.Fatalf("mode %v (%s), want %v (%q)", m.Mode, m.Reason, c.want, c.reason)
			}
			if wantMRs := map[Mode]int{Single: 1, PerBlock: c.nbufs}[c.want]; len(m.MRs()) != wantMRs {
				t.Fatalf("%d MRs, want %d", len(m.MRs()), wantMRs)
			}
			t.Log(m)
			// Lookup of a byte inside a block agrees with Block.
			blk := h.Data.Block(c.writeBlk)
			br, addr, ok := m.Lookup(blk[100:])
			if !ok || br.RKey != m.Block(c.writeBlk).RKey || addr != m.Block(c.writeBlk).Addr+100 {
				t.Fatalf("Lookup: %+v %#x %v; Block: %+v", br, addr, ok, m.Block(c.writeBlk))
			}
			if _, _, ok := m.Lookup(make([]byte, 8)); ok {
				t.Fatal("Lookup found a heap buffer in the ring")
			}
			// An RDMA WRITE from a's buffer to (block, offset 100) lands there and nowhere else.
			src := bytes.Repeat([]byte("softroce"), 64)
			smr, err := a.pd.RegMR(src, verbs.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			defer smr.Deregister()
			if _, err := a.qps[0].PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList:     []verbs.SGE{{Addr: smr.Addr(), Length: uint32(len(src)), LKey: smr.LKey()}},
				RemoteAddr: addr, RKey: br.RKey}}); err != nil {
				t.Fatal(err)
			}
			wcs := make([]verbs.WC, 1)
			if _, err := a.poll(testCtx(t), wcs); err != nil || wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("completion %+v, %v", wcs[0], err)
			}
			for i, info := range h.Data.Blocks() {
				want := make([]byte, len(info.Data))
				if i == c.writeBlk {
					copy(want[100:], src)
				}
				if !bytes.Equal(info.Data, want) {
					t.Fatalf("block %d has unexpected contents", i)
				}
			}
			// Writing past the end of a per-block MR is refused.
			if m.Mode == PerBlock {
				last := m.Block(c.writeBlk)
				a.qps[0].PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGList:     []verbs.SGE{{Addr: smr.Addr(), Length: 16, LKey: smr.LKey()}},
					RemoteAddr: last.Addr + uint64(last.Len) - 8, RKey: last.RKey}})
				if _, err := a.poll(testCtx(t), wcs); err != nil || wcs[0].Status != verbs.WCRemAccessErr {
					t.Fatalf("write across a block end: %+v, %v", wcs[0], err)
				}
			}
		})
	}
}
