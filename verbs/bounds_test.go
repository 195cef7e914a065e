package verbs

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// Boundary tables: operations at the exact ends of MRs and windows, on the
// remote (responder) and the local (SGE) side. The target region is 1023
// bytes long at an 8-aligned start, so its end is 7 mod 8 and the aligned
// word at end-7 sticks out by exactly one byte.

const (
	bndBase = 1024 // the region's first byte in b.buf (or a.buf)
	bndLen  = 1023
)

// boundCase is one remote operation relative to a region [start, start+L):
// at start+at (at < 0 counts from the end: end+at) on n bytes.
type boundCase struct {
	name  string
	atoms bool  // for the 8-byte atomics, else for WRITE/READ/FLUSH
	at    int64 // offset from the start (>= 0) or from the end (< 0, or fromEnd)
	abs   uint64
	n     int
	ok    bool
}

// fromEnd marks at as relative to the region's end; absAddr marks abs as
// the absolute remote address.
const (
	fromEnd = 1 << 40
	absAddr = 1 << 41
)

var boundCases = []boundCase{
	{name: "whole region", at: 0, n: bndLen, ok: true},
	{name: "one longer than the region", at: 0, n: bndLen + 1},
	{name: "last byte in (multi-packet)", at: fromEnd - 300, n: 300, ok: true},
	{name: "first byte out (multi-packet)", at: fromEnd - 299, n: 300},
	{name: "last single byte", at: fromEnd - 1, n: 1, ok: true},
	{name: "single byte at the end", at: fromEnd, n: 1},
	{name: "zero length at the end", at: fromEnd, n: 0, ok: true},
	{name: "one byte before the start", at: -1, n: 64},
	{name: "VA+len wraps 2^64", at: absAddr, abs: math.MaxUint64 - 31, n: 64},
	{name: "VA at 2^64-1", at: absAddr, abs: math.MaxUint64, n: 1},

	{name: "first word", atoms: true, at: 0, ok: true},
	{name: "last word in", atoms: true, at: fromEnd - 15, ok: true},
	{name: "word one byte out", atoms: true, at: fromEnd - 7},
	{name: "word past the end", atoms: true, at: fromEnd + 1},
	{name: "word before the start", atoms: true, at: -8},
	{name: "word wraps 2^64", atoms: true, at: absAddr, abs: math.MaxUint64 - 7},
}

// addr returns the case's remote address for a region starting at start
// (byte boff of b.buf) and its byte offset in b.buf (-1: outside).
func (c boundCase) addr(start uint64, l int) (uint64, int) {
	switch {
	case c.at == absAddr:
		return c.abs, -1
	case c.at >= fromEnd/2:
		d := c.at - fromEnd
		return start + uint64(int64(l)+d), bndBase + l + int(d)
	default:
		return start + uint64(c.at), bndBase + int(c.at)
	}
}

// runBounds runs every boundary case for every remote operation against
// the region setup registers (its start address, key; bndLen bytes at
// b.buf[bndBase:]).
func runBounds(t *testing.T, flush bool, setup func(t *testing.T, a, b *side) (start uint64, key uint32)) {
	for _, op := range remoteOps {
		if op.op == WRFlush && !flush {
			continue
		}
		for _, c := range boundCases {
			if c.atoms != isAtomic8(op.op) {
				continue
			}
			t.Run(op.op.String()+"/"+c.name, func(t *testing.T) {
				a, b := remotePair(t)
				start, key := setup(t, a, b)
				addr, boff := c.addr(start, bndLen)
				want := WCRemAccessErr
				if c.ok {
					want = WCSuccess
				}
				checkRemote(t, a, b, op.op, addr, key, c.n, boff, want)
			})
		}
	}
}

// TestMRBoundsRemote: WRITE, READ, atomics and FLUSH at the exact ends of
// an MR, address-based and zero-based.
func TestMRBoundsRemote(t *testing.T) {
	for _, zb := range []Access{0, AccessZeroBased} {
		t.Run(fmt.Sprintf("zero-based=%v", zb != 0), func(t *testing.T) {
			runBounds(t, true, func(t *testing.T, a, b *side) (uint64, uint32) {
				mr, err := b.pd.RegMR(b.buf[bndBase:bndBase+bndLen], allRemote|zb)
				if err != nil {
					t.Fatal(err)
				}
				if mr.Addr()%8 != 0 {
					t.Fatalf("MR start %#x not 8-aligned", mr.Addr())
				}
				return mr.Addr(), mr.RKey()
			})
		})
	}
}

