package dada

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHeaderGet(t *testing.T) {
	h := testHeader(t)
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"HDR_SIZE", "4096", true},
		{"TELESCOPE", "PKS", true}, // the comment is not part of the word
		{"SOURCE", "J0437-4715", true},
		{"NBIT", "8", true},
		{"BIT", "", false},           // only whole keys at the start of a line
		{"Parkes", "", false},        // words in comments are not keys
		{"UTC", "", false},           // prefix of UTC_START
		{"HDR_VERSION", "1.0", true}, // first line after the comment
	}
	for _, tc := range tests {
		got, ok := h.Get(tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Get(%s) = %q, %v; want %q, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
	if v, _ := h.GetLine("TELESCOPE"); v != "PKS" {
		t.Errorf("GetLine(TELESCOPE) = %q", v)
	}
	if f, err := h.GetFloat("BW"); err != nil || f != -64 {
		t.Errorf("GetFloat(BW) = %v, %v", f, err)
	}
	if n, err := h.Size(); err != nil || n != 4096 {
		t.Errorf("Size = %d, %v", n, err)
	}
	if _, err := h.GetInt("NOPE"); !errors.Is(err, ErrHeader) {
		t.Errorf("GetInt(NOPE) err = %v", err)
	}
}

func TestHeaderSetLikeC(t *testing.T) {
	h := ParseHeader([]byte("HDR_SIZE 4096\nFREQ 1400 # MHz\nDATA\n"))
	if err := h.Set("FREQ", "1382.5"); err != nil {
		t.Fatal(err)
	}
	if err := h.SetInt("OBS_OFFSET", 123); err != nil {
		t.Fatal(err)
	}
	// ascii_header_set: "%-12s %-20s   " then the rest of the old line from
	// its '#'; new keys go before "DATA"
	want := "HDR_SIZE 4096\n" +
		"FREQ         1382.5" + strings.Repeat(" ", 14+3) + "# MHz\n" +
		"OBS_OFFSET   123" + strings.Repeat(" ", 17+3) + "\nDATA\n"
	if got := h.String(); got != want {
		t.Fatalf("after Set:\n%q\nwant\n%q", got, want)
	}
	h2 := NewHeader(4096)
	h2.Set("SOURCE", "B0329+54")
	if got := h2.String(); got != "HDR_SIZE     4096"+strings.Repeat(" ", 19)+"\nSOURCE       B0329+54"+strings.Repeat(" ", 15)+"\n" {
		t.Fatalf("NewHeader+Set: %q", got)
	}
	if !h2.Del("HDR_SIZE") || h2.Del("HDR_SIZE") {
		t.Fatal("Del")
	}
	if _, err := h2.Size(); !errors.Is(err, ErrHeader) {
		t.Fatalf("Size without HDR_SIZE: %v", err)
	}
	if err := h2.Set("BAD KEY", "x"); !errors.Is(err, ErrHeader) {
		t.Fatalf("Set with a space in the key: %v", err)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := testHeader(t)
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = 0xff
	}
	if err := h.Encode(buf); err != nil {
		t.Fatal(err)
	}
	h2 := ParseHeader(buf)
	if diff := cmp.Diff(h.String(), h2.String()); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(h.Keys(), h2.Keys()); diff != "" {
		t.Fatal(diff)
	}
	if err := h.Validate(4096); err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(2048); !errors.Is(err, ErrHeader) || !strings.Contains(err.Error(), "at least 4096 bytes (Config.HeaderSize)") {
		t.Fatalf("Validate(2048) = %v", err)
	}
	big := NewHeader(64)
	big.Set("COMMENT", string(bytes.Repeat([]byte("x"), 100)))
	if err := big.Validate(4096); !errors.Is(err, ErrHeader) {
		t.Fatalf("oversized text: %v", err)
	}
}

func TestHeaderThroughRing(t *testing.T) {
	h := newHDU(t, Config{NBufs: 2, BufSize: 4096})
	rh, _ := Connect(h.Key(), AttachOptions{})
	defer rh.Detach()
	r, err := rh.OpenReader(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	hdr := testHeader(t)
	transfer(t, h, hdr, []byte("x"), 1)
	got, data := readOne(t, r)
	if diff := cmp.Diff(hdr.String(), got.String()); diff != "" || string(data) != "x" {
		t.Fatalf("header through the ring (-want +got):\n%s", diff)
	}
	// writing without HDR_SIZE is refused
	w, _ := h.OpenWriter(testCtx(t), WriterOptions{})
	defer w.Close()
	noSize := ParseHeader([]byte("SOURCE x\n"))
	if err := w.WriteHeader(noSize); !errors.Is(err, ErrHeader) {
		t.Fatalf("header without HDR_SIZE: %v", err)
	}
	if _, err := w.Write([]byte("data")); !errors.Is(err, ErrState) {
		t.Fatalf("data before the header: %v", err)
	}
}

func FuzzParseHeader(f *testing.F) {
	b, err := os.ReadFile("testdata/header.dada")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, "SOURCE", "x y")
	f.Add([]byte("HDR_SIZE 4096\nDATA\n"), "FREQ", "1")
	f.Add([]byte("KEY\\KEY value\x00junk"), "KEY", "")
	f.Add([]byte("HDR_SIZE 4096\nSOURCE J0437-4715 # pulsar\nDATA\n"), "SOURCE", "B1937+21")
	f.Add([]byte("X 0\nAB 2\nA\t1\n"), "A", "3 4")
	f.Add([]byte("NBIT 8\n"), "NPOL", "2")
	f.Fuzz(func(t *testing.T, text []byte, key, value string) {
		h := ParseHeader(text)
		h.Get(key)
		h.GetLine(key)
		h.GetInt(key)
		h.GetFloat(key)
		h.Size()
		h.Keys()
		if i := bytes.IndexByte(text, 0); i >= 0 {
			text = text[:i]
		}
		if !bytes.Equal(h.Bytes(), text) {
			t.Fatalf("ParseHeader kept %q of %q", h.Bytes(), text)
		}
		// A new key goes in front of the first "DATA\n" or at the end, as
		// in C: if that is not the start of a line, the new line joins the
		// one before (the property below is for the usual case).
		at := bytes.Index(text, []byte("DATA\n"))
		if at < 0 {
			at = len(text)
		}
		joins := h.find(key) < 0 && at > 0 && text[at-1] != '\n'
		others := map[string]string{} // other keys' lines before the Set
		if bytes.ContainsRune(text, '\\') || strings.ContainsRune(key+value, '\\') {
			others = nil // a key after a backslash matches inside another line, as in C
		}
		for _, k := range h.Keys() {
			if others == nil {
				break
			}
			// (a key whose line is key's own, as "AB" for key "A" at the
			// very start, is not another line)
			if k != key && h.find(k) != h.find(key) {
				others[k], _ = h.GetLine(k)
			}
		}
		if err := h.Set(key, value); err != nil {
			if key != "" && !strings.ContainsAny(key, " \t\n\x00#") && !strings.ContainsAny(value, "\n\x00") {
				t.Fatalf("Set(%q, %q): %v", key, value, err)
			}
			return
		}
		if joins {
			return
		}
		// Set then Get returns the value's first word, GetLine the value
		// (up to a comment), and setting it again changes nothing.
		got, ok := h.Get(key)
		fields := strings.Fields(value)
		if len(fields) > 0 && (!ok || got != fields[0]) {
			t.Fatalf("Set(%q, %q) on %q then Get = %q, %v", key, value, text, got, ok)
		}
		// The other keys keep their values.
		for k, v := range others {
			if got, _ := h.GetLine(k); got != v {
				t.Fatalf("Set(%q, %q) on %q changed %s from %q to %q", key, value, text, k, v, got)
			}
		}
		line, ok := h.GetLine(key)
		wantLine := value
		if i := strings.IndexByte(wantLine, '#'); i >= 0 {
			wantLine = wantLine[:i]
		}
		if !ok || line != strings.TrimSpace(wantLine) {
			t.Fatalf("Set(%q, %q) on %q then GetLine = %q, %v", key, value, text, line, ok)
		}
		if strings.Contains(value, "#") {
			return // the rest of the line from '#' is kept as a comment: a second Set keeps it too
		}
		before := string(h.Bytes())
		if err := h.Set(key, value); err != nil || string(h.Bytes()) != before {
			t.Fatalf("setting %q to %q again changed %q to %q (%v)", key, value, before, h.Bytes(), err)
		}
		buf := make([]byte, len(h.Bytes())+1)
		if err := h.Encode(buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ParseHeader(buf).Bytes(), h.Bytes()) {
			t.Fatal("encode/parse round trip changed the header")
		}
	})
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{1<<20 - 1, "1024.0 KiB"}, {1 << 20, "1.0 MiB"}, {3 << 29, "1.5 GiB"}, {1 << 40, "1024.0 GiB"},
	} {
		if got := FormatBytes(c.n); got != c.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
