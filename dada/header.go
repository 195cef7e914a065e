package dada

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Header is a PSRDADA ASCII header: "KEY value" lines, "#" comments, stored
// NUL-terminated at the start of a header block buffer. Lookups and edits
// follow ascii_header_get/ascii_header_set of src/ascii_header.c: a key
// matches at the start of the text or after a newline (or backslash) and
// must be followed by a space or tab; Set rewrites the line as the key padded
// to 12 columns, a space, the value padded to 20 columns and three spaces,
// keeping any trailing comment, and appends new keys before a "DATA" line if
// there is one (on a line of their own, where C joins them to "DATA"), else
// at the end.
type Header struct {
	text []byte // without the terminating NUL
}

// NewHeader returns a header containing only HDR_SIZE size.
func NewHeader(size int) *Header {
	h := &Header{}
	h.SetInt("HDR_SIZE", int64(size))
	return h
}

// ParseHeader parses a header from b, which may be a whole header buffer:
// the text ends at the first NUL byte. It does not require HDR_SIZE; see
// Size and Validate.
func ParseHeader(b []byte) *Header {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return &Header{text: append([]byte(nil), b...)}
}

// Bytes returns the header text (without a NUL terminator).
func (h *Header) Bytes() []byte { return h.text }

// String returns the header text.
func (h *Header) String() string { return string(h.text) }

// Clone returns a copy of h.
func (h *Header) Clone() *Header { return &Header{text: append([]byte(nil), h.text...)} }

// find returns the offset of keyword in the text, or -1 (ascii_header_find).
func (h *Header) find(key string) int {
	if key == "" {
		return -1
	}
	t := h.text
	off := 0
	for {
		i := bytes.Index(t[off:], []byte(key))
		if i < 0 {
			return -1
		}
		p := off + i
		if p == 0 {
			return 0
		}
		after := p + len(key)
		if (t[p-1] == '\n' || t[p-1] == '\\') && after < len(t) && (t[after] == ' ' || t[after] == '\t') {
			return p
		}
		off = p + 1
	}
}

// valueAt returns the text after the key at p, up to the end of its line.
func (h *Header) valueAt(p int) string {
	t := h.text[p:]
	if i := bytes.IndexByte(t, '\n'); i >= 0 {
		t = t[:i]
	}
	// skip the keyword to the first whitespace, as strcspn(key, " \t\n")
	i := bytes.IndexAny(t, " \t")
	if i < 0 {
		return ""
	}
	return string(t[i:])
}

// Get returns the first whitespace-separated word of key's value, as
// ascii_header_get with "%s" does.
func (h *Header) Get(key string) (string, bool) {
	p := h.find(key)
	if p < 0 {
		return "", false
	}
	f := strings.Fields(h.valueAt(p))
	if len(f) == 0 {
		return "", false
	}
	return f[0], true
}

// GetLine returns key's whole value up to a "#" comment or the end of the
// line, trimmed of surrounding whitespace.
func (h *Header) GetLine(key string) (string, bool) {
	p := h.find(key)
	if p < 0 {
		return "", false
	}
	v := h.valueAt(p)
	if i := strings.IndexByte(v, '#'); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v), true
}

// GetInt returns key's value as a signed integer ("%d"/PRIi64).
func (h *Header) GetInt(key string) (int64, error) {
	v, ok := h.Get(key)
	if !ok {
		return 0, fmt.Errorf("%w: no %s in header", ErrHeader, key)
	}
	n, err := strconv.ParseInt(leadingNumber(v, false), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not an integer", ErrHeader, key, v)
	}
	return n, nil
}

// GetUint returns key's value as an unsigned integer ("%"PRIu64).
func (h *Header) GetUint(key string) (uint64, error) {
	v, ok := h.Get(key)
	if !ok {
		return 0, fmt.Errorf("%w: no %s in header", ErrHeader, key)
	}
	n, err := strconv.ParseUint(leadingNumber(v, false), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not an unsigned integer", ErrHeader, key, v)
	}
	return n, nil
}

// GetFloat returns key's value as a floating-point number ("%lf").
func (h *Header) GetFloat(key string) (float64, error) {
	v, ok := h.Get(key)
	if !ok {
		return 0, fmt.Errorf("%w: no %s in header", ErrHeader, key)
	}
	f, err := strconv.ParseFloat(leadingNumber(v, true), 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a number", ErrHeader, key, v)
	}
	return f, nil
}

