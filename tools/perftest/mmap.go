package perftest

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// mmapError is a failure of --mmap: line is perftest's message, which
// it prints on stdout (empty when perftest has none), why what to do.
type mmapError struct{ line, why string }

func (e *mmapError) Error() string {
	msg := "Couldn't allocate work buf." // perftest's, on stderr
	if e.why != "" {
		msg += " (" + e.why + ")"
	}
	return msg
}

// strerror is err's errno as C's strerror words it ("No such file or
// directory").
func strerror(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var en syscall.Errno
	s := err.Error()
	if errors.As(err, &en) {
		s = en.Error()
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// fill fills b as perftest's create_single_mr fills its buffers: random
// bytes, but zeros for write_lat (which polls for its last byte to change).
func fill(b []byte, zero bool) {
	if zero {
		clear(b)
		return
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for ; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}
