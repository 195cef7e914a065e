package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/softroce/softroce/wire"
)

// byteOrder reads and appends.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// rawFrame is one record of a classic little-endian microsecond pcap.
type rawFrame struct {
	ts   time.Time
	data []byte
}

func rawFrames(t testing.TB, img []byte) []rawFrame {
	t.Helper()
	if binary.LittleEndian.Uint32(img) != magicMicros {
		t.Fatal("test helper reads little-endian microsecond pcap only")
	}
	var out []rawFrame
	for b := img[24:]; len(b) >= 16; {
		n := int(binary.LittleEndian.Uint32(b[8:]))
		ts := time.Unix(int64(binary.LittleEndian.Uint32(b)), int64(binary.LittleEndian.Uint32(b[4:]))*1000)
		out = append(out, rawFrame{ts, b[16 : 16+n]})
		b = b[16+n:]
	}
	return out
}

// writePcap writes frames as a pcap of the given link type and byte order.
func writePcap(lt LinkType, order byteOrder, nanos bool, frames []rawFrame) []byte {
	var b []byte
	magic := uint32(magicMicros)
	if nanos {
		magic = magicNanos
	}
	b = order.AppendUint32(b, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = append(b, make([]byte, 8)...)
	b = order.AppendUint32(b, 65535)
	b = order.AppendUint32(b, uint32(lt))
	for _, f := range frames {
		frac := uint32(f.ts.Nanosecond())
		if !nanos {
			frac /= 1000
		}
		b = order.AppendUint32(b, uint32(f.ts.Unix()))
		b = order.AppendUint32(b, frac)
		b = order.AppendUint32(b, uint32(len(f.data)))
		b = order.AppendUint32(b, uint32(len(f.data)))
		b = append(b, f.data...)
	}
	return b
}

// writePcapng writes frames as pcapng: a section header, an interface with
// nanosecond timestamps, then enhanced packet blocks with a statistics
// block in between.
func writePcapng(lt LinkType, order byteOrder, frames []rawFrame) []byte {
	block := func(b []byte, typ uint32, body []byte) []byte {
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
		n := uint32(12 + len(body))
		b = order.AppendUint32(b, typ)
		b = order.AppendUint32(b, n)
		b = append(b, body...)
		return order.AppendUint32(b, n)
	}
	var shb []byte
	shb = order.AppendUint32(shb, ngByteOrder)
	shb = order.AppendUint16(shb, 1)
	shb = order.AppendUint16(shb, 0)
	shb = order.AppendUint64(shb, ^uint64(0))
	b := block(nil, ngBlockSHB, shb)
	var idb []byte
	idb = order.AppendUint16(idb, uint16(lt))
	idb = order.AppendUint16(idb, 0)
	idb = order.AppendUint32(idb, 0)
	idb = order.AppendUint16(idb, 9) // if_tsresol
	idb = order.AppendUint16(idb, 1)
	idb = append(idb, 9, 0, 0, 0)
	idb = append(idb, 0, 0, 0, 0) // opt_endofopt
	b = block(b, ngBlockIDB, idb)
	for i, f := range frames {
		var epb []byte
		ts := uint64(f.ts.UnixNano())
		epb = order.AppendUint32(epb, 0)
		epb = order.AppendUint32(epb, uint32(ts>>32))
		epb = order.AppendUint32(epb, uint32(ts))
		epb = order.AppendUint32(epb, uint32(len(f.data)))
		epb = order.AppendUint32(epb, uint32(len(f.data)))
		epb = append(epb, f.data...)
		b = block(b, ngBlockEPB, epb)
		if i == 0 {
			b = block(b, 5, make([]byte, 8)) // interface statistics: skipped
		}
	}
	return b
}

// reframe converts an Ethernet frame to another encapsulation; nil drops it.
func reframe(lt LinkType, vlans int, f []byte) []byte {
	et := binary.BigEndian.Uint16(f[12:])
	ip := f[14:]
	switch lt {
	case LinkTypeEthernet:
		out := append([]byte(nil), f[:12]...)
		for i := range vlans {
			tpid := uint16(etherTypeVLAN)
			if i == 0 && vlans > 1 {
				tpid = etherTypeQinQ
			}
			out = binary.BigEndian.AppendUint16(out, tpid)
			out = binary.BigEndian.AppendUint16(out, uint16(100+i))
		}
		return append(out, f[12:]...)
	case LinkTypeLinuxSLL:
		out := []byte{0, 0, 0, 1, 0, 6}
		out = append(out, f[6:12]...)
		out = append(out, 0, 0)
		out = binary.BigEndian.AppendUint16(out, et)
		return append(out, ip...)
	case LinkTypeLinuxSLL2:
		out := binary.BigEndian.AppendUint16(nil, et)
		out = append(out, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6)
		out = append(out, f[6:12]...)
		out = append(out, 0, 0)
		return append(out, ip...)
	case LinkTypeRaw, LinkTypeIPv4:
		if et != etherTypeIPv4 && et != etherTypeIPv6 {
			return nil
		}
		return append([]byte(nil), ip...)
	case LinkTypeNull:
		if et != etherTypeIPv4 {
			return nil
		}
		return append([]byte{2, 0, 0, 0}, ip...)
	case LinkTypeLoop:
		if et != etherTypeIPv4 {
			return nil
		}
		return append([]byte{0, 0, 0, 2}, ip...)
	}
	panic("bad link type")
}

func TestReaderEncapsulations(t *testing.T) {
	img, err := os.ReadFile("../testdata/captures/rc_pingpong_small.pcap")
	if err != nil {
		t.Fatal(err)
	}
	want, st := readAll(t, img, nil)
	if len(want) != 20 || st.Frames != 35 || st.Skipped != 15 {
		t.Fatalf("Ethernet: %d packets, stats %+v; want 20 of 35 frames", len(want), st)
	}
	frames := rawFrames(t, img)
	ignore := cmp.Options{cmpopts.IgnoreFields(Packet{}, "Frame", "WireLen", "VLAN"),
		cmpopts.EquateComparable(netip.AddrPort{}), cmp.Comparer(time.Time.Equal)}
	for _, tc := range []struct {
		name  string
		lt    LinkType
		vlans int
		img   func([]rawFrame) []byte
	}{
		{"vlan", LinkTypeEthernet, 1, nil},
		{"qinq", LinkTypeEthernet, 2, nil},
		{"sll", LinkTypeLinuxSLL, 0, nil},
		{"sll2", LinkTypeLinuxSLL2, 0, nil},
		{"raw", LinkTypeRaw, 0, nil},
		{"ipv4", LinkTypeIPv4, 0, nil},
		{"null", LinkTypeNull, 0, nil},
		{"loop", LinkTypeLoop, 0, nil},
		{"bigendian-nanos", LinkTypeEthernet, 0, func(f []rawFrame) []byte { return writePcap(LinkTypeEthernet, binary.BigEndian, true, f) }},
		{"pcapng", LinkTypeEthernet, 0, func(f []rawFrame) []byte { return writePcapng(LinkTypeEthernet, binary.LittleEndian, f) }},
		{"pcapng-be-sll2", LinkTypeLinuxSLL2, 0, func(f []rawFrame) []byte { return writePcapng(LinkTypeLinuxSLL2, binary.BigEndian, f) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conv []rawFrame
			for _, f := range frames {
				if d := reframe(tc.lt, tc.vlans, f.data); d != nil {
					conv = append(conv, rawFrame{f.ts, d})
				}
			}
			var b []byte
			if tc.img != nil {
				b = tc.img(conv)
			} else {
				b = writePcap(tc.lt, binary.LittleEndian, false, conv)
			}
			got, _ := readAll(t, b, nil)
			if diff := cmp.Diff(want, got, ignore); diff != "" {
				t.Errorf("packets differ (-ethernet +%s):\n%s", tc.name, diff)
			}
			for _, p := range got {
				wantVLAN := -1
				if tc.vlans > 0 {
					wantVLAN = 100 + tc.vlans - 1
				}
				if p.VLAN != wantVLAN {
					t.Fatalf("VLAN %d, want %d", p.VLAN, wantVLAN)
				}
			}
		})
	}
}

// TestReaderCaptures checks every packet of the real kernel rxe captures in
// the repository's testdata/captures (and ../shared/captures when present):
// all are found and all ICRCs verify against the captured IP headers.
func TestReaderCaptures(t *testing.T) {
	var files []string
	for _, name := range []string{"rc_pingpong_small.pcap", "rping.pcap", "ud_pingpong.pcap"} {
		files = append(files, filepath.Join("..", "testdata", "captures", name))
	}
	shared, _ := filepath.Glob("../../shared/captures/*.pcap")
	files = append(files, shared...)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			img, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			pkts, st := readAll(t, img, nil)
			if len(pkts) == 0 {
				t.Fatal("no RoCE packets")
			}
			for _, p := range pkts {
				if p.Truncated || !wire.VerifyICRC(p.IPHdr, p.Src.Port(), p.Dst.Port(), p.Payload) {
					t.Fatalf("frame %d: bad ICRC or truncated", p.Frame)
				}
				var wp wire.Packet
				if err := wp.Parse(p.Payload); err != nil {
					t.Fatalf("frame %d: %v", p.Frame, err)
				}
			}
			t.Logf("%d RoCE of %d frames", st.RoCE, st.Frames)
		})
	}
}

