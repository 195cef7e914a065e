package pipeline

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/softroce/softroce/dada"
)

// The UDP receive and send paths do not allocate per packet: a whole
// transfer of many packets makes a number of allocations that does not grow
// with the packet count (a few per block: the ring's status snapshot).
func TestUDPNoPerPacketAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	hdu := newRing(t, 4, 65536, dada.LayoutContiguousTry)
	rx, tx := udpPair(t)
	ctx := testCtx(t)
	f := PacketFormat{PayloadSize: 1024}
	const packets = 30000
	done := make(chan error, 1)
	go func() {
		h, err := dada.Connect(hdu.Key(), dada.AttachOptions{})
		if err != nil {
			done <- err
			return
		}
		defer h.Detach()
		r, err := h.OpenReader(ctx)
		if err != nil {
			done <- err
			return
		}
		defer r.Close()
		if _, err := r.ReadHeader(); err != nil {
			done <- err
			return
		}
		for {
			if _, err := r.NextBlock(); err != nil {
				if err == io.EOF {
					err = nil
				}
				done <- err
				return
			}
			r.MarkCleared()
		}
	}()
	res := make(chan error, 1)
	go func() {
		_, err := RecvUDP(ctx, rx, hdu, UDPRecvConfig{Format: f, Packets: packets, IdleTimeout: 300 * time.Millisecond})
		res <- err
	}()
	time.Sleep(50 * time.Millisecond)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if err := SendUDP(ctx, tx, UDPSendConfig{Format: f, Packets: packets + 100, Rate: 100e6}); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := m1.Mallocs - m0.Mallocs
	t.Logf("%d allocations for %d packets (%d blocks)", n, packets, packets*1024/65536)
	if n > packets/10 {
		t.Errorf("%d allocations for %d packets: the per-packet path allocates", n, packets)
	}
}

// The RoCE path (sender, receiver and granter, and the transport under
// them) does not allocate per block: a transfer three times as long makes
// about as many allocations.
func TestRoCENoPerBlockAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const bufsz = 64 << 10
	hdu := newRing(t, 8, bufsz, dada.LayoutContiguousTry)
	mallocs := func(blocks int) uint64 {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		roceDrain(t, hdu, uint64(blocks*bufsz), RoCERecvConfig{Credits: 4}, RoCESendConfig{QPs: 2, FillOnce: true})
		runtime.ReadMemStats(&m1)
		return m1.Mallocs - m0.Mallocs
	}
	mallocs(20) // warm up (pools, first-use allocations)
	short, long := mallocs(100), mallocs(300)
	per := (float64(long) - float64(short)) / 200
	t.Logf("%d allocations for 100 blocks, %d for 300: %.2f per extra block", short, long, per)
	if per >= 1 {
		t.Errorf("%.2f allocations per block (%d for 100 blocks, %d for 300): the per-block path allocates", per, short, long)
	}
}

// roceDrain runs one RoCE transfer of size bytes over a pipe into hdu with
// a reader that drains the ring and keeps nothing.
func roceDrain(t *testing.T, hdu *dada.HDU, size uint64, rcfg RoCERecvConfig, scfg RoCESendConfig) {
	t.Helper()
	ctx := testCtx(t)
	da, db, ln := rocePipe(t)
	rr, err := NewRoCEReceiver(db, hdu, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	rdone, ddone := make(chan error, 1), make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			rdone <- err
			return
		}
		defer c.Close()
		_, err = rr.Receive(ctx, c)
		rdone <- err
	}()
	go func() {
		h, err := dada.Connect(hdu.Key(), dada.AttachOptions{})
		if err != nil {
			ddone <- err
			return
		}
		defer h.Detach()
		r, err := h.OpenReader(ctx)
		if err != nil {
			ddone <- err
			return
		}
		defer r.Close()
		if _, err := r.ReadHeader(); err != nil {
			ddone <- err
			return
		}
		for {
			if _, err := r.NextBlockContext(ctx); err != nil {
				if err == io.EOF {
					err = nil
				}
				ddone <- err
				return
			}
			if err := r.MarkCleared(); err != nil {
				ddone <- err
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	scfg.Header, scfg.Bytes = dada.NewHeader(4096), size
	if _, err := SendRoCE(ctx, c, da, scfg); err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := <-rdone; err != nil {
		t.Fatalf("receive: %v", err)
	}
	if err := <-ddone; err != nil {
		t.Fatalf("reader: %v", err)
	}
}
