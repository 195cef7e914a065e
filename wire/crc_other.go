//go:build !amd64 || purego

package wire

import "hash/crc32"

const hasFold = false

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, crc32.IEEETable, p)
}

// crcCopy copies src into dst, which must be as long, and returns
// crcUpdate(crc, src).
func crcCopy(crc uint32, dst, src []byte) uint32 {
	copy(dst[:len(src)], src)
	return crc32.Update(crc, crc32.IEEETable, src)
}
