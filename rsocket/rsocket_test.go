package rsocket

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestStream moves data both ways at once, in writes of many sizes, over
// each link and several configurations (buffer sizes, inline sizes, queue
// sizes), and checks every byte.
func TestStream(t *testing.T) {
	cfgs := []struct {
		name string
		cfg  Config
	}{
		{"default", Config{}},
		{"small", Config{SendBuf: 4096, RecvBuf: 4096, SQSize: 16, RQSize: 16}},
		{"noinline", Config{Inline: -1, SendBuf: 1 << 20, RecvBuf: 1 << 20}},
		{"inline512", Config{Inline: 512}},
	}
	for _, l := range links {
		for _, cf := range cfgs {
			t.Run(l.name+"/"+cf.name, func(t *testing.T) {
				p := l.new(t)
				cfg := cf.cfg
				c, s := connect(t, p, &cfg, &cfg)
				const total = 1 << 20
				up, down := pattern(total, 1), pattern(total, 2)
				var wg sync.WaitGroup
				errs := make(chan error, 4)
				send := func(w *Conn, b []byte) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(3, 4))
					for off := 0; off < len(b); {
						n := min(len(b)-off, 1+r.IntN(200000))
						k, err := w.Write(b[off : off+n])
						if err != nil {
							errs <- err
							return
						}
						off += k
					}
				}
				recv := func(rd *Conn, want []byte) {
					defer wg.Done()
					got := make([]byte, len(want))
					if _, err := io.ReadFull(rd, got); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(got, want) {
						errs <- errors.New("data differ")
					}
				}
				wg.Add(4)
				go send(c, up)
				go send(s, down)
				go recv(s, up)
				go recv(c, down)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestCloseDataInFlight: data written just before Close arrives whole,
// then EOF.
func TestCloseDataInFlight(t *testing.T) {
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			p := l.new(t)
			c, s := connect(t, p, nil, nil)
			want := pattern(60000, 5) // less than the half of the receive buffer granted at first: no reader needed
			if _, err := c.Write(want); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(s)
			if err != nil {
				t.Fatalf("ReadAll: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d", len(got), len(want))
			}
			if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("Write after the peer closed: %v, want ECONNRESET", err)
			}
		})
	}
}

// TestCloseWrite: SHUT_WR gives the peer EOF while it can still answer.
func TestCloseWrite(t *testing.T) {
	p := newPipePair(t)
	c, s := connect(t, p, nil, nil)
	if _, err := c.Write([]byte("question")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "question" {
		t.Fatalf("ReadAll: %q, %v", got, err)
	}
	if _, err := s.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "answer" {
		t.Fatalf("answer: %q, %v", b, err)
	}
}

// TestRefused: a port nobody listens on gives ECONNREFUSED at once.
func TestRefused(t *testing.T) {
	p := newPipePair(t)
	start := time.Now()
	_, err := DialAgent(ctxT(t, 10*time.Second), p.aa, netip.AddrPortFrom(p.ab.Addr(), 4999).String(), nil)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial: %v, want ECONNREFUSED", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("refusal took %v", d)
	}
}

// TestPeerDies: a peer whose connection goes away without rsocket's
// disconnect message (a process that died: the kernel destroys its
// rdma_cm ID) gives EOF to a blocked reader and ECONNRESET to writers.
func TestPeerDies(t *testing.T) {
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			p := l.new(t)
			c, s := connect(t, p, nil, nil)
			done := make(chan error, 1)
			go func() {
				_, err := s.Read(make([]byte, 10))
				done <- err
			}()
			time.Sleep(50 * time.Millisecond)
			c.CM().Close() // DREQ, no RS_CTRL_DISCONNECT
			select {
			case err := <-done:
				if err != io.EOF {
					t.Fatalf("Read: %v, want EOF", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Read still blocked 5 s after the peer died")
			}
			if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("Write: %v, want ECONNRESET", err)
			}
		})
	}
}

// TestNonblock: EAGAIN with nothing to read, and once the peer's buffer is
// full.
func TestNonblock(t *testing.T) {
	p := newPipePair(t)
	cfg := &Config{SendBuf: 1 << 16, RecvBuf: 1 << 16}
	c, s := connect(t, p, cfg, cfg)
	s.SetNonblock(true)
	if _, err := s.Read(make([]byte, 10)); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Read: %v, want EAGAIN", err)
	}
	c.SetNonblock(true)
	sent := 0
	buf := make([]byte, 8192)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.Write(buf)
		sent += n
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no EAGAIN after %d bytes", sent)
		}
	}
	if sent < 1<<15 || sent > 1<<17 {
		t.Fatalf("EAGAIN after %d bytes; the peer grants 64 KiB at a time", sent)
	}
	// Poll reports what is ready.
	for rev := 0; rev&PollIn == 0; rev = s.Poll(PollIn|PollOut, false) {
		if time.Now().After(deadline) {
			t.Fatalf("Poll: %#x, want PollIn", rev)
		}
	}
	got := 0
	for got < sent {
		n, err := s.Read(make([]byte, 100000))
		if errors.Is(err, syscall.EAGAIN) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	c.SetNonblock(false)
	s.SetNonblock(false)
}

// TestDeadline: a read deadline ends a blocked Read with
// os.ErrDeadlineExceeded.
func TestDeadline(t *testing.T) {
	p := newPipePair(t)
	c, _ := connect(t, p, nil, nil)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read: %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("deadline took %v", d)
	}
}

