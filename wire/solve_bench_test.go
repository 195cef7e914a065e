package wire

import "testing"

// BenchmarkSolveID: solving the IPv4 Identification of a full 4 KiB packet,
// tables hot.
func BenchmarkSolveID(b *testing.B) {
	z := 14 + 8 + 12 + 4096
	var sink uint16
	for i := 0; b.Loop(); i++ {
		id, _ := solveID(uint32(i)*2654435761, z)
		sink += id
	}
	_ = sink
}
