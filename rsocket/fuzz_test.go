package rsocket

import (
	"encoding/binary"
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
