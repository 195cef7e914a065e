package udp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// cmsgs builds a control buffer as the kernel would deliver it.
func cmsgs(pktinfo4, pktinfo6 bool, tos uint8, gro int) []byte {
	b := make([]byte, oobLen)
	cl := 0
	if pktinfo4 {
		d, sp := putCmsg(b[cl:], unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
		(*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0])).Addr = [4]byte{127, 0, 0, 9}
		cl += sp
	}
	if pktinfo6 {
		d, sp := putCmsg(b[cl:], unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
		(*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0])).Addr = netip.IPv6Loopback().As16()
		cl += sp
	}
	if tos != 0 {
		d, sp := putCmsg(b[cl:], unix.IPPROTO_IP, unix.IP_TOS, 1)
		d[0] = tos
		cl += sp
	}
	if gro != 0 {
		d, sp := putCmsg(b[cl:], unix.SOL_UDP, unix.UDP_GRO, 4)
		putInt32(d, int32(gro))
		cl += sp
	}
	return b[:cl]
}

func TestParseCmsgs(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		dst  string
		tos  uint8
		gro  int
		name string
	}{
		{cmsgs(true, false, 3, 1400), "127.0.0.9", 3, 1400, "v4"},
		{cmsgs(false, true, 0, 0), "::1", 0, 0, "v6"},
		{nil, "invalid IP", 0, 0, "empty"},
		{cmsgs(true, false, 0, 0)[:10], "invalid IP", 0, 0, "cut"},
	} {
		dst, tos, gro := parseCmsgs(c.b)
		if dst.String() != c.dst || tos != c.tos || gro != c.gro {
			t.Errorf("%s: parseCmsgs = %v, %d, %d; want %s, %d, %d", c.name, dst, tos, gro, c.dst, c.tos, c.gro)
		}
	}
}

// FuzzParseCmsgs feeds arbitrary control buffers (8-byte aligned, as the
// endpoint's are) to the parser, which must not panic or read out of
// bounds; and it round-trips control messages built from the fuzzed
// values: a selection of a message of another level, IP_PKTINFO,
// IPV6_PKTINFO, IP_TOS, IPV6_TCLASS, UDP_GRO (4 and 2 bytes), in that order (the last
// of each kind wins), cut after any byte: the parser reports exactly the
// messages that lie wholly inside the cut.
func FuzzParseCmsgs(f *testing.F) {
	f.Add(cmsgs(true, false, 3, 1400), uint8(0x7F), uint32(0x0A000001), uint64(0x1122334455667788), uint8(0xB8), int32(9000), uint16(0xFFFF))
	f.Add(cmsgs(false, true, 0x10, 0), uint8(0x15), uint32(0x7F000009), uint64(1), uint8(3), int32(1), uint16(31))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 8, 0, 0, 0}, uint8(0x2A), uint32(1), uint64(2), uint8(4), int32(-5), uint16(0xFFFF))
	for cut := range 201 { // every cut of all seven messages (200 bytes)
		f.Add([]byte(nil), uint8(0x7F), uint32(0xC0A80101), uint64(0xFE80000000000001), uint8(0x2E), int32(0x0ABCDEF0), uint16(cut))
	}
	f.Fuzz(func(t *testing.T, in []byte, sel uint8, a4 uint32, a6 uint64, tos uint8, seg int32, cut uint16) {
		parseCmsgs(aligned(in))

		type msg struct {
			level, typ int32
			data       []byte
		}
		var v4 [4]byte
		binary.BigEndian.PutUint32(v4[:], a4)
		var v6 [16]byte
		binary.BigEndian.PutUint64(v6[:], ^a6)
		binary.BigEndian.PutUint64(v6[8:], a6)
		var pi4 [unix.SizeofInet4Pktinfo]byte
		copy(pi4[8:], v4[:]) // ipi_ifindex, ipi_spec_dst, ipi_addr
		var pi6 [unix.SizeofInet6Pktinfo]byte
		copy(pi6[:], v6[:]) // ipi6_addr, ipi6_ifindex
		var msgs []msg
		if sel&64 != 0 {
			// Another level's message with IP_PKTINFO's type number.
			msgs = append(msgs, msg{unix.SOL_SOCKET, unix.IP_PKTINFO, bytes.Repeat([]byte{0xEE}, 16)})
		}
		if sel&1 != 0 {
			msgs = append(msgs, msg{unix.IPPROTO_IP, unix.IP_PKTINFO, pi4[:]})
		}
		if sel&2 != 0 {
			msgs = append(msgs, msg{unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, pi6[:]})
		}
		if sel&4 != 0 {
			msgs = append(msgs, msg{unix.IPPROTO_IP, unix.IP_TOS, []byte{tos}})
		}
		if sel&8 != 0 {
			msgs = append(msgs, msg{unix.IPPROTO_IPV6, unix.IPV6_TCLASS, binary.NativeEndian.AppendUint32(nil, uint32(^tos))})
		}
		if sel&16 != 0 {
			msgs = append(msgs, msg{unix.SOL_UDP, unix.UDP_GRO, binary.NativeEndian.AppendUint32(nil, uint32(seg))})
		}
		if sel&32 != 0 {
			msgs = append(msgs, msg{unix.SOL_UDP, unix.UDP_GRO, binary.NativeEndian.AppendUint16(nil, uint16(seg>>8))})
		}
		full := aligned(make([]byte, 256))
		n := 0
		var ends []int // where each message's data ends
		for _, m := range msgs {
			d, sp := putCmsg(full[n:], m.level, m.typ, len(m.data))
			copy(d, m.data)
			ends = append(ends, n+unix.CmsgLen(len(m.data)))
			n += sp
		}
		k := int(cut) % (n + 1)
		var wantDst netip.Addr
		var wantTos uint8
		var wantSeg int
		for i, m := range msgs {
			if ends[i] > k {
				break
			}
			switch {
			case m.typ == unix.IP_PKTINFO && m.level == unix.IPPROTO_IP:
				wantDst = netip.AddrFrom4(v4)
			case m.typ == unix.IPV6_PKTINFO && m.level == unix.IPPROTO_IPV6:
				wantDst = netip.AddrFrom16(v6)
			case m.typ == unix.IP_TOS && m.level == unix.IPPROTO_IP:
				wantTos = tos
			case m.typ == unix.IPV6_TCLASS:
				wantTos = ^tos
			case m.typ == unix.UDP_GRO && len(m.data) == 4:
				wantSeg = int(seg)
			case m.typ == unix.UDP_GRO:
				wantSeg = int(uint16(seg >> 8))
			}
		}
		dst, gotTos, gotSeg := parseCmsgs(full[:k])
		if dst != wantDst || gotTos != wantTos || gotSeg != wantSeg {
			t.Fatalf("selection %#x cut at %d of %d: parseCmsgs = %v, %d, %d; want %v, %d, %d",
				sel, k, n, dst, gotTos, gotSeg, wantDst, wantTos, wantSeg)
		}
	})
}

