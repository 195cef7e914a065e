package rsocket

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
)

// BenchmarkStream: 1 MiB writes one way over loopback UDP devices (as
// rstream's bandwidth test: 1 MiB buffers, no inline data), against a TCP
// loopback connection in the same run.
func BenchmarkStream(b *testing.B) {
	b.Run("rsocket", func(b *testing.B) {
		p := newUDPPair(b)
		cfg := &Config{SendBuf: 1 << 20, RecvBuf: 1 << 20, Inline: -1}
		c, s := connect(b, p, cfg, cfg)
		stream(b, c, s, false)
	})
	b.Run("rsocket-nonblock", func(b *testing.B) {
		p := newUDPPair(b)
		cfg := &Config{SendBuf: 1 << 20, RecvBuf: 1 << 20, Inline: -1}
		c, s := connect(b, p, cfg, cfg)
		c.SetNonblock(true)
		s.SetNonblock(true)
		stream(b, c, s, true)
	})
	b.Run("tcp", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		ch := make(chan net.Conn, 1)
		go func() { s, _ := l.Accept(); ch <- s }()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s := <-ch
		defer c.Close()
		defer s.Close()
		stream(b, c, s, false)
	})
}

func stream(b *testing.B, c, s io.ReadWriter, spin bool) {
	const size = 1 << 20
	buf := make([]byte, size)
	b.SetBytes(size)
	done := make(chan error, 1)
	go func() {
		rb := make([]byte, size)
		for n := 0; n < b.N*size; {
			k, err := s.Read(rb)
			if err != nil && !(spin && errors.Is(err, syscall.EAGAIN)) {
				done <- err
				return
			}
			n += k
		}
		done <- nil
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for off := 0; off < size; {
			k, err := c.Write(buf[off:])
			if err != nil && !(spin && errors.Is(err, syscall.EAGAIN)) {
				b.Fatal(err)
			}
			off += k
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPingPong: 64-byte round trips (rstream's latency test),
// blocking, against TCP loopback in the same run.
func BenchmarkPingPong(b *testing.B) {
	b.Run("rsocket", func(b *testing.B) {
		p := newUDPPair(b)
		c, s := connect(b, p, nil, nil)
		pingPong(b, c, s)
	})
	b.Run("tcp", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		ch := make(chan net.Conn, 1)
		go func() { s, _ := l.Accept(); ch <- s }()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s := <-ch
		defer c.Close()
		defer s.Close()
		pingPong(b, c, s)
	})
}

func pingPong(b *testing.B, c, s io.ReadWriter) {
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(s, buf); err != nil {
				done <- err
				return
			}
			if _, err := s.Write(buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
