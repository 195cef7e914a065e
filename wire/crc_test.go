package wire

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestCRCUpdate(t *testing.T) {
	t.Logf("AVX-512 folding: %v", hasFold)
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 20000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for _, n := range []int{0, 1, 63, 64, 255, 256, 511, 512, 1024, 2047, 2048, 2049, 2303, 2304, 4096, 4107, 4136, 8192 + 77, 20000} {
		for _, off := range []int{0, 1, 7} {
			if off+n > len(buf) {
				continue
			}
			p := buf[off : off+n]
			for _, init := range []uint32{0, 0xFFFFFFFF, 0x12345678} {
				want := crc32.Update(init, crc32.IEEETable, p)
				if got := crcUpdate(init, p); got != want {
					t.Errorf("crcUpdate(%#x, %d bytes at %d) = %#x, want %#x", init, n, off, got, want)
				}
				// The copy lands at another alignment, and not one byte past.
				dst := bytes.Repeat([]byte{0xEE}, n+9)
				if got := crcCopy(init, dst[3:3+n], p); got != want {
					t.Errorf("crcCopy(%#x, %d bytes at %d) = %#x, want %#x", init, n, off, got, want)
				}
				if !bytes.Equal(dst[3:3+n], p) || !bytes.Equal(dst[:3], []byte{0xEE, 0xEE, 0xEE}) ||
					!bytes.Equal(dst[3+n:], bytes.Repeat([]byte{0xEE}, 6)) {
					t.Errorf("crcCopy(%#x, %d bytes at %d): the copy differs from its source or spills", init, n, off)
				}
			}
		}
	}
}

func BenchmarkCRC(b *testing.B) {
	for _, n := range []int{1024, 4096, 65536} {
		p := make([]byte, n)
		b.Run("stdlib/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, crc32.IEEETable, p)
			}
		})
		b.Run("fold/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crcUpdate(0, p)
			}
		})
		dst := make([]byte, n)
		b.Run("fold+copy/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crcUpdate(0, p)
				copy(dst, p)
			}
		})
		b.Run("foldcopy/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crcCopy(0, dst, p)
			}
		})
	}
}

// FuzzCRCUpdate checks crcUpdate and crcCopy against hash/crc32.
func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 4096))
	f.Add(uint32(0xFFFFFFFF), bytes.Repeat([]byte{0x5A}, 2048+255))
	f.Fuzz(func(t *testing.T, init uint32, p []byte) {
		want := crc32.Update(init, crc32.IEEETable, p)
		if got := crcUpdate(init, p); got != want {
			t.Fatalf("crcUpdate(%#x, %d bytes) = %#x, want %#x", init, len(p), got, want)
		}
		dst := make([]byte, len(p))
		if got := crcCopy(init, dst, p); got != want || !bytes.Equal(dst, p) {
			t.Fatalf("crcCopy(%#x, %d bytes) = %#x (copy equal: %v), want %#x", init, len(p), got, bytes.Equal(dst, p), want)
		}
	})
}
