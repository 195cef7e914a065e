package verbs

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/wire"
)

// Shared harness of the remote access tests (security_test.go,
// bounds_test.go): one RDMA operation from a to memory inside b.buf, with
// every byte outside the expected effect compared against a canary.

// The requester's buffer layout: source bytes at srcOff, the READ/atomic
// destination at dstOff.
const (
	srcOff   = 0
	dstOff   = 32 << 10
	remoteSz = 64 << 10 // buffer size of each side
)

// remoteOps are the operations that carry an R_Key, with the access bit
// each needs on the target MR or window.
var remoteOps = []struct {
	op   WROpcode
	need Access
}{
	{WRRDMAWrite, AccessRemoteWrite},
	{WRRDMAWriteWithImm, AccessRemoteWrite},
	{WRRDMARead, AccessRemoteRead},
	{WRAtomicFetchAndAdd, AccessRemoteAtomic},
	{WRAtomicCmpAndSwp, AccessRemoteAtomic},
	{WRAtomicWrite, AccessRemoteWrite},
	{WRFlush, AccessFlushGlobal},
}

// allRemote is every remote access bit an MR can carry.
const allRemote = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal | AccessMWBind

// isAtomic8 reports whether op works on one aligned 8-byte word.
func isAtomic8(op WROpcode) bool {
	return op == WRAtomicFetchAndAdd || op == WRAtomicCmpAndSwp || op == WRAtomicWrite
}

// remotePair is a fresh connected pair with remoteSz buffers.
func remotePair(t *testing.T) (*side, *side) {
	t.Helper()
	// Timeout 14 (67 ms a try): every case is answered at once, and a
	// retry budget of ~30 ms ran out once on a loaded CI machine.
	return newPair(t, pairOpts{bufSize: remoteSz, pmtu: wire.MTU256, timeout: 14})
}

// remoteWR builds op on n bytes (ignored for atomics) at addr/rkey.
func remoteWR(a *side, op WROpcode, addr uint64, rkey uint32, n int) SendWR {
	wr := SendWR{WRID: 9, Opcode: op, Flags: SendSignaled, RemoteAddr: addr, RKey: rkey, ImmData: 0x1234}
	switch {
	case op == WRRDMARead:
		wr.SGList = sge(a, dstOff, n)
	case op == WRAtomicFetchAndAdd:
		wr.SGList, wr.CompareAdd = sge(a, dstOff, 8), 0x0101010101010101
	case op == WRAtomicCmpAndSwp:
		// The compare value is filled in by checkRemote (the canary's word).
		wr.SGList, wr.Swap = sge(a, dstOff, 8), 0x1122334455667788
	case op == WRAtomicWrite:
		copy(wr.AtomicWrite[:], "ATOMWRIT")
	case op == WRFlush:
		wr.FlushType, wr.FlushLevel, wr.FlushLen = wire.FlushGlobalVisibility, wire.FlushSelRange, uint32(n)
	default:
		wr.SGList = sge(a, srcOff, n)
	}
	return wr
}

