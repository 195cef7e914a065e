package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/verbs"
)

func TestControlMessages(t *testing.T) {
	qs := []qpInfo{{QPN: 0x11, PSN: 0xabcdef, GID: verbs.GID{10: 0xff, 11: 0xff, 12: 127, 15: 1}, Port: 4791, MTU: verbs.MTU4096},
		{QPN: 0x12, PSN: 7, Port: 50000, MTU: verbs.MTU1024}}
	b := appendQPInfos(nil, qs)
	b = append(b, "HDR_SIZE 4096\n"...)
	got, rest, err := parseQPInfos(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(qs, got); diff != "" || string(rest) != "HDR_SIZE 4096\n" {
		t.Fatalf("QP infos (-want +got):\n%s rest %q", diff, rest)
	}
	cr := credit{Block: 1 << 40, Addr: 0x7f0000001000, RKey: 0x1234, Len: 64 << 20}
	if got := parseCredit(cr.append(nil)); got != cr {
		t.Fatalf("credit %+v, want %+v", got, cr)
	}
	var buf bytes.Buffer
	frame := func(typ byte, body []byte) []byte {
		h := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(h[1:], uint32(len(body)))
		return append(h, body...)
	}
	buf.Write(frame(msgCredit, cr.append(nil)))
	buf.Write(frame(msgError, []byte("ring 0xdada is full")))
	buf.Write(frame(msgDone, nil)[:3])
	typ, body, err := readMsg(&buf)
	if err != nil || typ != msgCredit || parseCredit(body) != cr {
		t.Fatalf("credit message: %q %x %v", typ, body, err)
	}
	if _, _, err := readMsg(&buf); !errors.Is(err, ErrPeer) || err.Error() != "pipeline: peer failed: ring 0xdada is full" {
		t.Fatalf("error message: %v", err)
	}
	if _, _, err := readMsg(&buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated message: %v", err)
	}
	huge := []byte{msgHello, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := readMsg(bytes.NewReader(huge)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("huge message: %v", err)
	}
	for _, bad := range [][]byte{nil, {0}, {17}, {2, 1, 2, 3}} {
		if _, _, err := parseQPInfos(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseQPInfos(%x): %v", bad, err)
		}
	}
}

// FuzzControl feeds arbitrary bytes to the control message decoders: they
// must fail cleanly, never panic.
func FuzzControl(f *testing.F) {
	qs := appendQPInfos(nil, []qpInfo{{QPN: 0x11, PSN: 5, Port: 4791, MTU: verbs.MTU4096}})
	hello := append(binary.BigEndian.AppendUint16(nil, protoVersion), qs...)
	f.Add(append([]byte{msgHello, 0, 0, 0, byte(len(hello))}, hello...))
	f.Add(append([]byte{msgCredit, 0, 0, 0, creditLen}, credit{Block: 3, Addr: 4096, RKey: 9, Len: 1 << 20}.append(nil)...))
	f.Add([]byte{msgError, 0, 0, 0, 3, 'b', 'a', 'd'})
	f.Add([]byte{msgDone, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			typ, body, err := readMsg(r)
			if err != nil {
				return
			}
			switch typ {
			case msgHello, msgAccept:
				if len(body) >= 2 {
					parseQPInfos(body[2:])
				}
				parseQPInfos(body)
			case msgCredit:
				if len(body) >= creditLen {
					parseCredit(body)
				}
			}
		}
	})
}
