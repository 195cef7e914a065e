package capture

import (
	"net/netip"
	"sync"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/tee"
)

// TeeEndpoint is a link.Endpoint that writes every datagram it reads and
// writes to a pcap Writer: the device-level capture option. Open a device
// on it to capture that device's traffic:
//
//	w, _ := capture.Create("dev.pcap", nil)
//	ep, _ := udp.Listen(addr)
//	dev, _ := verbs.Open(capture.Tee(ep, w), nil)
//
// Closing the endpoint (the device closes it) does not close w.
type TeeEndpoint struct {
	*tee.Endpoint
	w   *Writer
	mu  sync.Mutex
	err error
}

// Tee wraps ep so that its traffic is written to w.
func Tee(ep link.Endpoint, w *Writer) *TeeEndpoint {
	t := &TeeEndpoint{w: w}
	t.Endpoint = tee.New(ep, t.record)
	return t
}

// record writes one datagram, sent ones from the address they left from
// (tee.Endpoint.WriteBatch: link/udp sends from a port of its own, or the
// QP's with udp.Config.SourcePorts).
func (t *TeeEndpoint) record(dir tee.Direction, src, dst netip.AddrPort, tos uint8, payload []byte) {
	if err := t.w.WritePacketTOS(time.Now(), src, dst, tos, payload); err != nil {
		t.mu.Lock()
		if t.err == nil {
			t.err = err
		}
		t.mu.Unlock()
	}
}

// Err returns the first error writing the capture, if any (traffic is never
// stopped by a capture error).
func (t *TeeEndpoint) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
