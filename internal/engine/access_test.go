package engine

import (
	"encoding/binary"
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
	return newPair(t, pairOpts{bufSize: remoteSz, pmtu: wire.MTU256})
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
		t.Fatalf("%v of %d bytes at %#x key %#x: status %v, want %v", op, n, addr, rkey, wc.Status, want)
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
