package pipeline

import (
	"io"
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