// TestMWBoundsRemote: the same at the ends of a window that lies strictly
// inside its MR, so only the window's range check can refuse.
func TestMWBoundsRemote(t *testing.T) {
	const access = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	reg := func(t *testing.T, b *side) *MR {
		mr, err := b.pd.RegMR(b.buf[bndBase-512:bndBase+bndLen+512], allRemote)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	t.Run("type 1", func(t *testing.T) {
		runBounds(t, false, func(t *testing.T, a, b *side) (uint64, uint32) {
			mr := reg(t, b)
			mw, _ := b.pd.AllocMW(MWType1)
			key, err := b.qp.BindMW(mw, MWBind{Flags: SendSignaled, BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr() + 512, Length: bndLen, Access: access}})
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, b.scq, WCSuccess, WCBindMW)
			return mr.Addr() + 512, key
		})
	})
	t.Run("type 2 zero-based", func(t *testing.T) {
		runBounds(t, false, func(t *testing.T, a, b *side) (uint64, uint32) {
			mr := reg(t, b)
			mw, _ := b.pd.AllocMW(MWType2)
			return 0, bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr() + 512, Length: bndLen, Access: access | AccessZeroBased})
		})
	})
}

// TestMWBindBounds: a bind must lie inside its MR; the last byte may be
// the MR's last byte.
func TestMWBindBounds(t *testing.T) {
	cases := []struct {
		name     string
		off, len uint64 // relative to the MR's start
		abs      bool   // off is an absolute address
		ok       bool
	}{
		{"whole MR", 0, bndLen, false, true},
		{"ends at the MR's end", bndLen - 100, 100, false, true},
		{"one byte past the end", bndLen - 99, 100, false, false},
		{"one longer than the MR", 0, bndLen + 1, false, false},
		{"one byte before the start", math.MaxUint64, 100, false, false}, // start-1
		{"address+length wraps 2^64", math.MaxUint64 - 7, 16, true, false},
	}
	for _, typ := range []MWType{MWType1, MWType2} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/%s", typ, c.name), func(t *testing.T) {
				a, b := remotePair(t)
				mr, err := b.pd.RegMR(b.buf[bndBase:bndBase+bndLen], allRemote)
				if err != nil {
					t.Fatal(err)
				}
				addr := mr.Addr() + c.off
				if c.abs {
					addr = c.off
				}
				mw, _ := b.pd.AllocMW(typ)
				bi := MWBindInfo{MR: mr, Addr: addr, Length: c.len, Access: AccessRemoteWrite | AccessRemoteRead}
				var key uint32
				if typ == MWType1 {
					if key, err = b.qp.BindMW(mw, MWBind{Flags: SendSignaled, BindInfo: bi}); err != nil {
						t.Fatal(err)
					}
				} else {
					key = IncRKey(mw.RKey())
					post(t, b.qp, SendWR{Opcode: WRBindMW, Flags: SendSignaled, MW: mw, RKey: key, BindInfo: bi})
				}
				if !c.ok {
					wantWC(t, b.scq, WCMWBindErr, WCBindMW)
					if mw.Bound() {
						t.Fatal("window bound after a failed bind")
					}
					return
				}
				wantWC(t, b.scq, WCSuccess, WCBindMW)
				// The window's last byte is readable, the byte after it is not.
				end := addr + c.len
				checkRemote(t, a, b, WRRDMARead, end-1, key, 1, bndBase+int(end-1-mr.Addr()), WCSuccess)
				checkRemote(t, a, b, WRRDMARead, end, key, 1, -1, WCRemAccessErr)
			})
		}
	}
}