// checkRemote runs op on n bytes at addr/rkey, where addr is byte boff of
// b.buf, and checks the outcome exactly. want WCSuccess: the data lands at
// b.buf[boff:] (WRITE, atomics) or a.buf[dstOff:] (READ, atomics' original
// value) and nowhere else. Otherwise: the requester completes with want,
// both QPs end in ERR, and no byte of either buffer changes.
func checkRemote(t *testing.T, a, b *side, op WROpcode, addr uint64, rkey uint32, n, boff int, want WCStatus) {
	t.Helper()
	fill(b.buf, 0xA5)
	canaryB := append([]byte(nil), b.buf...)
	fill(a.buf, 0x3C)
	canaryA := append([]byte(nil), a.buf...)
	if isAtomic8(op) {
		n = 8
	}
	wr := remoteWR(a, op, addr, rkey, n)
	var word uint64 // the target word's value before the operation
	if isAtomic8(op) && boff >= 0 && boff+8 <= len(b.buf) {
		word = binary.NativeEndian.Uint64(b.buf[boff:])
	}
	if op == WRAtomicCmpAndSwp {
		wr.CompareAdd = word // the compare succeeds: a swap would show
	}
	postRecv(t, b, 1, 0, 16) // for WRITE_WITH_IMM (flushed on errors)
	post(t, a.qp, wr)
	wc := waitWC(t, a.scq, 1, 5*time.Second)[0]
	if wc.Status != want {
		t.Fatalf("%v of %d bytes at %#x key %#x: status %v, want %v\nrequester: %s\nresponder: %s", op, n, addr, rkey, wc.Status, want,
			nonzeroStats(a.dev), nonzeroStats(b.dev))
	}
	if want != WCSuccess {
		waitState(t, a.qp, QPStateErr)
		waitState(t, b.qp, QPStateErr)
		if rwc := waitWC(t, b.rcq, 1, 5*time.Second)[0]; rwc.Status != WCWRFlushErr {
			t.Fatalf("receive WQE: %v, want flushed", rwc.Status)
		}
		mustEqual(t, b.buf, canaryB)
		mustEqual(t, a.buf, canaryA)
		return
	}
	wantB := append([]byte(nil), canaryB...)
	wantA := append([]byte(nil), canaryA...)
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		copy(wantB[boff:boff+n], canaryA[srcOff:srcOff+n])
	case WRRDMARead:
		copy(wantA[dstOff:dstOff+n], canaryB[boff:boff+n])
	case WRAtomicFetchAndAdd:
		binary.NativeEndian.PutUint64(wantB[boff:], word+wr.CompareAdd)
		binary.NativeEndian.PutUint64(wantA[dstOff:], word)
	case WRAtomicCmpAndSwp:
		binary.NativeEndian.PutUint64(wantB[boff:], wr.Swap)
		binary.NativeEndian.PutUint64(wantA[dstOff:], word)
	case WRAtomicWrite:
		copy(wantB[boff:boff+8], wr.AtomicWrite[:])
	}
	if op == WRRDMAWriteWithImm {
		rwc := waitWC(t, b.rcq, 1, 5*time.Second)[0]
		if rwc.Status != WCSuccess || rwc.Opcode != WCRecvRDMAWithImm || rwc.ByteLen != uint32(n) || rwc.ImmData != 0x1234 {
			t.Fatalf("WRITE_WITH_IMM receive completion %+v", rwc)
		}
	}
	mustEqual(t, b.buf, wantB)
	mustEqual(t, a.buf, wantA)
}

