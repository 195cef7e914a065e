package cm

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

func TestDialAcceptRC(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ctx := ctxT(t, 10*time.Second)
	l, err := Listen(p.addrB().String()+":7174", &Options{PrivateData: []byte("hello from server")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   *Conn
		err error
	}
	acc := make(chan res, 1)
	go func() { c, err := l.Accept(ctx); acc <- res{c, err} }()
	c, err := Dial(ctx, p.addrB().String()+":7174", &Options{PrivateData: []byte("hello from client")})
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	s := r.c
	if !bytes.HasPrefix(c.PeerPrivateData, []byte("hello from server")) || !bytes.HasPrefix(s.PeerPrivateData, []byte("hello from client")) {
		t.Errorf("private data: client got %q, server got %q", c.PeerPrivateData, s.PeerPrivateData)
	}
	if c.QP.State() != verbs.QPStateRTS || s.QP.State() != verbs.QPStateRTS {
		t.Fatalf("QP states %v %v", c.QP.State(), s.QP.State())
	}
	if c.RemoteAddr() != s.LocalAddr() || s.RemoteAddr() != c.LocalAddr() {
		t.Errorf("addresses: client %v->%v server %v->%v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	// A SEND each way.
	rb := newBuf(t, s.PD, 64)
	if _, err := s.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rb.sge()}}); err != nil {
		t.Fatal(err)
	}
	sb := newBuf(t, c.PD, 64)
	copy(sb.b, "ping")
	if _, err := c.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sb.sge()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollWC(t, c.SendCQ, 5*time.Second); wc.Status != verbs.WCSuccess {
		t.Fatalf("send: %v", wc.Status)
	}
	if wc := pollWC(t, s.RecvCQ, 5*time.Second); wc.Status != verbs.WCSuccess || string(rb.b[:4]) != "ping" {
		t.Fatalf("recv: %v %q", wc.Status, rb.b[:4])
	}
	// Disconnect from the client: both sides see it.
	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Conn{c, s} {
		select {
		case <-x.Disconnected():
		case <-ctx.Done():
			t.Fatal("no DISCONNECTED")
		}
	}
	c.Close()
	s.Close()
	waitFor(t, 5*time.Second, "IDs to leave time-wait", func() bool { return p.aa.IDs() == 0 && p.ab.IDs() == 0 })
}

func TestDialNoListener(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ctx := ctxT(t, 10*time.Second)
	start := time.Now()
	_, err := Dial(ctx, p.addrB().String()+":9", nil)
	var rj *RejectedError
	if !errors.As(err, &rj) || rj.Reason != mad.RejInvalidServiceID {
		t.Fatalf("Dial to a port with no listener: %v, want REJECTED reason 8", err)
	}
	// Prompt: the REJ answered the first REQ, nothing was retransmitted.
	if n := p.aa.Stats().Retransmits.Load(); n != 0 {
		t.Errorf("%d retransmissions before the REJ (after %v)", n, time.Since(start))
	}
}

func TestRejectPrivateDataBothWays(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ctx := ctxT(t, 10*time.Second)
	var got []byte
	l, err := Listen(p.addrB().String()+":7000", &Options{Decide: func(c *Conn) error {
		got = append([]byte(nil), c.PeerPrivateData[:5]...)
		return &RejectedError{PrivateData: []byte("go away")}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Dial(ctx, p.addrB().String()+":7000", &Options{PrivateData: []byte("knock")})
	var rj *RejectedError
	if !errors.As(err, &rj) || rj.Reason != mad.RejConsumerDefined || !bytes.HasPrefix(rj.PrivateData, []byte("go away")) {
		t.Fatalf("got %v (%+v), want REJECTED 28 with private data", err, rj)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("errors.Is(ECONNREFUSED) false for %v", err)
	}
	if string(got) != "knock" {
		t.Errorf("server saw private data %q", got)
	}
	waitFor(t, 5*time.Second, "IDs to drain", func() bool { return p.aa.IDs() == 0 && p.ab.IDs() == 0 })
}

// connect returns a connected client/server pair of Conns.
func connect(t testing.TB, p *pair, port string, co, so *Options) (*Conn, *Conn) {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	l, err := Listen(p.addrB().String()+":"+port, so)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan *Conn, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			errc <- err
			return
		}
		acc <- c
	}()
	c, err := Dial(ctx, p.addrB().String()+":"+port, co)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-acc:
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, s
	case err := <-errc:
		t.Fatal(err)
	}
	return nil, nil
}

func TestDisconnectFromServerFlushes(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	c, s := connect(t, p, "7001", nil, nil)
	rb := newBuf(t, c.PD, 64)
	for i := range 32 {
		if _, err := c.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: rb.sge()}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Conn{c, s} {
		select {
		case <-x.Disconnected():
		case <-time.After(5 * time.Second):
			t.Fatal("no DISCONNECTED")
		}
	}
	for i := range 32 {
		wc := pollWC(t, c.RecvCQ, 5*time.Second)
		if wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("recv %d: %v, want flush", i, wc.Status)
		}
	}
}

