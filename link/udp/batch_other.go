//go:build !linux

package udp

import (
	"net"

	"golang.org/x/net/ipv4"
)

// BatchConn moves batches of datagrams on a *net.UDPConn (see the Linux
// version); here with x/net's ReadBatch/WriteBatch, one datagram per system
// call, without GSO or GRO.
type BatchConn struct {
	pc     *ipv4.PacketConn
	msgs   []ipv4.Message
	bufs   [][]byte
	iovPer int
}

// NewBatchConn returns a BatchConn on c for up to batch messages of up to
// iovPer buffers each.
func NewBatchConn(c *net.UDPConn, batch, iovPer int) (*BatchConn, error) {
	return &BatchConn{pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, batch), bufs: make([][]byte, batch*iovPer), iovPer: iovPer}, nil
}

// Add sets buffer k of message i to x (if x is not empty).
func (b *BatchConn) Add(i, k int, x []byte) {
	if len(x) > 0 {
		b.bufs[i*b.iovPer+k] = x
	}
}

// SetLen sets the number of buffers of message i.
func (b *BatchConn) SetLen(i, n int) { b.msgs[i].Buffers = b.bufs[i*b.iovPer : i*b.iovPer+n] }

// SetGSO does nothing: no GSO here.
func (b *BatchConn) SetGSO(int, int) {}

// GSOSize returns 0: no GRO here.
func (b *BatchConn) GSOSize(int) int { return 0 }

// Len returns how many bytes message i moved.
func (b *BatchConn) Len(i int) int { return b.msgs[i].N }

// Recv receives up to count messages.
func (b *BatchConn) Recv(count int, _ bool) (int, error) { return b.pc.ReadBatch(b.msgs[:count], 0) }

// Send sends count messages.
func (b *BatchConn) Send(count int) error {
	for done := 0; done < count; {
		n, err := b.pc.WriteBatch(b.msgs[done:count], 0)
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// EnableGRO returns false: no GRO here.
func EnableGRO(*net.UDPConn) bool { return false }

// GSOSupported returns false: no GSO here.
func GSOSupported(*net.UDPConn) bool { return false }

// GSOFailed returns false: no GSO here.
func GSOFailed(error) bool { return false }