// TestInvalidateChecks: LOCAL_INV invalidates only a valid MR or bound
// type 2 window of the QP's PD with the exact key; SEND_WITH_INV only a
// type 2 window bound to the receiving QP, never an ordinary MR (rxe). The
// "control" cases show the same invalidation succeeds.
func TestInvalidateChecks(t *testing.T) {
	type target struct {
		key   uint32
		valid func() bool // the MR is valid / the window bound
	}
	mrOf := func(t *testing.T, pd *PD, b *side) *MR {
		mr, err := pd.RegMR(b.buf[1024:2048], allRemote)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	mrTarget := func(mr *MR, key uint32) target { return target{key, mr.Valid} }
	win2 := func(t *testing.T, s *side, pd *PD, b *side) (*MW, uint32) {
		mr := mrOf(t, pd, b)
		mw, err := pd.AllocMW(MWType2)
		if err != nil {
			t.Fatal(err)
		}
		return mw, bind2(t, s, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1024, Access: AccessRemoteWrite})
	}
	cases := []struct {
		name              string
		setup             func(t *testing.T, a, b *side) target
		okLocal, okRemote bool
	}{
		{"MR control", func(t *testing.T, a, b *side) target { mr := mrOf(t, b.pd, b); return mrTarget(mr, mr.RKey()) }, true, false},
		{"MR wrong key8", func(t *testing.T, a, b *side) target {
			mr := mrOf(t, b.pd, b)
			return mrTarget(mr, IncRKey(mr.RKey()))
		}, false, false},
		{"MR of other PD", func(t *testing.T, a, b *side) target {
			pd, _ := b.dev.AllocPD()
			mr := mrOf(t, pd, b)
			return mrTarget(mr, mr.RKey())
		}, false, false},
		{"MR with a bound window", func(t *testing.T, a, b *side) target {
			mr := mrOf(t, b.pd, b)
			mw, _ := b.pd.AllocMW(MWType2)
			bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64, Access: AccessRemoteRead})
			return mrTarget(mr, mr.RKey())
		}, false, false},
		{"window control", func(t *testing.T, a, b *side) target {
			mw, key := win2(t, b, b.pd, b)
			return target{key, mw.Bound}
		}, true, true},
		{"window wrong key8", func(t *testing.T, a, b *side) target {
			mw, key := win2(t, b, b.pd, b)
			return target{IncRKey(key), mw.Bound}
		}, false, false},
		{"window of other PD", func(t *testing.T, a, b *side) target {
			pd, _ := b.dev.AllocPD()
			mw, key := win2(t, extraQP(t, a, b, pd), pd, b)
			return target{key, mw.Bound}
		}, false, false},
		{"window bound on another QP", func(t *testing.T, a, b *side) target {
			mw, key := win2(t, extraQP(t, a, b, b.pd), b.pd, b)
			return target{key, mw.Bound}
		}, true, false},
	}
	for _, remote := range []bool{true, false} {
		for _, c := range cases {
			name, ok := "LOCAL_INV/"+c.name, c.okLocal
			if remote {
				name, ok = "SEND_WITH_INV/"+c.name, c.okRemote
			}
			t.Run(name, func(t *testing.T) {
				a, b := remotePair(t)
				tg := c.setup(t, a, b)
				if !tg.valid() {
					t.Fatal("target not valid before the invalidation")
				}
				if remote {
					postRecv(t, b, 1, 0, 64)
					post(t, a.qp, SendWR{WRID: 1, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a, 0, 16), ImmData: tg.key})
					wantWC(t, a.scq, WCSuccess, WCSend)
					if !ok {
						wantWC(t, b.rcq, WCRemInvReqErr, WCRecv)
						waitState(t, b.qp, QPStateErr)
					} else if wc := wantWC(t, b.rcq, WCSuccess, WCRecv); wc.Flags&WCWithInv == 0 || wc.ImmData != tg.key {
						t.Fatalf("receive completion %+v", wc)
					}
				} else {
					post(t, b.qp, SendWR{WRID: 1, Opcode: WRLocalInv, Flags: SendSignaled, ImmData: tg.key})
					if ok {
						wantWC(t, b.scq, WCSuccess, WCLocalInv)
					} else {
						wantWC(t, b.scq, WCLocQPOpErr, WCLocalInv)
					}
				}
				if tg.valid() != !ok {
					t.Fatalf("target valid %v after the invalidation, want %v", tg.valid(), !ok)
				}
			})
		}
	}
}

// TestMWBindChecks: a type 2 bind needs a valid MR of the QP's PD (the
// control binds the same range).
func TestMWBindChecks(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, b *side) *MR
		ok    bool
	}{
		{"control", func(t *testing.T, b *side) *MR { mr, _ := b.pd.RegMR(b.buf[1024:2048], allRemote); return mr }, true},
		{"MR of other PD", func(t *testing.T, b *side) *MR {
			pd, _ := b.dev.AllocPD()
			mr, _ := pd.RegMR(b.buf[1024:2048], allRemote)
			return mr
		}, false},
		{"MR invalidated", func(t *testing.T, b *side) *MR {
			mr, _ := b.pd.RegMR(b.buf[1024:2048], allRemote)
			mr.Invalidate()
			return mr
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := remotePair(t)
			mr := c.setup(t, b)
			mw, _ := b.pd.AllocMW(MWType2)
			key := IncRKey(mw.RKey())
			post(t, b.qp, SendWR{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, RKey: key,
				BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1024, Access: AccessRemoteRead}})
			if !c.ok {
				wantWC(t, b.scq, WCMWBindErr, WCBindMW)
				if mw.Bound() {
					t.Fatal("window bound after a failed bind")
				}
				return
			}
			wantWC(t, b.scq, WCSuccess, WCBindMW)
			checkRemote(t, a, b, WRRDMARead, mr.Addr()+64, key, 64, 1024+64, WCSuccess)
		})
	}
}

