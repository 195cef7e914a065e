package verbs

import (
	"testing"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// BenchmarkRxWriteMiddle is the responder's receive path alone, per packet:
// a batch of 64 RC WRITE MIDDLE packets of 4 KiB, as a UDP link hands them
// over (no IP header: the ICRC is checked as the payload is copied into the
// MR), through handleBatch, with no system call. Each round rewinds the
// responder to the start of the batch.
func BenchmarkRxWriteMiddle(b *testing.B) {
	a, r := newPair(b, pairOpts{pmtu: wire.MTU4096})
	const seg, n = 4096, 64
	src, dst := a.dev.LocalAddr(), r.dev.LocalAddr()
	// A FIRST sets up the WRITE the MIDDLE packets continue.
	first := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteFirst, PKey: wire.DefaultPKey, DestQP: r.qp.QPN(), PSN: 100},
		RETH:    wire.RETH{VA: r.mr.Addr(), RKey: r.mr.RKey(), Length: uint32(len(r.buf))},
		Payload: make([]byte, seg)}
	pkt := func(h *wire.Packet, id uint16) link.Packet {
		buf := h.Append(make([]byte, 0, maxDatagram))
		wire.FillICRC(buf, src, dst, id)
		return link.Packet{Buf: buf[:cap(buf)], N: len(buf), Src: src, Dst: dst}
	}
	var p wire.Packet
	r.dev.handleBatch([]link.Packet{pkt(&first, 1)}, &p, false)
	q := r.qp
	q.mu.Lock()
	ePSN, va, rem := q.resp.ePSN, q.resp.wVA, q.resp.wRem
	q.mu.Unlock()
	if ePSN != 101 {
		b.Fatalf("the FIRST was not taken: ePSN %d", ePSN)
	}
	batch := make([]link.Packet, n)
	payload := make([]byte, seg)
	for i := range batch {
		fill(payload, byte(i))
		h := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteMiddle, PKey: wire.DefaultPKey, DestQP: r.qp.QPN(), PSN: 101 + uint32(i)},
			Payload: payload}
		batch[i] = pkt(&h, uint16(2+i))
	}
	b.SetBytes(n * seg)
	b.ReportAllocs()
	for b.Loop() {
		q.mu.Lock()
		q.resp.ePSN, q.resp.wVA, q.resp.wRem = ePSN, va, rem
		q.mu.Unlock()
		r.dev.handleBatch(batch, &p, false)
	}
	b.StopTimer()
	q.mu.Lock()
	got := q.resp.ePSN
	q.mu.Unlock()
	if got != ePSN+n || r.dev.Stats().ICRCErrors.Load() != 0 {
		b.Fatalf("the batch was not taken: ePSN %d, want %d; ICRC errors %d", got, ePSN+n, r.dev.Stats().ICRCErrors.Load())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pkt")
}
