package verbs

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/wire"
)

// TestICRCCheckedLate drives b's responder with datagrams crafted on an
// ordinary UDP socket at a's address (b's QP accepts its peer's address
// from any port), inside a 4 KiB RDMA WRITE. The ICRC of a WRITE MIDDLE
// or LAST is checked as its payload is copied into the MR (checkLate):
//   - a MIDDLE at the expected PSN with a bad ICRC is dropped and counted,
//     but its bytes have reached the part of the MR the WRITE is filling
//     (the check did run inside the copy);
//   - a bad MIDDLE behind the expected PSN draws no duplicate ACK, one
//     ahead of it no sequence NAK, a bad LAST of the wrong length no NAK
//     and no QP error, a bad MIDDLE to no QP is an ICRC error: each is
//     checked before the responder acts on it;
//   - the intact packets then finish the WRITE with the right bytes.
func TestICRCCheckedLate(t *testing.T) {
	_, b := udpPair(t, pairOpts{})
	const seg = 1024 // pairOpts' default path MTU
	data := make([]byte, 4*seg)
	fill(data, 9)
	cr := newCrafter(t, b, b.mr.Addr(), b.mr.RKey(), len(data))
	send := cr.send
	// wait waits (bounded) until b's device has handled every datagram:
	// taken in all and, by then, the ICRC errors counted (each after its
	// packet's copy, which the test then reads).
	st := b.dev.Stats()
	base := st.RxPackets.Load()
	wait := func(icrcErrors uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for (st.RxPackets.Load()-base < uint64(cr.sent) || st.ICRCErrors.Load() < icrcErrors) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if got := st.RxPackets.Load() - base; got != uint64(cr.sent) {
			t.Fatalf("b received %d of %d datagrams in 10 s", got, cr.sent)
		}
	}
	qpn := b.qp.QPN()
	seg2 := data[seg : 2*seg]
	send(wire.RCWriteFirst, qpn, 100, data[:seg], false)
	send(wire.RCWriteMiddle, qpn, 101, seg2, true)
	wait(1)
	// The MR is read under the QP's lock, which its responder holds while it
	// writes: the race detector cannot see the order the network gives.
	b.qp.mu.Lock()
	scribbled := bytes.Equal(b.buf[seg:2*seg-1], seg2[:seg-1]) && b.buf[2*seg-1] == seg2[seg-1]^0x40
	b.qp.mu.Unlock()
	send(wire.RCWriteMiddle, qpn, 99, seg2, true)
	send(wire.RCWriteMiddle, qpn, 105, seg2, true)
	send(wire.RCWriteLast, qpn, 101, data[seg:seg+512], true)
	send(wire.RCWriteMiddle, qpn^1, 101, seg2, true)
	wait(5)
	if got := st.ICRCErrors.Load(); got != 5 {
		t.Errorf("ICRCErrors = %d after 5 corrupted datagrams", got)
	}
	if !scribbled {
		t.Error("the corrupted MIDDLE at the expected PSN left no bytes in the MR: its ICRC was not checked in the copy")
	}
	send(wire.RCWriteMiddle, qpn, 101, seg2, false)
	send(wire.RCWriteMiddle, qpn, 102, data[2*seg:3*seg], false)
	send(wire.RCWriteLast, qpn, 103, data[3*seg:], false)
	wait(5)
	deadline := time.Now().Add(10 * time.Second)
	for b.qp.respPSNLocked() != 104 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	if got := st.ICRCErrors.Load(); got != 5 {
		t.Errorf("ICRCErrors = %d after the intact packets, want 5", got)
	}
	for name, v := range map[string]uint64{"DupRequests": st.DupRequests.Load(), "SeqNAKsSent": st.SeqNAKsSent.Load(),
		"DropNoQP": st.DropNoQP.Load(), "DropOutOfSeq": st.DropOutOfSeq.Load()} {
		if v != 0 {
			t.Errorf("%s = %d: a corrupted datagram was acted on", name, v)
		}
	}
	b.qp.mu.Lock()
	ePSN, state, inMsg := b.qp.resp.ePSN, b.qp.state, b.qp.resp.inMsg
	written := bytes.Equal(b.buf[:len(data)], data)
	b.qp.mu.Unlock()
	if ePSN != 104 || state != QPStateRTS || inMsg != 0 {
		t.Errorf("after the WRITE: ePSN %d, state %v, in a message %d; want 104, RTS, 0", ePSN, state, inMsg)
	}
	if !written {
		t.Error("the MR does not hold the WRITE's bytes")
	}
}

