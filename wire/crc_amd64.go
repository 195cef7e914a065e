//go:build !purego

package wire

import "hash/crc32"

// The ICRC's CRC-32 over payloads runs on AVX-512 carry-less multiplication
// (VPCLMULQDQ) where the processor and the operating system allow it: four
// 512-bit accumulators 256 bytes apart fold independently, where hash/crc32
// folds one 512-bit accumulator, whose multiply latency bounds its rate.
// The folded 16 bytes are reduced to the CRC register with two more
// multiplications and Barrett's method.

//go:noescape
func foldAVX512(s uint32, p *byte, n int) uint32

//go:noescape
func foldCopyAVX512(s uint32, dst, src *byte, n int) uint32

func cpuid(leaf, sub uint32) (a, b, c, d uint32)

func xgetbv0() uint32

// foldMin is the shortest input folded here; shorter ones go to hash/crc32.
const foldMin = 2048

var hasFold = detectFold()

// detectFold reports whether the processor has AVX-512F and VPCLMULQDQ and
// the operating system saves the AVX-512 registers (XCR0: SSE, AVX, opmask
// and both upper ZMM states).
func detectFold() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	if c1&(1<<27) == 0 { // OSXSAVE
		return false
	}
	if xgetbv0()&0xE6 != 0xE6 {
		return false
	}
	_, b7, c7, _ := cpuid(7, 0)
	return b7&(1<<16) != 0 && c7&(1<<10) != 0 // AVX512F, VPCLMULQDQ
}

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 {
	if len(p) == 0 {
		return crc // hash/crc32 would still pass through its sync.Once
	}
	if hasFold && len(p) >= foldMin {
		n := len(p) &^ 255
		crc = ^foldAVX512(^crc, &p[0], n)
		p = p[n:]
		if len(p) == 0 {
			return crc
		}
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}

// crcCopy copies src into dst, which must be as long, and returns
// crcUpdate(crc, src): one pass over src instead of two.
func crcCopy(crc uint32, dst, src []byte) uint32 {
	dst = dst[:len(src)]
	if hasFold && len(src) >= foldMin {
		n := len(src) &^ 255
		crc = ^foldCopyAVX512(^crc, &dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
		if len(src) == 0 {
			return crc
		}
	}
	copy(dst, src)
	return crc32.Update(crc, crc32.IEEETable, src)
}
