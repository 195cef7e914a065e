package cm

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// newLoosePair is newPair with agents from NewAgent: outside the registry,
// reachable only through their own Dial and Listen. The addresses are a's
// and b's (pairs may share them).
func newLoosePair(t testing.TB, a, b netip.Addr) *pair {
	t.Helper()
	n := netSeq.Add(1)
	ea, eb, err := pipe.New(pipe.Config{Addr: netip.AddrPortFrom(a, 4791), Seed: uint64(n)},
		pipe.Config{Addr: netip.AddrPortFrom(b, 4791), Seed: uint64(n) + 7})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{pa: ea, pb: eb}
	if p.da, err = verbs.Open(ea, &verbs.Config{Name: "la"}); err != nil {
		t.Fatal(err)
	}
	if p.db, err = verbs.Open(eb, &verbs.Config{Name: "lb"}); err != nil {
		t.Fatal(err)
	}
	if p.aa, err = NewAgent(p.da, testConfig()); err != nil {
		t.Fatal(err)
	}
	if p.ab, err = NewAgent(p.db, testConfig()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.aa.Close()
		p.ab.Close()
		p.da.Close()
		p.db.Close()
	})
	return p
}

// loosePairAddrs returns two addresses no other test's pair uses.
func loosePairAddrs() (netip.Addr, netip.Addr) {
	n := netSeq.Add(1)
	return netip.MustParseAddr(fmt.Sprintf("10.%d.%d.1", 100+n/250, n%250)),
		netip.MustParseAddr(fmt.Sprintf("10.%d.%d.2", 100+n/250, n%250))
}

