//go:build !linux

package pipeline

import (
	"net"

	"golang.org/x/net/ipv4"
)

// batchConn moves batches of datagrams with x/net's ReadBatch/WriteBatch
// (one datagram per system call outside Linux; no GSO or GRO).
type batchConn struct {
	pc     *ipv4.PacketConn
	msgs   []ipv4.Message
	bufs   [][]byte
	iovPer int
}

func newBatchConn(c *net.UDPConn, batch, iovPer int) (*batchConn, error) {
	return &batchConn{pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, batch), bufs: make([][]byte, batch*iovPer), iovPer: iovPer}, nil
}

func (b *batchConn) set(i int, bufs ...[]byte) {
	s := b.bufs[i*b.iovPer : i*b.iovPer]
	for _, x := range bufs {
		if len(x) > 0 {
			s = append(s, x)
		}
	}
	b.msgs[i].Buffers = s
}

func (b *batchConn) add(i, k int, x []byte) {
	if len(x) > 0 {
		b.bufs[i*b.iovPer+k] = x
	}
}

func (b *batchConn) setLen(i, n int) { b.msgs[i].Buffers = b.bufs[i*b.iovPer : i*b.iovPer+n] }

func (b *batchConn) setGSO(i, size int) {}

func (b *batchConn) gsoSize(i int) int { return 0 }

func (b *batchConn) length(i int) int { return b.msgs[i].N }

func (b *batchConn) recv(count int, gro bool) (int, error) { return b.pc.ReadBatch(b.msgs[:count], 0) }

func (b *batchConn) send(count int) error {
	for done := 0; done < count; {
		n, err := b.pc.WriteBatch(b.msgs[done:count], 0)
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

func enableGRO(c *net.UDPConn) bool { return false }

func gsoSupported(c *net.UDPConn) bool { return false }

func gsoFailed(err error) bool { return false }