func TestReaderPorts(t *testing.T) {
	img, err := os.ReadFile("../testdata/captures/rc_pingpong_small.pcap")
	if err != nil {
		t.Fatal(err)
	}
	got, st := readAll(t, img, &ReaderOptions{Ports: []uint16{18515}})
	if st.Frames == 0 {
		t.Fatal("the capture has no frames")
	}
	if len(got) != 0 || st.Skipped != st.Frames {
		t.Errorf("TCP port 18515 is not UDP: got %d packets", len(got))
	}
}

func TestReaderIPv6ExtHeaders(t *testing.T) {
	vec := unhex(t, v4)
	// Insert a destination-options header (8 bytes of PadN) before UDP.
	ip := bytes.Clone(vec[:40])
	ip[6] = ipv6DestOpts
	binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+8)
	frame := append(ip, 17, 0, 1, 4, 0, 0, 0, 0)
	frame = append(frame, vec[40:]...)
	frame = append(frame, 0, 0, 0, 0) // trailing link padding must be ignored
	got, _ := readAll(t, writePcap(LinkTypeRaw, binary.LittleEndian, false, []rawFrame{{time.Unix(1, 0), frame}}), nil)
	if len(got) != 1 {
		t.Fatalf("got %d packets", len(got))
	}
	if !bytes.Equal(got[0].Payload, vec[48:]) {
		t.Errorf("payload %x", got[0].Payload)
	}
	if !wire.VerifyICRC(vec[:40], got[0].Src.Port(), got[0].Dst.Port(), got[0].Payload) {
		t.Error("ICRC")
	}
}

func TestReaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		img  []byte
		want error
	}{
		{"empty", nil, ErrFormat},
		{"text", []byte("hello, world, this is not a pcap file"), ErrFormat},
		{"linktype", writePcap(LinkType(147), binary.LittleEndian, false, nil), ErrLinkType},
	} {
		if _, err := NewReader(bytes.NewReader(tc.img), nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A record cut short is an error, not a silent EOF.
	img, _ := os.ReadFile("../testdata/captures/rc_pingpong_small.pcap")
	r, err := NewReader(bytes.NewReader(img[:len(img)-10]), nil)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	for err == nil {
		err = r.Next(&p)
	}
	if !errors.Is(err, ErrFormat) {
		t.Errorf("cut file: %v", err)
	}
}

func TestReaderAllocs(t *testing.T) {
	img, _ := os.ReadFile("../testdata/captures/rc_pingpong_small.pcap")
	br := bytes.NewReader(img)
	r, err := NewReader(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	n := testing.AllocsPerRun(15, func() {
		if err := r.Next(&p); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("Next allocates %v times per packet", n)
	}
}

// FuzzReader feeds arbitrary files to the Reader: it must never panic, and
// every packet it returns must lie within the frame.
func FuzzReader(f *testing.F) {
	for _, name := range []string{"rc_pingpong_small.pcap", "ud_pingpong.pcap"} {
		img, err := os.ReadFile("../testdata/captures/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(img[:min(len(img), 600)])
		frames := rawFrames(f, img)[:4]
		f.Add(writePcapng(LinkTypeLinuxSLL2, binary.BigEndian, frames))
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		r, err := NewReader(bytes.NewReader(img), nil)
		if err != nil {
			return
		}
		var p Packet
		for range 1000 {
			if err := r.Next(&p); err != nil {
				return
			}
			if len(p.IPHdr) < 20 || p.Dst.Port() != wire.UDPPort {
				t.Fatalf("bad packet %+v", p)
			}
		}
	})
}

// FuzzParseFrame checks the frame parser on arbitrary frames of every link type.
func FuzzParseFrame(f *testing.F) {
	img, _ := os.ReadFile("../testdata/captures/rping.pcap")
	for _, fr := range rawFrames(f, img)[:3] {
		f.Add(uint8(1), fr.data)
	}
	f.Add(uint8(101), unhex(f, v4))
	f.Fuzz(func(t *testing.T, lt uint8, b []byte) {
		var p Packet
		for _, l := range []LinkType{LinkType(lt), LinkTypeEthernet, LinkTypeLinuxSLL2, LinkTypeRaw} {
			if ParseFrame(l, b, &p) {
				if len(p.Payload) > len(b) {
					t.Fatal("payload longer than frame")
				}
			}
		}
	})
}

// TestNextFrame reads every frame of a capture that mixes RoCE with the
// TCP exchange of ibv_srq_pingpong: NextFrame returns all of them, in
// order, and ParseFrame finds among them exactly the packets Next returns.
func TestNextFrame(t *testing.T) {
	img, err := os.ReadFile("../testdata/captures/srq_pingpong.pcap")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(img), nil)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for {
		var p Packet
		if err := r.Next(&p); err != nil {
			break
		}
		want = append(want, bytes.Clone(p.Payload))
	}
	st := r.Stats()
	if st.Skipped == 0 {
		t.Fatal("the capture has no frames besides RoCE: pick another")
	}
	r, _ = NewReader(bytes.NewReader(img), nil)
	var got [][]byte
	var frames uint64
	for {
		var f Frame
		if err := r.NextFrame(&f); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		frames++
		if f.Number != frames || f.LinkType != LinkTypeEthernet || len(f.Data) == 0 || f.Time.IsZero() {
			t.Fatalf("frame %d: %+v", frames, f)
		}
		var p Packet
		if ParseFrame(f.LinkType, f.Data, &p) && p.Dst.Port() == wire.UDPPort {
			got = append(got, bytes.Clone(p.Payload))
		}
	}
	if frames != st.Frames {
		t.Errorf("NextFrame returned %d frames, Next saw %d", frames, st.Frames)
	}
	if !cmp.Equal(got, want) {
		t.Errorf("the RoCE frames among NextFrame's (%d) differ from Next's (%d)", len(got), len(want))
	}
}

// TestReadAll: ReadAll returns the packets Next does, each with bytes of
// its own (Next's alias the Reader's buffer).
func TestReadAll(t *testing.T) {
	img, err := os.ReadFile("../testdata/captures/rc_pingpong_small.pcap")
	if err != nil {
		t.Fatal(err)
	}
	all, err := ReadAll(bytes.NewReader(img), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := NewReader(bytes.NewReader(img), nil)
	i := 0
	for ; ; i++ {
		var p Packet
		if err := r.Next(&p); err != nil {
			break
		}
		if i >= len(all) {
			t.Fatalf("ReadAll returned %d packets, Next more", len(all))
		}
		a := all[i]
		if a.Frame != p.Frame || a.Src != p.Src || a.Dst != p.Dst || !bytes.Equal(a.IPHdr, p.IPHdr) || !bytes.Equal(a.Payload, p.Payload) {
			t.Errorf("packet %d (frame %d) differs from Next's", i, p.Frame)
		}
	}
	if i != len(all) || i == 0 {
		t.Errorf("ReadAll returned %d packets, Next %d", len(all), i)
	}
	if _, err := ReadAll(bytes.NewReader(img[:100]), nil); err == nil {
		t.Error("a cut capture gave no error")
	}
}