// dialAccept connects p.aa to a listener of p.ab on port through the
// agents' own Dial and Listen, exchanging private data, and returns both
// ends.
func dialAccept(t *testing.T, p *pair, port uint16, ps mad.PortSpace, cdata, sdata string) (c, s *Conn) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	l, err := p.ab.Listen(fmt.Sprintf("0.0.0.0:%d", port), &Options{PortSpace: ps, PrivateData: []byte(sdata)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if got, want := l.Addr(), netip.AddrPortFrom(p.addrB(), port); got != want {
		t.Errorf("listener address %v, want %v (the agent's)", got, want)
	}
	type accepted struct {
		c   *Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() { s, err := l.Accept(ctx); acc <- accepted{s, err} }()
	c, err = p.aa.Dial(ctx, netip.AddrPortFrom(p.addrB(), port).String(), &Options{PortSpace: ps, PrivateData: []byte(cdata)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	s = r.c
	t.Cleanup(func() { s.Close() })
	if ps == mad.PortSpaceUDP {
		return c, s // SIDR carries private data one way
	}
	if !bytes.HasPrefix(c.PeerPrivateData, []byte(sdata)) || !bytes.HasPrefix(s.PeerPrivateData, []byte(cdata)) {
		t.Errorf("private data: client got %q, server got %q", c.PeerPrivateData, s.PeerPrivateData)
	}
	return c, s
}

// TestAgentDialListen connects two agents from NewAgent through their own
// Dial and Listen, over RC and UD: the registry knows neither, so the
// package-level calls and address lookups do not find them.
func TestAgentDialListen(t *testing.T) {
	a, b := loosePairAddrs()
	p := newLoosePair(t, a, b)
	for _, a := range Agents() {
		if a == p.aa || a == p.ab {
			t.Fatal("Agents lists an agent from NewAgent")
		}
	}
	c, s := dialAccept(t, p, 7180, mad.PortSpaceTCP, "from client", "from server")
	if c.ID.Agent() != p.aa || s.ID.Agent() != p.ab {
		t.Errorf("connection on agents %p/%p, want %p/%p", c.ID.Agent(), s.ID.Agent(), p.aa, p.ab)
	}
	if c.LocalAddr().Addr() != p.addrA() || c.RemoteAddr() != s.LocalAddr() || s.RemoteAddr() != c.LocalAddr() {
		t.Errorf("addresses: client %v->%v server %v->%v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	rb := newBuf(t, s.PD, 64)
	if _, err := s.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rb.sge()}}); err != nil {
		t.Fatal(err)
	}
	sb := newBuf(t, c.PD, 64)
	copy(sb.b, "ping")
	if _, err := c.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sb.sge()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollWC(t, s.RecvCQ, 5*time.Second); wc.Status != verbs.WCSuccess || string(rb.b[:4]) != "ping" {
		t.Fatalf("recv: %v %q", wc.Status, rb.b[:4])
	}

	u, v := dialAccept(t, p, 7181, mad.PortSpaceUDP, "ud client", "")
	if u.UD == nil || u.UD.QPNum != v.QP.QPN() {
		t.Errorf("UD peer %+v, want the listener's QP %d", u.UD, v.QP.QPN())
	}

	// Outside the registry: nothing finds the agents by address.
	if _, err := Listen(netip.AddrPortFrom(p.addrB(), 7182).String(), nil); !errors.Is(err, ErrNoDevice) {
		t.Errorf("package Listen on a NewAgent address: %v, want ErrNoDevice", err)
	}
	ch := NewEventChannel()
	defer ch.Close()
	id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	if err := id.BindAddr(netip.AddrPortFrom(p.addrA(), 0)); !errors.Is(err, ErrNoDevice) {
		t.Errorf("BindAddr on a NewAgent address: %v, want ErrNoDevice", err)
	}
	id.Destroy()
}

// TestAgentsShareAddresses: two pairs of agents from NewAgent with the same
// addresses, each listening on the same port, keep their ports apart: each
// Dial reaches its own pair's listener, and an attached pair may use the
// addresses and port too.
func TestAgentsShareAddresses(t *testing.T) {
	a, b := loosePairAddrs()
	p1, p2 := newLoosePair(t, a, b), newLoosePair(t, a, b)
	ca := pipe.Config{Addr: netip.AddrPortFrom(a, 4791)}
	cb := pipe.Config{Addr: netip.AddrPortFrom(b, 4791)}
	p3 := newPairWith(t, ca, cb, verbs.Config{Name: "pa"}, verbs.Config{Name: "pb"}, nil)
	for i, p := range []*pair{p1, p2, p3} {
		name := fmt.Sprint("pair ", i+1)
		c, s := dialAccept(t, p, 7190, mad.PortSpaceTCP, name+" client", name+" server")
		if s.ID.Agent() != p.ab || c.ID.Agent() != p.aa {
			t.Errorf("%s: connected through other agents", name)
		}
	}
	if !slices.Contains(Agents(), p3.ab) {
		t.Error("Agents does not list an attached agent")
	}
	// Every port is taken on each pair's agent, not across them.
	if _, err := p1.ab.Listen(netip.AddrPortFrom(b, 7190).String(), nil); !errors.Is(err, ErrAddrInUse) {
		t.Errorf("second Listen on a port of the same agent: %v, want ErrAddrInUse", err)
	}
}

// TestAgentDialListenRefused: an agent dials and listens on its own
// address only, and not once closed.
func TestAgentDialListenRefused(t *testing.T) {
	a, b := loosePairAddrs()
	p := newLoosePair(t, a, b)
	ctx := ctxT(t, 10*time.Second)
	if _, err := p.ab.Listen(netip.AddrPortFrom(p.addrA(), 7200).String(), nil); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("Listen on another agent's address: %v, want EADDRNOTAVAIL", err)
	}
	if _, err := p.aa.Dial(ctx, netip.AddrPortFrom(p.addrB(), 7200).String(), &Options{Src: p.addrB()}); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("Dial with another agent's Src: %v, want EADDRNOTAVAIL", err)
	}
	var rj *RejectedError
	if _, err := p.aa.Dial(ctx, netip.AddrPortFrom(p.addrB(), 7200).String(), nil); !errors.As(err, &rj) || rj.Reason != mad.RejInvalidServiceID {
		t.Errorf("Dial to a port nobody listens on: %v, want REJECTED reason 8", err)
	}
	p.aa.Close()
	if _, err := p.aa.Dial(ctx, netip.AddrPortFrom(p.addrB(), 7200).String(), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Dial on a closed agent: %v, want ErrClosed", err)
	}
	if _, err := p.aa.Listen("0.0.0.0:7200", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen on a closed agent: %v, want ErrClosed", err)
	}
}
