package pipeline

import "testing"

func BenchmarkFillPattern(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		FillPattern(buf, uint64(i)<<20)
	}
}

func BenchmarkCheckPattern(b *testing.B) {
	buf := make([]byte, 1<<20)
	FillPattern(buf, 0)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		if CheckPattern(buf, 0) >= 0 {
			b.Fatal("mismatch")
		}
	}
}