// leadingNumber returns the longest numeric prefix of s, as sscanf reads.
func leadingNumber(s string, float bool) string {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || float && (s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
		(s[i] == '-' || s[i] == '+') && (s[i-1] == 'e' || s[i-1] == 'E'))) {
		i++
	}
	return s[:i]
}

// Set sets key to value, as ascii_header_set does. Keys must not contain
// whitespace and values must not contain newlines.
func (h *Header) Set(key, value string) error {
	if key == "" || strings.ContainsAny(key, " \t\n\x00#") {
		return fmt.Errorf("%w: invalid key %q", ErrHeader, key)
	}
	if strings.ContainsAny(value, "\n\x00") {
		return fmt.Errorf("%w: value of %s contains a newline or NUL", ErrHeader, key)
	}
	line := fmt.Sprintf("%-12s %-20s   ", key, value)
	p := h.find(key)
	var rest []byte
	if p >= 0 {
		e := bytes.IndexAny(h.text[p:], "#\n")
		if e < 0 {
			e = len(h.text) - p
		}
		rest = append([]byte(nil), h.text[p+e:]...)
	} else if d := bytes.Index(h.text, []byte("DATA\n")); d >= 0 {
		// C inserts the new line in front of "DATA" without a newline of
		// its own, joining the two; keep DATA on its own line instead
		p = d
		rest = append([]byte{'\n'}, h.text[d:]...)
	} else {
		p = len(h.text)
	}
	t := append(h.text[:p:p], line...)
	if rest != nil {
		t = append(t, rest...)
	} else {
		t = append(t, '\n')
	}
	h.text = t
	return nil
}

// SetInt sets key to a decimal integer.
func (h *Header) SetInt(key string, v int64) error { return h.Set(key, strconv.FormatInt(v, 10)) }

// SetUint sets key to a decimal unsigned integer.
func (h *Header) SetUint(key string, v uint64) error { return h.Set(key, strconv.FormatUint(v, 10)) }

// Del removes key's line (ascii_header_del) and reports whether it was there.
func (h *Header) Del(key string) bool {
	p := h.find(key)
	if p < 0 {
		return false
	}
	e := bytes.IndexByte(h.text[p:], '\n')
	if e < 0 {
		h.text = h.text[:p]
	} else {
		h.text = append(h.text[:p], h.text[p+e+1:]...)
	}
	return true
}

// Keys returns the keys of the header's lines in order, skipping comments
// and blank lines.
func (h *Header) Keys() []string {
	var out []string
	for _, line := range strings.Split(string(h.text), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		out = append(out, f[0])
	}
	return out
}

// Size returns HDR_SIZE, the number of header bytes readers copy.
func (h *Header) Size() (int, error) {
	n, err := h.GetUint("HDR_SIZE")
	if err != nil {
		return 0, fmt.Errorf("%w: the header has no valid HDR_SIZE line; add one such as 'HDR_SIZE 4096'", ErrHeader)
	}
	if n == 0 || n > 1<<30 {
		return 0, fmt.Errorf("%w: HDR_SIZE %d is out of range", ErrHeader, n)
	}
	return int(n), nil
}

// Validate checks that the header has HDR_SIZE, that HDR_SIZE fits in a
// header buffer of bufSize bytes, and that the text with its NUL fits in
// HDR_SIZE bytes.
func (h *Header) Validate(bufSize int) error {
	n, err := h.Size()
	if err != nil {
		return err
	}
	if n > bufSize {
		return fmt.Errorf("%w: HDR_SIZE %d is larger than the ring's header buffers (%d bytes); lower HDR_SIZE or recreate the ring with header buffers of at least %d bytes (Config.HeaderSize)", ErrHeader, n, bufSize, n)
	}
	if len(h.text)+1 > n {
		return fmt.Errorf("%w: the header text is %d bytes, more than HDR_SIZE %d allows (with its NUL terminator)", ErrHeader, len(h.text), n)
	}
	return nil
}

// Encode writes the header into dst (a header buffer): the text, a NUL, and
// zeros up to len(dst).
func (h *Header) Encode(dst []byte) error {
	if len(h.text)+1 > len(dst) {
		return fmt.Errorf("%w: the header text is %d bytes, the buffer %d", ErrHeader, len(h.text), len(dst))
	}
	n := copy(dst, h.text)
	clear(dst[n:])
	return nil
}