// TestDisconnectDuringTraffic: every send posted before and while the
// connection goes down completes, successfully or flushed.
func TestDisconnectDuringTraffic(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	c, s := connect(t, p, "7002", &Options{Cap: verbs.QPCap{MaxSendWR: 256}}, nil)
	sb := newBuf(t, c.PD, 4096)
	dst := newBuf(t, s.PD, 4096)
	posted := 0
	for i := range 200 {
		if i == 100 {
			s.Disconnect()
		}
		n, _ := c.QP.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sb.sge(), RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey()}})
		posted += n
		if n == 0 {
			break
		}
	}
	<-c.Disconnected()
	ok, flushed := 0, 0
	for ok+flushed < posted {
		wc := pollWC(t, c.SendCQ, 5*time.Second)
		switch wc.Status {
		case verbs.WCSuccess:
			ok++
		case verbs.WCWRFlushErr:
			flushed++
		default:
			t.Fatalf("completion %v", wc.Status)
		}
	}
	t.Logf("posted %d: %d completed, %d flushed", posted, ok, flushed)
}

func TestUD(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ud := &Options{PortSpace: mad.PortSpaceUDP, PrivateData: []byte("udp hello")}
	c, s := connect(t, p, "7003", ud, &Options{PortSpace: mad.PortSpaceUDP, PrivateData: []byte("udp welcome")})
	if c.UD == nil || c.UD.QPNum != s.QP.QPN() || c.UD.QKey != mad.UDPQKey || c.AH == nil {
		t.Fatalf("UD param %+v, server QPN %#x", c.UD, s.QP.QPN())
	}
	if !bytes.HasPrefix(c.PeerPrivateData, []byte("udp welcome")) || !bytes.HasPrefix(s.PeerPrivateData, []byte("udp hello")) {
		t.Errorf("private data %q / %q", c.PeerPrivateData, s.PeerPrivateData)
	}
	rb := newBuf(t, s.PD, 40+64)
	s.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rb.sge()}})
	sb := newBuf(t, c.PD, 64)
	copy(sb.b, "datagram")
	if _, err := c.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sb.sge(),
		AH: c.AH, RemoteQPN: c.UD.QPNum, RemoteQKey: c.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollWC(t, s.RecvCQ, 5*time.Second); wc.Status != verbs.WCSuccess || string(rb.b[40:48]) != "datagram" {
		t.Fatalf("UD recv %v %q", wc.Status, rb.b[40:48])
	}
	// No listener in the UDP space: rejected (SIDR status UNSUPPORTED).
	_, err := Dial(ctxT(t, 5*time.Second), p.addrB().String()+":7999", &Options{PortSpace: mad.PortSpaceUDP})
	var rj *RejectedError
	if !errors.As(err, &rj) || rj.Reason != mad.RejInvalidServiceID {
		t.Fatalf("UD dial to no listener: %v", err)
	}
	// Rejected by the application, with private data.
	l, err := Listen(p.addrB().String()+":7004", &Options{PortSpace: mad.PortSpaceUDP,
		Decide: func(*Conn) error { return &RejectedError{PrivateData: []byte("nope")} }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Dial(ctxT(t, 5*time.Second), p.addrB().String()+":7004", &Options{PortSpace: mad.PortSpaceUDP})
	if !errors.As(err, &rj) || rj.Reason != mad.RejConsumerDefined || !bytes.HasPrefix(rj.PrivateData, []byte("nope")) {
		t.Fatalf("UD reject: %v", err)
	}
}

func TestDeadPeerUnreachable(t *testing.T) {
	cfg := testConfig()
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	p.ab.Close() // nobody answers on B's QP1
	start := time.Now()
	_, err := Dial(ctxT(t, 10*time.Second), p.addrB().String()+":7174", nil)
	var ee *EventError
	if !errors.As(err, &ee) || ee.Event != EventUnreachable || !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("dial to a dead peer: %v, want UNREACHABLE/ETIMEDOUT", err)
	}
	limit := cfg.Timeout*time.Duration(cfg.MaxRetries+1) + 500*time.Millisecond
	if d := time.Since(start); d > limit {
		t.Errorf("UNREACHABLE after %v, want within %v", d, limit)
	}
	if p.aa.Stats().Retransmits.Load() != uint64(cfg.MaxRetries) || p.aa.Stats().Timeouts.Load() != 1 {
		t.Errorf("retransmits %d timeouts %d", p.aa.Stats().Retransmits.Load(), p.aa.Stats().Timeouts.Load())
	}
}

func TestDialContextCancel(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, &Config{Timeout: time.Second, TimeWait: 10 * time.Millisecond})
	p.ab.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Dial(ctx, p.addrB().String()+":7174", nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("Dial with a 50ms deadline: %v after %v", err, time.Since(start))
	}
	waitFor(t, 2*time.Second, "ID released", func() bool { return p.aa.IDs() == 0 })
}
