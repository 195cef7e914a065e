package wire

// PSNMask keeps the low 24 bits of a packet sequence number.
const PSNMask = 0xFFFFFF

// PSNAdd returns psn + n modulo 2^24 (n may be negative).
func PSNAdd(psn uint32, n int) uint32 { return uint32(int64(psn)+int64(n)) & PSNMask }

// PSNDiff returns the signed distance a - b in the 24-bit PSN space, in
// [-2^23, 2^23): positive means a comes after b. This is rxe's psn_compare
// ((a-b)<<8 as a signed 32-bit value), scaled back to PSN units.
func PSNDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// PSNCompare returns -1, 0 or +1 as a is before, equal to or after b.
func PSNCompare(a, b uint32) int {
	d := PSNDiff(a, b)
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// PSNAfter reports whether a comes strictly after b.
func PSNAfter(a, b uint32) bool { return PSNDiff(a, b) > 0 }

// PSNBefore reports whether a comes strictly before b.
func PSNBefore(a, b uint32) bool { return PSNDiff(a, b) < 0 }
