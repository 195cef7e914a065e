package rsocket

import (
	"testing"
	"time"
)

// BenchmarkPacketPingPong: a 64-byte datagram there and back between two
// datagram rsockets (blocking reads).
func BenchmarkPacketPingPong(b *testing.B) {
	pa, pb := benchPacketPair(b)
	stop := make(chan struct{})
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pb.ReadFrom(buf)
			if err != nil {
				close(stop)
				return
			}
			pb.WriteTo(buf[:n], from)
		}
	}()
	msg := make([]byte, 64)
	buf := make([]byte, 64)
	pa.WriteTo(msg, pb.LocalAddr())
	pa.ReadFrom(buf)
	b.ResetTimer()
	for range b.N {
		pa.WriteTo(msg, pb.LocalAddr())
		if _, _, err := pa.ReadFrom(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	pb.Close()
	<-stop
	pa.Close()
}

func benchPacketPair(b *testing.B) (*PacketConn, *PacketConn) {
	p := newUDPPair(b)
	a, err := ListenPacket(p.aa.Addr().String()+":0", nil)
	if err != nil {
		b.Fatal(err)
	}
	c, err := ListenPacket(p.ab.Addr().String()+":0", nil)
	if err != nil {
		b.Fatal(err)
	}
	a.SetReadDeadline(time.Now().Add(time.Minute))
	return a, c
}
