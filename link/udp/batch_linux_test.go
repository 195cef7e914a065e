package udp

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// TestBatchConnGSOGRO sends four datagrams as one GSO message, each
// gathered from a header and a payload buffer, and receives them with GRO:
// the receiver sees the same bytes, datagram by datagram (one buffer with
// its segment size, or one message each).
func TestBatchConnGSOGRO(t *testing.T) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	gro := EnableGRO(rx)
	gso := GSOSupported(tx)
	t.Logf("GRO %v, GSO %v", gro, gso)

	const dgrams, hlen, plen = 4, 8, 192
	var want []byte
	out, err := NewBatchConn(tx, dgrams, 2*dgrams)
	if err != nil {
		t.Fatal(err)
	}
	msgs := 0
	for d := 0; d < dgrams; d++ {
		h := bytes.Repeat([]byte{byte(0xa0 + d)}, hlen)
		p := bytes.Repeat([]byte{byte(d)}, plen)
		want = append(append(want, h...), p...)
		if gso {
			out.Add(0, 2*d, h)
			out.Add(0, 2*d+1, p)
			continue
		}
		out.Add(msgs, 0, h)
		out.Add(msgs, 1, p)
		out.SetLen(msgs, 2)
		msgs++
	}
	if gso {
		out.SetLen(0, 2*dgrams)
		out.SetGSO(0, hlen+plen)
		msgs = 1
	}
	if err := out.Send(msgs); err != nil {
		t.Fatal(err)
	}

	in, err := NewBatchConn(rx, dgrams, 1)
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([][]byte, dgrams)
	for i := range bufs {
		bufs[i] = make([]byte, 65536)
		in.Add(i, 0, bufs[i])
		in.SetLen(i, 1)
	}
	var got []byte
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(got) < len(want) {
		n, err := in.Recv(dgrams, gro)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			l := in.Len(i)
			if seg := in.GSOSize(i); seg != 0 && seg != hlen+plen {
				t.Errorf("message %d: GRO segment size %d, want %d", i, seg, hlen+plen)
			} else if seg == 0 && l != hlen+plen {
				t.Errorf("message %d: %d bytes without a segment size, want one datagram of %d", i, l, hlen+plen)
			}
			got = append(got, bufs[i][:l]...)
		}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("received %d bytes that differ from the %d sent", len(got), len(want))
	}
}
