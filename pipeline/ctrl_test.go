package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
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
	typ, body, err := readMsg(&buf, nil)
	if err != nil || typ != msgCredit || parseCredit(body) != cr {
		t.Fatalf("credit message: %q %x %v", typ, body, err)
	}
	if _, _, err := readMsg(&buf, nil); !errors.Is(err, ErrPeer) || err.Error() != "pipeline: peer failed: ring 0xdada is full" {
		t.Fatalf("error message: %v", err)
	}
	if _, _, err := readMsg(&buf, nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated message: %v", err)
	}
	huge := []byte{msgHello, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := readMsg(bytes.NewReader(huge), nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("huge message: %v", err)
	}
	for _, bad := range [][]byte{nil, {0}, {17}, {2, 1, 2, 3}} {
		if _, _, err := parseQPInfos(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseQPInfos(%x): %v", bad, err)
		}
	}
}

// FuzzControl feeds arbitrary bytes to the control message decoders. Every
// message readMsg returns re-frames to exactly the bytes it consumed; it
// stops only at the end of the input (io.EOF between messages,
// io.ErrUnexpectedEOF inside one), at an oversized length (ErrProtocol) or
// at an error message (ErrPeer, with its text); QP lists and credits
// decode to values that encode back to the bytes they came from.
func FuzzControl(f *testing.F) {
	qs := appendQPInfos(nil, []qpInfo{{QPN: 0x11, PSN: 5, Port: 4791, MTU: verbs.MTU4096}})
	hello := append(binary.BigEndian.AppendUint16(nil, protoVersion), qs...)
	f.Add(append([]byte{msgHello, 0, 0, 0, byte(len(hello))}, hello...))
	f.Add(append([]byte{msgCredit, 0, 0, 0, creditLen}, credit{Block: 3, Addr: 4096, RKey: 9, Len: 1 << 20}.append(nil)...))
	f.Add([]byte{msgError, 0, 0, 0, 3, 'b', 'a', 'd'})
	f.Add([]byte{msgDone, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{msgDone, 0, 0, 0, 3})                                                            // a header without its body
	tooMany := append([]byte{0, protoVersion, maxQPs + 1}, make([]byte, (maxQPs+1)*qpInfoLen)...) // one QP too many
	f.Add(append(append([]byte{msgHello}, binary.BigEndian.AppendUint32(nil, uint32(len(tooMany)))...), tooMany...))
	// Every field distinct, two QPs, a credit after the hello.
	two := appendQPInfos(nil, []qpInfo{
		{QPN: 0x01020304, PSN: 0x05060708, GID: verbs.GID{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20}, Port: 0x2122, MTU: verbs.MTU2048},
		{QPN: 0x31323334, PSN: 0x35363738, GID: verbs.GID{0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50}, Port: 0x5152, MTU: verbs.MTU512}})
	two = append(two, "HDR_SIZE 4096\n"...)
	seed := append([]byte{msgAccept, 0, 0, 0, byte(len(two))}, two...)
	seed = append(seed, msgCredit, 0, 0, 0, creditLen)
	seed = append(seed, credit{Block: 0x6162636465666768, Addr: 0x7172737475767778, RKey: 0x81828384, Len: 0x91929394}.append(nil)...)
	f.Add(seed)
	// The largest body allowed, then a length one over it.
	max := append([]byte{msgDone}, binary.BigEndian.AppendUint32(nil, maxMsg)...)
	max = append(max, make([]byte, maxMsg)...)
	f.Add(append(max, msgDone, 0, 0x10, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			pos := len(b) - r.Len()
			typ, body, err := readMsg(r, nil)
			if err != nil {
				checkReadErr(t, b[pos:], err)
				return
			}
			used := len(b) - r.Len() - pos
			frame := append([]byte{typ}, binary.BigEndian.AppendUint32(nil, uint32(len(body)))...)
			if !bytes.Equal(append(frame, body...), b[pos:pos+used]) {
				t.Fatalf("message at %d: type %q with %d bytes does not re-frame to the %d bytes read", pos, typ, len(body), used)
			}
			if typ == msgError || len(body) > maxMsg {
				t.Fatalf("readMsg returned type %q with %d bytes", typ, len(body))
			}
			checkQPInfos(t, body)
			if len(body) >= 2 {
				checkQPInfos(t, body[2:])
			}
			if len(body) >= creditLen {
				if c := parseCredit(body); !bytes.Equal(c.append(nil), body[:creditLen]) {
					t.Fatalf("credit %+v does not encode back to % x", c, body[:creditLen])
				}
			}
		}
	})
}

// checkReadErr checks why readMsg stopped on the unread bytes rest.
func checkReadErr(t *testing.T, rest []byte, err error) {
	t.Helper()
	switch {
	case len(rest) == 0:
		if err != io.EOF {
			t.Fatalf("at the end of the input: %v, want io.EOF", err)
		}
	case len(rest) < 5:
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d-byte header: %v, want io.ErrUnexpectedEOF", len(rest), err)
		}
	case binary.BigEndian.Uint32(rest[1:]) > maxMsg:
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("%d-byte body: %v, want ErrProtocol", binary.BigEndian.Uint32(rest[1:]), err)
		}
	case len(rest) < 5+int(binary.BigEndian.Uint32(rest[1:])):
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("truncated body: %v, want io.ErrUnexpectedEOF", err)
		}
	case rest[0] == msgError:
		n := binary.BigEndian.Uint32(rest[1:])
		if !errors.Is(err, ErrPeer) || !strings.HasSuffix(err.Error(), ": "+string(rest[5:5+n])) {
			t.Fatalf("error message %q: %v", rest[5:5+n], err)
		}
	default:
		t.Fatalf("readMsg failed on a whole message: %v", err)
	}
}

// checkQPInfos: a QP list parses exactly when its count and length are
// valid, and encodes back to the bytes it came from.
func checkQPInfos(t *testing.T, b []byte) {
	t.Helper()
	qs, rest, err := parseQPInfos(b)
	valid := len(b) >= 1 && b[0] >= 1 && b[0] <= maxQPs && len(b) >= 1+int(b[0])*qpInfoLen
	if (err == nil) != valid {
		t.Fatalf("parseQPInfos(% x): %v (valid %v)", b, err, valid)
	}
	if err != nil {
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("parseQPInfos: %v, want ErrProtocol", err)
		}
		return
	}
	if enc := appendQPInfos(nil, qs); !bytes.Equal(append(enc, rest...), b) {
		t.Fatalf("QP list %+v and rest % x do not encode back to % x", qs, rest, b)
	}
}