// localMR registers a.buf[bndBase:bndBase+bndLen] with access (plus
// LOCAL_WRITE) on s's PD.
func localMR(t *testing.T, s *side, access Access) *MR {
	t.Helper()
	mr, err := s.pd.RegMR(s.buf[bndBase:bndBase+bndLen], access|AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// TestMRBoundsLocal: SGEs at the exact end of the local MR, for the SEND
// and WRITE source (gather), the READ and atomic destination and the
// receive buffer (scatter): the last byte in is accepted and the data
// moves exactly; one byte out, and an address wrapping 2^64, are refused
// at post time with no traffic.
func TestMRBoundsLocal(t *testing.T) {
	type sgeCase struct {
		name string
		off  uint64 // from the MR's start; math.MaxUint64-k: absolute
		n    uint32
		ok   bool
	}
	cases := []sgeCase{
		{"last bytes in", bndLen - 64, 64, true},
		{"first byte out", bndLen - 63, 64, false},
		{"single byte at the end", bndLen, 1, false},
		{"zero length at the end", bndLen, 0, true},
		{"one byte before the start", math.MaxUint64, 8, false},
		{"one longer than the MR", 0, bndLen + 1, false},
	}
	sgeOf := func(mr *MR, c sgeCase) SGE {
		return SGE{Addr: mr.Addr() + c.off, Length: c.n, LKey: mr.LKey()}
	}
	ops := []struct {
		name string
		run  func(t *testing.T, a, b *side, c sgeCase)
	}{
		{"SEND source", func(t *testing.T, a, b *side, c sgeCase) {
			mr := localMR(t, a, 0)
			fill(a.buf, 0x17)
			postRecv(t, b, 1, 4096, 2048)
			_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: []SGE{sgeOf(mr, c)}}})
			if !c.ok {
				if err != errBadLKey {
					t.Fatalf("PostSend: %v, want %v", err, errBadLKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, a.scq, WCSuccess, WCSend)
			if wc := wantWC(t, b.rcq, WCSuccess, WCRecv); wc.ByteLen != c.n {
				t.Fatalf("received %d bytes, want %d", wc.ByteLen, c.n)
			}
			mustEqual(t, b.buf[4096:4096+c.n], a.buf[bndBase+int(c.off):][:c.n])
		}},
		{"inline SEND source", func(t *testing.T, a, b *side, c sgeCase) {
			if c.n > MaxInline {
				t.Skip("longer than MaxInline")
			}
			mr := localMR(t, a, 0)
			fill(a.buf, 0x17)
			postRecv(t, b, 1, 4096, 2048)
			_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled | SendInline, SGList: []SGE{sgeOf(mr, c)}}})
			if !c.ok {
				if err != errBadLKey {
					t.Fatalf("PostSend: %v, want %v", err, errBadLKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, a.scq, WCSuccess, WCSend)
			wantWC(t, b.rcq, WCSuccess, WCRecv)
			mustEqual(t, b.buf[4096:4096+c.n], a.buf[bndBase+int(c.off):][:c.n])
		}},
		{"WRITE source", func(t *testing.T, a, b *side, c sgeCase) {
			mr := localMR(t, a, 0)
			fill(a.buf, 0x29)
			_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: []SGE{sgeOf(mr, c)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}})
			if !c.ok {
				if err != errBadLKey {
					t.Fatalf("PostSend: %v, want %v", err, errBadLKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
			mustEqual(t, b.buf[4096:4096+c.n], a.buf[bndBase+int(c.off):][:c.n])
		}},
		{"READ destination", func(t *testing.T, a, b *side, c sgeCase) {
			mr := localMR(t, a, 0)
			fill(b.buf, 0x3B)
			fill(a.buf, 0x00)
			canary := append([]byte(nil), a.buf...)
			_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: []SGE{sgeOf(mr, c)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}})
			if !c.ok {
				if err != errBadLKey {
					t.Fatalf("PostSend: %v, want %v", err, errBadLKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, a.scq, WCSuccess, WCRDMARead)
			want := canary
			copy(want[bndBase+int(c.off):][:c.n], b.buf[4096:])
			mustEqual(t, a.buf, want)
		}},
		{"receive buffer", func(t *testing.T, a, b *side, c sgeCase) {
			mr := localMR(t, b, 0)
			fill(a.buf, 0x41)
			fill(b.buf, 0x00)
			canary := append([]byte(nil), b.buf...)
			_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGList: []SGE{sgeOf(mr, c)}}})
			if !c.ok {
				if err != errBadLKey {
					t.Fatalf("PostRecv: %v, want %v", err, errBadLKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, int(c.n))})
			wantWC(t, a.scq, WCSuccess, WCSend)
			wantWC(t, b.rcq, WCSuccess, WCRecv)
			want := canary
			copy(want[bndBase+int(c.off):][:c.n], a.buf)
			mustEqual(t, b.buf, want)
		}},
	}
	for _, op := range ops {
		for _, c := range cases {
			t.Run(op.name+"/"+c.name, func(t *testing.T) {
				a, b := remotePair(t)
				op.run(t, a, b, c)
			})
		}
	}
	// The atomic destination: 8 bytes, ending at the MR's end or one past.
	for _, c := range []sgeCase{{"last bytes in", bndLen - 8, 8, true}, {"first byte out", bndLen - 7, 8, false}} {
		t.Run("FETCH_ADD destination/"+c.name, func(t *testing.T) {
			a, b := remotePair(t)
			mr := localMR(t, a, 0)
			_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGList: []SGE{sgeOf(mr, c)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 1}})
			if !c.ok {
				if err != errBadLKey {
					t.Fatalf("PostSend: %v, want %v", err, errBadLKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, a.scq, WCSuccess, WCFetchAdd)
			old := binary.NativeEndian.Uint64(a.buf[bndBase+bndLen-8:])
			if now := binary.NativeEndian.Uint64(b.buf[64:]); now != old+1 {
				t.Fatalf("fetched %#x, memory now %#x: want memory = fetched+1", old, now)
			}
		})
	}
}

