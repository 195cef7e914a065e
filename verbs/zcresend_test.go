package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// TestResendCopied: on a link that gathers, a packet's first transmission
// lends its payload from the MR (zero-copy) and a resend copies it: the
// original may be acknowledged, its WQE completed and the memory reused
// by the program while the resend still waits in the device queue (the
// race detector caught a resend reading memory rsocket was refilling). A
// 16-packet WRITE whose 6th packet is lost once is sent with 16 lent
// packets and 11 copied ones (go-back-N from the lost one), and lands
// whole.
func TestResendCopied(t *testing.T) {
	if raceEnabled {
		t.Skip("a build with the race detector sends no payload zero-copy (racedetect_on.go); the tests without -race cover it")
	}
	drop := &wireLog{drop: func(p *wire.Packet, n int) bool { return p.BTH.PSN == 105 && n == 0 }}
	ea, eb, err := pipe.New(pipe.Config{MTU: 65536, GatherWrite: true, Filter: drop.filter}, pipe.Config{MTU: 65536, GatherWrite: true})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newPairOn(t, ea, eb, pairOpts{pmtu: wire.MTU1024})
	if !a.dev.zc {
		t.Fatal("no zero-copy on a gathering pipe")
	}
	fill(a.buf[:16<<10], 4)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 16<<10),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
	sent := 0
	for _, p := range drop.list() {
		if p.BTH.Opcode&0x1f <= 0x0b { // WRITE opcodes
			sent++
		}
	}
	if zc := a.dev.Stats().ZeroCopyPackets.Load(); zc != 16 || sent < 27 {
		t.Fatalf("%d packets sent, %d zero-copy: want 16 zero-copy (the first transmissions) of at least 27", sent, zc)
	}
}
