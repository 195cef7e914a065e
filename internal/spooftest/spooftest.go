// Package spooftest sends spoofed CM MADs for tests: UD SEND_ONLY packets
// to a device's GSI QP (QP1) over loopback UDP, each from its own socket
// bound to an address of 127/8 that no device holds, so the GRH the
// receiving CM sees names that address and its answers (REP, REJ) go
// nowhere, as with a flood of connection requests from forged sources.
// The link fills in the ICRC: the packets are valid.
//
// Only tests import it.
package spooftest

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// Flood sends MADs to one device from a set of spoofed addresses.
type Flood struct {
	dst   netip.AddrPort
	peers []netip.Addr
	sent  atomic.Int64

	mu  sync.Mutex
	eps []*udp.Endpoint // nil once closed
}

// New opens a socket on each of peers (loopback addresses, where Linux lets
// any address of 127/8 be bound) for MADs to the device at srv (UDP 4791).
func New(srv netip.Addr, peers []netip.Addr) (*Flood, error) {
	f := &Flood{dst: netip.AddrPortFrom(srv, wire.UDPPort), peers: peers}
	for _, p := range peers {
		ep, err := udp.Listen(netip.AddrPortFrom(p, 0), udp.WithAnyPort(), udp.WithSendFromBound(),
			udp.WithoutGRO(), udp.WithBatchSize(1), udp.WithSocketBuffer(-1))
		if err != nil {
			f.Close()
			return nil, err
		}
		f.eps = append(f.eps, ep)
	}
	return f, nil
}

// Peers returns the spoofed addresses.
func (f *Flood) Peers() []netip.Addr { return f.peers }

// Send sends MAD m from the i-th spoofed address (modulo their number).
// After Close it fails with net.ErrClosed.
func (f *Flood) Send(i int, m []byte) error {
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1},
		DETH: wire.DETH{QKey: wire.GSIQKey, SrcQP: 1}, Payload: m}
	b := p.Append(nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.eps == nil {
		return net.ErrClosed
	}
	_, err := f.eps[i%len(f.eps)].WriteBatch([]link.Packet{{Buf: b, N: len(b), Dst: f.dst}})
	if err == nil {
		f.sent.Add(1)
	}
	return err
}

// Run sends mad(peer, i) for i = 0, 1, ... from peer, the i-th spoofed
// address (modulo their number), rate a second, until ctx ends or the
// flood is closed. Packets leave in small bursts every 2 ms.
func (f *Flood) Run(ctx context.Context, rate int, mad func(peer netip.Addr, i int) []byte) {
	start := time.Now()
	tk := time.NewTicker(2 * time.Millisecond)
	defer tk.Stop()
	for i := 0; ; {
		for due := int(time.Since(start).Seconds() * float64(rate)); i < due; i++ {
			if f.Send(i, mad(f.peers[i%len(f.peers)], i)) == net.ErrClosed {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// Sent returns the number of MADs sent.
func (f *Flood) Sent() int { return int(f.sent.Load()) }

// Close closes the sockets.
func (f *Flood) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ep := range f.eps {
		ep.Close()
	}
	f.eps = nil
}
