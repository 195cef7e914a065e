package rsocket

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// FuzzConnData: any private data decodes without panicking, and what
// decodes re-encodes to the same bytes.
func FuzzConnData(f *testing.F) {
	b := make([]byte, ConnDataLen)
	(&ConnData{Version: 1, Flags: ConnFlagIOMap, Credits: 384, TargetSGL: SGE{1, 2, 2}, DataBuf: SGE{3, 4, 65536}}).Marshal(b)
	f.Add(b)
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		cd, err := ParseConnData(b)
		if err != nil {
			return
		}
		out := make([]byte, ConnDataLen)
		cd.Marshal(out)
		for i := range out {
			if i >= 4 && i < 7 {
				continue // reserved
			}
			if out[i] != b[i] {
				t.Fatalf("byte %d: %#x, want %#x", i, out[i], b[i])
			}
		}
		c := newConn(&Config{})
		c.save(cd) // must not panic
	})
}

// FuzzMessages feeds a connection any sequence of received messages (the
// immediate data and byte count of each RDMA WRITE WITH IMM) and reads in
// between: nothing panics, the receive accounting stays within the
// buffer, and a message beyond what was granted fails the connection.
func FuzzMessages(f *testing.F) {
	seed := make([]byte, 0, 64)
	for _, m := range []Msg{MakeMsg(OpData, 100), MakeMsg(OpSGL, 500), MakeMsg(OpIOMapSGL, 0), MakeMsg(OpCtrl, CtrlShutdown), MakeMsg(OpData, 1<<20)} {
		seed = binary.LittleEndian.AppendUint32(seed, uint32(m))
		seed = binary.LittleEndian.AppendUint32(seed, 16)
	}
	f.Add(seed, uint16(50))
	f.Fuzz(func(t *testing.T, b []byte, read uint16) {
		c := newConn(&Config{RecvBuf: 8192, RQSize: 16, IOMapSize: 2})
		c.rbuf = make([]byte, c.cfg.RecvBuf)
		c.tbuf = make([]byte, SGELen*sglSize+IOMapLen*c.cfg.IOMapSize)
		for i := range c.tbuf {
			c.tbuf[i] = byte(i)
		}
		c.targetIOMap = make([]ioMap, c.cfg.IOMapSize)
		c.rmsg = make([]uint32, c.cfg.RQSize+1)
		c.state = stConnectRDWR
		p := make([]byte, int(read)%9000+1)
		for len(b) >= 8 {
			c.onMsg(Msg(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint32(b[4:]))
			b = b[8:]
			if c.rqueued < 0 || c.rqueued > len(c.rbuf) {
				t.Fatalf("%d bytes queued in a %d-byte buffer", c.rqueued, len(c.rbuf))
			}
			if len(b)%16 == 0 {
				c.consume(p)
				c.peek(p)
			}
		}
		for c.haveData() {
			c.consume(p)
		}
		if c.rqueued != 0 {
			t.Fatalf("%d bytes left queued", c.rqueued)
		}
	})
}

// FuzzDSHeader: any bytes at the front of a received UD datagram decode
// without panicking, and what decodes re-encodes to the same bytes.
func FuzzDSHeader(f *testing.F) {
	for _, h := range []DSHeader{
		{Addr: netip.MustParseAddrPort("10.0.0.1:7174")},
		{Addr: netip.MustParseAddrPort("[fe80::1]:7174"), FlowInfo: 0x12345},
	} {
		b := make([]byte, DSHeaderLen6)
		f.Add(b[:h.Marshal(b)])
	}
	f.Add([]byte{4, 8, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := ParseDSHeader(b)
		if err != nil {
			return
		}
		if n != h.Len() || n > len(b) {
			t.Fatalf("length %d, header says %d, %d bytes", n, h.Len(), len(b))
		}
		out := make([]byte, DSHeaderLen6)
		if m := h.Marshal(out); !bytes.Equal(out[:m], b[:n]) {
			t.Fatalf("re-encoded % x, want % x", out[:m], b[:n])
		}
	})
}

// FuzzDSUDPHeader: any datagram received on a datagram rsocket's UDP
// socket decodes without panicking, and what decodes re-encodes to the
// same bytes (the reserved byte and the QPN's top byte aside).
func FuzzDSUDPHeader(f *testing.F) {
	for _, h := range []DSUDPHeader{
		{Op: OpData, QPN: 0x11, Addr: netip.MustParseAddr("10.0.0.1")},
		{Op: OpCtrl, QPN: 0xFFFFFF, Addr: netip.MustParseAddr("fe80::1")},
	} {
		b := make([]byte, DSUDPHeaderLen6)
		f.Add(b[:h.Marshal(b)], h.Addr.Is6())
	}
	f.Add([]byte{0x55, 0x55, 0x55, 0x55, 4}, false)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		h, n, err := ParseDSUDPHeader(b, v6)
		if err != nil {
			return
		}
		if n != h.Len() || n > len(b) || h.Addr.Is6() != v6 {
			t.Fatalf("length %d, header says %d, %d bytes, v6 %v", n, h.Len(), len(b), v6)
		}
		out := make([]byte, DSUDPHeaderLen6)
		m := h.Marshal(out)
		want := append([]byte(nil), b[:n]...)
		want[7], want[8] = 0, 0
		if !bytes.Equal(out[:m], want) {
			t.Fatalf("re-encoded % x, want % x", out[:m], want)
		}
	})
}