// TestMultiSGE: SEND, WRITE and READ with several SGEs of odd lengths in
// different MRs gather and scatter each SGE exactly (a receive with three
// SGEs too), touching no byte outside them.
func TestMultiSGE(t *testing.T) {
	a, b := remotePair(t)
	mrA2, err := a.pd.RegMR(a.buf[40000:41000], AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	mrB2, err := b.pd.RegMR(b.buf[50000:51000], AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// a's SGEs: 7 bytes at 100, 1 byte at the end of mrA2, 300 bytes at 5000 (308 in all).
	src := []SGE{{Addr: a.mr.Addr() + 100, Length: 7, LKey: a.mr.LKey()},
		{Addr: mrA2.Addr() + 999, Length: 1, LKey: mrA2.LKey()},
		{Addr: a.mr.Addr() + 5000, Length: 300, LKey: a.mr.LKey()}}
	data := func(buf []byte) []byte {
		return append(append(append([]byte(nil), buf[100:107]...), buf[40999]), buf[5000:5300]...)
	}
	// b's receive SGEs: 5 at 200, 200 at the end of mrB2, 103 at 9000.
	dst := []SGE{{Addr: b.mr.Addr() + 200, Length: 5, LKey: b.mr.LKey()},
		{Addr: mrB2.Addr() + 800, Length: 200, LKey: mrB2.LKey()},
		{Addr: b.mr.Addr() + 9000, Length: 103, LKey: b.mr.LKey()}}
	place := func(buf, d []byte) {
		copy(buf[200:205], d[:5])
		copy(buf[50800:51000], d[5:205])
		copy(buf[9000:9103], d[205:308])
	}
	fill(a.buf, 0x61)
	fill(b.buf, 0x00)
	canaryA := append([]byte(nil), a.buf...)
	wantB := append([]byte(nil), b.buf...)
	if _, err := b.qp.PostRecv([]RecvWR{{WRID: 5, SGList: dst}}); err != nil {
		t.Fatal(err)
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: src})
	wantWC(t, a.scq, WCSuccess, WCSend)
	if wc := wantWC(t, b.rcq, WCSuccess, WCRecv); wc.ByteLen != 308 {
		t.Fatalf("received %d bytes, want 308", wc.ByteLen)
	}
	place(wantB, data(canaryA))
	mustEqual(t, b.buf, wantB)
	// WRITE the same SGEs to b at 20000.
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: src, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	copy(wantB[20000:], data(canaryA))
	mustEqual(t, b.buf, wantB)
	// READ b's 308 bytes at 30000 into a's SGEs.
	fill(b.buf[30000:30308], 0x99)
	post(t, a.qp, SendWR{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGList: src, RemoteAddr: b.mr.Addr() + 30000, RKey: b.mr.RKey()})
	wantWC(t, a.scq, WCSuccess, WCRDMARead)
	wantA := canaryA
	r := b.buf[30000:30308]
	copy(wantA[100:107], r[:7])
	wantA[40999] = r[7]
	copy(wantA[5000:5300], r[8:])
	mustEqual(t, a.buf, wantA)
}

// nonzeroStats lists d's non-zero counters, for a failure's message.
func nonzeroStats(d *Device) string {
	var b strings.Builder
	d.Stats().Each(func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(&b, " %s=%d", name, v)
		}
	})
	return b.String()
}