// TestRecvScatterBounds: the receive buffer is checked again when the SEND
// lands (the MR may have shrunk since the post): a receive SGE ending at the
// old end now sticks out by one byte, so the SEND fails with NAK 0x63 and
// nothing is written; a multi-SGE receive fills each SGE exactly up to its end.
func TestRecvScatterBounds(t *testing.T) {
	t.Run("MR shrunk after the post", func(t *testing.T) {
		a, b := remotePair(t)
		mr := localMR(t, b, 0)
		fill(b.buf, 0x00)
		canary := append([]byte(nil), b.buf...)
		if _, err := b.qp.PostRecv([]RecvWR{{WRID: 4, SGList: []SGE{{Addr: mr.Addr() + bndLen - 64, Length: 64, LKey: mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
		if err := mr.Rereg(ReregChangeTranslation, nil, b.buf[bndBase:bndBase+bndLen-1], 0); err != nil {
			t.Fatal(err)
		}
		if mr.Addr() != bufAddr(b.buf[bndBase:]) {
			t.Fatalf("rereg moved the MR to %#x", mr.Addr())
		}
		fill(a.buf, 0x41)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 64)})
		wantWC(t, a.scq, WCRemOpErr, WCSend)
		if wc := oneWC(t, b.rcq); wc.Status != WCLocQPOpErr || wc.WRID != 4 {
			t.Fatalf("receive completion %+v", wc)
		}
		mustEqual(t, b.buf, canary)
	})
	t.Run("two SGEs each to its MR's end", func(t *testing.T) {
		a, b := remotePair(t)
		mr1 := localMR(t, b, 0)
		mr2, err := b.pd.RegMR(b.buf[8192:8192+100], AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		fill(b.buf, 0x00)
		canary := append([]byte(nil), b.buf...)
		sges := []SGE{{Addr: mr1.Addr() + bndLen - 10, Length: 10, LKey: mr1.LKey()}, {Addr: mr2.Addr() + 50, Length: 50, LKey: mr2.LKey()}}
		if _, err := b.qp.PostRecv([]RecvWR{{WRID: 4, SGList: sges}}); err != nil {
			t.Fatal(err)
		}
		fill(a.buf, 0x41)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 60)})
		wantWC(t, a.scq, WCSuccess, WCSend)
		if wc := wantWC(t, b.rcq, WCSuccess, WCRecv); wc.ByteLen != 60 {
			t.Fatalf("received %d bytes", wc.ByteLen)
		}
		want := canary
		copy(want[bndBase+bndLen-10:bndBase+bndLen], a.buf[:10])
		copy(want[8192+50:8192+100], a.buf[10:60])
		mustEqual(t, b.buf, want)
	})
}

// TestLateSGECheck: with Config.LateSGECheck (the C library's rxe
// semantics) a send or receive whose SGE leaves its MR is accepted at post
// time and completes with LOC_PROT_ERR, the QP going to ERR; zero-copy and
// copied sends alike.
func TestLateSGECheck(t *testing.T) {
	for _, noZC := range []bool{false, true} {
		t.Run(map[bool]string{false: "zero-copy", true: "copy"}[noZC], func(t *testing.T) {
			a, b := newPair(t, pairOpts{bufSize: bndBase + bndLen + 4096, lateSGE: true, noZC: noZC})
			mr := localMR(t, a, 0)
			postRecv(t, b, 1, 4096, 2048)
			bad := SGE{Addr: mr.Addr() + bndLen - 63, Length: 64, LKey: mr.LKey()}
			if _, err := a.qp.PostSend([]SendWR{{WRID: 7, Opcode: WRSend, Flags: SendSignaled, SGList: []SGE{bad}}}); err != nil {
				t.Fatalf("PostSend: %v, want it accepted", err)
			}
			if wc := wantWC(t, a.scq, WCLocProtErr, WCSend); wc.WRID != 7 {
				t.Fatalf("completion of WR %d, want 7", wc.WRID)
			}
			if st := a.qp.State(); st != QPStateErr {
				t.Fatalf("QP state %v, want ERR", st)
			}
			// A receive with a bad SGE is accepted too.
			rmr := localMR(t, b, 0)
			if _, err := b.qp.PostRecv([]RecvWR{{WRID: 8, SGList: []SGE{{Addr: rmr.Addr() + bndLen, Length: 1, LKey: rmr.LKey()}}}}); err != nil {
				t.Fatalf("PostRecv: %v, want it accepted", err)
			}
		})
	}
}