// aligned returns a copy of b in 8-byte aligned memory.
func aligned(b []byte) []byte {
	al := make([]uint64, (len(b)+7)/8)
	if len(al) == 0 {
		return nil
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(&al[0])), len(al)*8)[:len(b)]
	copy(out, b)
	return out
}

// TestLinkLocalZone: a link-local sender's scope ID becomes the zone of Src.
func TestLinkLocalZone(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no lo")
	}
	e := &Endpoint{}
	sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: netip.MustParseAddr("fe80::7").As16(), Scope_id: uint32(lo.Index)}
	setPort(&sa.Port, 4791)
	src := addrPortOf(&sa)
	if src.Addr().IsLinkLocalUnicast() {
		src = netip.AddrPortFrom(src.Addr().WithZone(e.zoneName(sa.Scope_id)), src.Port())
	}
	if want := netip.MustParseAddrPort("[fe80::7%lo]:4791"); src != want {
		t.Errorf("got %v, want %v", src, want)
	}
	if z := e.zoneName(999999); z != "999999" {
		t.Errorf("zoneName of an unknown index = %q", z)
	}
	if idx, err := zoneIndex("lo"); err != nil || idx != uint32(lo.Index) {
		t.Errorf("zoneIndex(lo) = %d, %v", idx, err)
	}
}

// TestMmsgNeverWaits: recvmmsg and sendmmsg run as raw system calls, which
// must never wait in the kernel (the runtime does not know the thread is in
// a call). They pass MSG_DONTWAIT, so even on a socket put into blocking
// mode a poll with nothing queued returns at once, and reads and writes
// still work (waiting in poll(2), or the netpoller with Config.Netpoll).
func TestMmsgNeverWaits(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	for _, e := range []*Endpoint{a, b} {
		var serr error
		if err := e.rc.Control(func(fd uintptr) { serr = unix.SetNonblock(int(fd), false) }); err != nil || serr != nil {
			t.Fatal(err, serr)
		}
	}
	pkts := linktest.Batch(4, 8192)
	done := make(chan error, 1)
	go func() {
		n, err := a.PollBatch(pkts)
		if err == nil && n != 0 {
			err = fmt.Errorf("PollBatch on an empty socket = %d packets", n)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		// Wake the call stuck in the kernel, so that the endpoints close.
		if c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(a.LocalAddr())); err == nil {
			c.Write([]byte("wake"))
			c.Close()
		}
		<-done
		t.Fatal("PollBatch on an empty blocking socket did not return in 5 s: recvmmsg waited")
	}
	want := linktest.Packet(nil, 0x04, 7, linktest.Payload(7, 100))
	out := []link.Packet{{Buf: bytes.Clone(want), N: len(want), Dst: a.LocalAddr()}}
	if n, err := b.WriteBatch(out); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	wire.FillICRC(want, b.SendAddr(), a.LocalAddr(), 0)
	n, err := a.ReadBatch(pkts)
	if n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	if got := pkts[0].Buf[:pkts[0].N]; !bytes.Equal(got, want) {
		t.Errorf("received %x, want %x", got, want)
	}
}
