package udp

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// gathered splits a whole datagram (headers, payload, pad, ICRC) into a
// zero-copy packet: the first hl bytes and the last tail bytes in Buf, the
// middle as Data (a copy, so that the original stays to compare with).
func gathered(whole []byte, hl, tail int) link.Packet {
	buf := make([]byte, 0, 256)
	buf = append(buf, whole[:hl]...)
	buf = append(buf, whole[len(whole)-tail:]...)
	clear(buf[len(buf)-wire.ICRCLen:]) // the link fills the ICRC
	return link.Packet{Buf: buf, N: len(buf), DataAt: hl, Data: bytes.Clone(whole[hl : len(whole)-tail])}
}

// TestGatherWrite sends datagrams whose payload is in Packet.Data (zero-copy
// send), mixed with flat ones, in GSO runs and one by one, over IPv4 and
// IPv6, and checks that the receiver gets exactly the flat datagrams with
// valid ICRCs.
func TestGatherWrite(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, mode := range []struct {
			name string
			opts []Option
		}{{"gso", nil}, {"plain", []Option{WithoutGSO(), WithoutGRO()}}} {
			t.Run(addr+"/"+mode.name, func(t *testing.T) {
				a, b := listen(t, addr, mode.opts...), listen(t, addr, mode.opts...)
				if !link.CapabilitiesOf(a).GatherWrite {
					t.Fatal("Capabilities().GatherWrite = false on a sendmmsg endpoint")
				}
				const n = 40
				pkts := make([]link.Packet, n)
				want := make([][]byte, n)
				for i := range pkts {
					size := 1000
					if i == 17 || i == n-1 {
						size = 301 // ends a run, needs a pad
					}
					whole := linktest.Packet(nil, 0x0A, uint32(i), linktest.Payload(i, size))
					if i%5 == 3 {
						pkts[i] = link.Packet{Buf: whole, N: len(whole)} // flat
					} else {
						pkts[i] = gathered(whole, wire.BTHLen+wire.RETHLen, wire.PadLen(size)+wire.ICRCLen)
					}
					pkts[i].Dst = b.LocalAddr()
					wire.FillICRC(whole, a.SendAddr(), b.LocalAddr(), 0)
					want[i] = whole
				}
				if k, err := a.WriteBatch(pkts); k != n || err != nil {
					t.Fatalf("WriteBatch = %d, %v", k, err)
				}
				got := readN(t, b, n)
				for i, p := range got {
					if len(want[i]) != p.N || !bytes.Equal(p.Bytes()[:wire.BTHLen], want[i][:wire.BTHLen]) {
						t.Fatalf("datagram %d: %d bytes %x..., want %d bytes %x...", i, p.N, p.Bytes()[:wire.BTHLen], len(want[i]), want[i][:wire.BTHLen])
					}
					// The ICRC depends on the IPv4 ID GSO gave the segment:
					// compare what precedes it, and verify it.
					if !bytes.Equal(p.Bytes()[:p.N-wire.ICRCLen], want[i][:p.N-wire.ICRCLen]) {
						t.Fatalf("datagram %d differs from the flat one", i)
					}
					if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
						t.Errorf("datagram %d: ICRC does not verify", i)
					}
				}
				s := a.Stats()
				if s.Gathered != n-n/5 || s.PacketsOut != n {
					t.Errorf("sender stats: %d gathered, %d out; want %d, %d", s.Gathered, s.PacketsOut, n-n/5, n)
				}
				if mode.name == "gso" && a.GSO() && s.GSOSegments != n {
					t.Errorf("GSO segments %d, want %d (gathered packets are cut from one buffer as flat ones)", s.GSOSegments, n)
				}
			})
		}
	}
}

// TestGatherWriteBadDataAt refuses a Data split that would leave the BTH or
// the ICRC placeholder out of Buf.
func TestGatherWriteBadDataAt(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	whole := linktest.Packet(nil, 0x0A, 1, linktest.Payload(1, 100))
	for _, at := range []int{0, wire.BTHLen - 1, len(whole)} {
		p := []link.Packet{gathered(whole, wire.BTHLen, wire.ICRCLen)}
		p[0].DataAt, p[0].Dst = at, b.LocalAddr()
		if k, err := a.WriteBatch(p); k != 0 || err == nil {
			t.Errorf("DataAt %d: WriteBatch = %d, %v; want 0 and an error", at, k, err)
		}
	}
}

// TestPollBatch: PollBatch and PollBatchView return at once with nothing
// waiting, and return the datagrams that are, as ReadBatch would.
func TestPollBatch(t *testing.T) {
	for _, view := range []bool{false, true} {
		a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
		poll := b.PollBatch
		if view {
			poll = b.PollBatchView
		}
		rd := linktest.Batch(8, 2048)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if k, err := poll(rd); k != 0 || err != nil {
				t.Errorf("view %v: PollBatch with nothing waiting = %d, %v; want 0, nil", view, k, err)
			}
		}()
		select {
		case <-done:
		case <-time.After(linktest.Timeout):
			b.Close()
			<-done
			t.Fatalf("view %v: PollBatch waited with nothing to read", view)
		}
		want := sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
		var got []byte
		for deadline := time.Now().Add(linktest.Timeout); got == nil && time.Now().Before(deadline); {
			k, err := poll(rd)
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 {
				got = rd[0].Bytes()
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("view %v: polled %x, want %x", view, got, want)
		}
		b.Close()
		if _, err := poll(rd); err == nil {
			t.Fatalf("view %v: PollBatch on a closed endpoint: no error", view)
		}
	}
}
