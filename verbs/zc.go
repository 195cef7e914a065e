package verbs

import (
	"runtime"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/wire"
)

// Zero-copy send. On a link that gathers (link.Capabilities.GatherWrite:
// link/udp), a packet whose payload lies in one MR is not copied into its
// buffer: the buffer holds the headers, the pad and the ICRC placeholder,
// and link.Packet.Data points at the payload in the MR. The kernel copies it
// once, straight from registered memory, while the link computes the ICRC
// over the three pieces in one pass. Smaller payloads, payloads spread over
// several SGEs, inline data and links that cannot gather are copied as
// before.
//
// A lent payload must stay valid until the packet is written: each such
// packet holds a reference (zcRef) from when it is built until the device
// queue has written it, which may be after PostSend returns (doorbell
// batching leaves a post's packets for the next received batch).
// Only a packet's first transmission lends: a resend is copied (req.go), as
// its original may be acknowledged, and its WQE completed and its memory
// reused by the program, before the resend is written.
// Deregister and Rereg of a new buffer wait for the MR's references,
// sending what is queued themselves; a provider region's read guard is held
// too, so a revocation cannot unmap memory the kernel is about to read, and
// its drain sends the queue (mem.Region.OnDrain) rather than wait for it.

// zcMin is the smallest payload sent in place: below it a copy costs less
// than a second iovec.
const zcMin = 512

// zcRef is what a zero-copy packet holds until it is written.
type zcRef struct {
	mr     *MR
	region *mem.Region // the MR's provider region, whose read guard is held
}

// release drops the reference, if any.
func (r *zcRef) release() {
	if r.mr == nil {
		return
	}
	if r.region != nil {
		r.region.Exit()
	}
	r.mr.lent.Add(-1)
	*r = zcRef{}
}

// fillPayload puts the payload of p, the packet the QP built last (pl is its
// payload slice from newPacket), from src, which lies in mr (acquired by the
// caller): in place when the device sends zero-copy and src is large
// enough, else copied into pl; false if src faulted (memCopy).
func (qp *QP) fillPayload(p *link.Packet, pl []byte, mr *MR, src []byte) bool {
	if !qp.dev.zc || len(src) < zcMin {
		return memCopy(pl, src)
	}
	ref := &qp.txref[qp.txn-1]
	ref.release() // a slot's earlier packet, had it not been handed over
	if mr.region != nil {
		if _, err := mr.region.Enter(); err != nil {
			return memCopy(pl, src) // being revoked: the caller's own guard still holds
		}
		ref.region = mr.region
	}
	ref.mr = mr
	mr.lent.Add(1)
	pad := wire.PadLen(len(src))
	hl := p.N - len(src) - pad - wire.ICRCLen
	clear(p.Buf[hl : hl+pad])
	p.N = hl + pad + wire.ICRCLen
	p.Data, p.DataAt = src, hl
	qp.dev.stats.ZeroCopyPackets.Add(1)
	return true
}

// gatherPayload fills the payload of p (pl, from newPacket) with the bytes
// at off of the SGE list: in place (fillPayload) when they lie in one SGE,
// else copied SGE by SGE. It returns false on a key/PD/bounds failure.
func (qp *QP) gatherPayload(p *link.Packet, pl []byte, sges []SGE, off int) bool {
	if !qp.dev.zc || len(pl) < zcMin {
		return qp.dev.gather(qp.pd, sges, off, pl)
	}
	for i := range sges {
		s := &sges[i]
		if off >= int(s.Length) {
			off -= int(s.Length)
			continue
		}
		if int(s.Length)-off < len(pl) {
			break // spans SGEs
		}
		mr, o := qp.dev.acquire(qp.pd, s.LKey, s.Addr+uint64(off), uint64(len(pl)), 0)
		if mr == nil {
			return false
		}
		ok := qp.fillPayload(p, pl, mr, mr.buf[o:o+len(pl)])
		mr.release()
		return ok
	}
	return qp.dev.gather(qp.pd, sges, off, pl)
}

// waitLent waits until no packet still to be written lends the MR's memory,
// sending what the device has queued. The wait is bounded: a packet is
// written by the next send of the device queue, which the loop starts
// itself if no one else is sending.
func (mr *MR) waitLent() {
	deadline := time.Time{}
	for i := 0; mr.lent.Load() > 0; i++ {
		mr.dev.kick()
		if mr.lent.Load() == 0 {
			return
		}
		if i < 64 {
			runtime.Gosched()
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(10 * time.Second)
		} else if now.After(deadline) {
			if mr.dev.log != nil {
				mr.dev.log.Warn("deregister: packets lending the MR's memory were not sent in 10 s; going on",
					"lent", mr.lent.Load())
			}
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}