// respPSNLocked is the responder's expected PSN, under the QP's lock.
func (qp *QP) respPSNLocked() uint32 {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.resp.ePSN
}

// crafter sends RC WRITE packets to b's QP from an ordinary UDP socket at
// its peer's address, as a requester would, with a valid ICRC or a
// corrupted payload byte.
type crafter struct {
	t        *testing.T
	c        *net.UDPConn
	src, dst netip.AddrPort
	va       uint64
	rkey     uint32
	length   int
	sent     int
}

func newCrafter(t *testing.T, b *side, va uint64, rkey uint32, length int) *crafter {
	t.Helper()
	dst := b.dev.LocalAddr()
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &crafter{t: t, c: c, src: c.LocalAddr().(*net.UDPAddr).AddrPort(), dst: dst, va: va, rkey: rkey, length: length}
}

// send sends one packet; a FIRST carries the RETH of the crafter's WRITE.
func (cr *crafter) send(op wire.Opcode, qpn, psn uint32, payload []byte, corrupt bool) {
	cr.t.Helper()
	h := wire.Packet{BTH: wire.BTH{Opcode: op, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn}, Payload: payload}
	if op == wire.RCWriteFirst {
		h.RETH = wire.RETH{VA: cr.va, RKey: cr.rkey, Length: uint32(cr.length)}
	}
	pkt := h.Append(nil) // the ICRC's 4 bytes included
	wire.FillICRC(pkt, cr.src, cr.dst, uint16(cr.sent*31))
	if corrupt {
		pkt[len(pkt)-5] ^= 0x40 // the payload's last byte
	}
	if _, err := cr.c.Write(pkt); err != nil {
		cr.t.Fatal(err)
	}
	cr.sent++
}

// TestICRCCheckedLateFault: a WRITE MIDDLE whose MR was unmapped after the
// WRITE began faults inside the copy that checks its ICRC. Intact, it is
// a remote access error (NAK, QP in error), as without the late check;
// corrupted, it is an ICRC error and nothing else.
func TestICRCCheckedLateFault(t *testing.T) {
	for _, corrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "intact", true: "corrupted"}[corrupt], func(t *testing.T) {
			_, b := udpPair(t, pairOpts{})
			const seg, n = 1024, 1 << 16
			m, mr := mmapMR(t, b.pd, n, AccessLocalWrite|AccessRemoteWrite)
			cr := newCrafter(t, b, mr.Addr(), mr.RKey(), 4*seg)
			qpn, st := b.qp.QPN(), b.dev.Stats()
			cr.send(wire.RCWriteFirst, qpn, 100, make([]byte, seg), false)
			deadline := time.Now().Add(10 * time.Second)
			for b.qp.respPSNLocked() != 101 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			if err := unix.Munmap(m); err != nil {
				t.Fatal(err)
			}
			cr.send(wire.RCWriteMiddle, qpn, 101, make([]byte, seg), corrupt)
			for st.ICRCErrors.Load()+st.NAKsSent.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			b.qp.mu.Lock()
			state := b.qp.state
			b.qp.mu.Unlock()
			icrc, naks := st.ICRCErrors.Load(), st.NAKsSent.Load()
			switch {
			case corrupt && (icrc != 1 || naks != 0 || state != QPStateRTS):
				t.Errorf("corrupted MIDDLE into unmapped memory: ICRC errors %d, NAKs %d, QP %v; want 1, 0, RTS", icrc, naks, state)
			case !corrupt && (icrc != 0 || naks != 1 || state != QPStateErr):
				t.Errorf("intact MIDDLE into unmapped memory: ICRC errors %d, NAKs %d, QP %v; want 0, 1, ERR", icrc, naks, state)
			}
		})
	}
}