// TestIOMap: riomap/riowrite: the peer writes straight into a mapped
// buffer.
func TestIOMap(t *testing.T) {
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			p := l.new(t)
			c, s := connect(t, p, &Config{IOMapSize: 1}, &Config{IOMapSize: 1})
			target := make([]byte, 200000)
			if off, err := s.IOMap(target, 0); err != nil || off != 0 {
				t.Fatalf("IOMap: %d, %v", off, err)
			}
			// The mapping goes out before the next data.
			if _, err := s.Write([]byte("go")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
			want := pattern(len(target), 9)
			for off := 0; off < len(want); {
				n, err := c.IOWrite(want[off:], int64(off), 0)
				if err != nil || n == 0 {
					t.Fatalf("IOWrite at %d: %d, %v", off, n, err)
				}
				off += n
			}
			if n, _ := c.IOWrite([]byte("x"), int64(len(target)), 0); n != 0 {
				t.Fatalf("IOWrite past the mapping wrote %d", n)
			}
			// A message after the writes: RC keeps order.
			if _, err := c.Write([]byte("done")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(s, make([]byte, 4)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(target, want) {
				t.Fatal("mapped buffer differs")
			}
			if err := s.IOUnmap(target); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKeepAlive: keepalives flow on an idle connection without disturbing it.
func TestKeepAlive(t *testing.T) {
	p := newPipePair(t)
	c, s := connect(t, p, &Config{KeepAlive: 10 * time.Millisecond}, nil)
	time.Sleep(100 * time.Millisecond)
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(s, b); err != nil || string(b) != "hi" {
		t.Fatalf("%q %v", b, err)
	}
	if c.KeepAlive() != 10*time.Millisecond {
		t.Fatal("KeepAlive")
	}
}

// TestVersionRejected: a request whose rs_conn_data has another version is
// rejected (rs_accept).
func TestParseConnData(t *testing.T) {
	cd := ConnData{Version: 1, Flags: ConnFlagIOMap, Credits: 384, TargetIOMapSize: 3,
		TargetSGL: SGE{Addr: 0x1122334455667788, Key: 0xaabbccdd, Length: 2},
		DataBuf:   SGE{Addr: 0x99, Key: 7, Length: 65536}}
	b := make([]byte, ConnDataLen)
	cd.Marshal(b)
	want := []byte{1, 2, 1, 0x80, 0, 0, 0, 3,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 2,
		0, 0, 0, 0, 0, 0, 0, 0x99, 0, 0, 0, 7, 0, 1, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("marshal:\n%x\nwant\n%x", b, want)
	}
	got, err := ParseConnData(b)
	if err != nil || got != cd {
		t.Fatalf("parse: %+v %v", got, err)
	}
	b[0] = 2
	if _, err := ParseConnData(b); !errors.Is(err, syscall.ENOTSUP) {
		t.Fatalf("version 2: %v", err)
	}
	if _, err := ParseConnData(b[:39]); !errors.Is(err, syscall.EPROTO) {
		t.Fatalf("short: %v", err)
	}
	if m := MakeMsg(OpSGL, 400); uint32(m) != 0x80000190 || m.Op() != OpSGL || m.Data() != 400 {
		t.Fatalf("msg %#x", uint32(m))
	}
}

func TestScale(t *testing.T) {
	for _, tc := range []struct{ v, scaled, back int }{{0, 0, 0}, {1, 1, 1}, {128, 128, 128}, {129, 128, 128}, {256, 129, 256}, {1000, 131, 768}} {
		if s := valueToScale(tc.v, 8); s != tc.scaled || scaleToValue(s, 8) != tc.back {
			t.Errorf("%d: scale %d back %d, want %d %d", tc.v, s, scaleToValue(s, 8), tc.scaled, tc.back)
		}
	}
}

// TestNoPark: a MsgNoPark call that finds nothing fails with EAGAIN, with
// the connection armed so that the next completion calls the SetNotify
// function (the C library's blocking calls then wait outside Go); called
// again after it, the call gets the data.
func TestNoPark(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			c, s := connect(t, lk.new(t), nil, nil)
			notified := make(chan struct{}, 16)
			s.SetNotify(func() {
				select {
				case notified <- struct{}{}:
				default:
				}
			})
			buf := make([]byte, 8)
			for round := range 3 {
				if _, err := s.Recv(buf, MsgDontWait|MsgNoPark); !errors.Is(err, syscall.EAGAIN) {
					t.Fatalf("round %d: Recv on nothing: %v, want EAGAIN", round, err)
				}
				for len(notified) > 0 {
					<-notified
				}
				if _, err := c.Write([]byte{byte(round)}); err != nil {
					t.Fatal(err)
				}
				select {
				case <-notified:
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: no notification of the data", round)
				}
				n, err := s.Recv(buf, MsgDontWait|MsgNoPark)
				for errors.Is(err, syscall.EAGAIN) { // a send completion's event came first
					select {
					case <-notified:
					case <-time.After(5 * time.Second):
						t.Fatalf("round %d: no notification of the data", round)
					}
					n, err = s.Recv(buf, MsgDontWait|MsgNoPark)
				}
				if err != nil || n != 1 || buf[0] != byte(round) {
					t.Fatalf("round %d: Recv %d % x, %v", round, n, buf[:n], err)
				}
			}
		})
	}
}
