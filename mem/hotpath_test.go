package mem_test

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/mem"
)

func hotRegion(tb testing.TB) *mem.Region {
	tb.Helper()
	g := mem.NewRegistry(mem.Options{})
	g.Register(mem.NewHeap(""))
	r, err := g.RegisterBytes(make([]byte, 64<<10), true)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// TestHotPathAllocs pins the per-packet accessors at zero allocations,
// including the failure paths after invalidation.
func TestHotPathAllocs(t *testing.T) {
	r := hotRegion(t)
	p := make([]byte, 1024)
	sum := 0
	fn := func(b []byte) error { sum += int(b[10]); return nil }
	cases := map[string]func(){
		"Enter/Exit": func() {
			if b, err := r.Enter(); err == nil {
				sum += int(b[0])
				r.Exit()
			}
		},
		"Access":      func() { r.Access(fn) },
		"ReadAt":      func() { r.ReadAt(p, 4096) },
		"WriteAt":     func() { r.WriteAt(p, 4096) },
		"FetchAdd":    func() { r.FetchAdd(8, 1) },
		"CompareSwap": func() { r.CompareSwap(16, 0, 1) },
		"ReadAt OOB":  func() { r.ReadAt(p, 1<<20) },
	}
	run := func(suffix string) {
		for name, f := range cases {
			if n := testing.AllocsPerRun(200, f); n != 0 {
				t.Errorf("%s%s: %v allocs per run", name, suffix, n)
			}
		}
	}
	run("")
	r.Invalidate(nil)
	if _, err := r.ReadAt(p, 0); !errors.Is(err, mem.ErrInvalidated) {
		t.Fatal(err)
	}
	run(" (invalidated)")
	r.Deregister()
	run(" (deregistered)")
}

func BenchmarkEnterExit(b *testing.B) {
	r := hotRegion(b)
	b.ReportAllocs()
	for b.Loop() {
		v, err := r.Enter()
		if err != nil {
			b.Fatal(err)
		}
		_ = v[0]
		r.Exit()
	}
}

func BenchmarkEnterExitParallel(b *testing.B) {
	r := hotRegion(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, err := r.Enter()
			if err != nil {
				b.Error(err)
				return
			}
			_ = v[0]
			r.Exit()
		}
	})
}

func BenchmarkAccess(b *testing.B) {
	r := hotRegion(b)
	b.ReportAllocs()
	n := 0
	fn := func(v []byte) error { n += int(v[0]); return nil }
	for b.Loop() {
		r.Access(fn)
	}
}

func BenchmarkWriteAt1K(b *testing.B) {
	r := hotRegion(b)
	p := make([]byte, 1024)
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		r.WriteAt(p, 2048)
	}
}

// FuzzRegionBounds checks that no offset/length reaches outside the view
// or panics.
func FuzzRegionBounds(f *testing.F) {
	f.Add(int64(0), uint16(0))
	f.Add(int64(4095), uint16(1))
	f.Add(int64(4096), uint16(1))
	f.Add(int64(-1), uint16(8))
	f.Add(int64(1<<62), uint16(8))
	g := mem.NewRegistry(mem.Options{})
	g.Register(mem.NewHeap(""))
	backing := make([]byte, 8192)
	r, err := g.RegisterBytes(backing[:4096], true)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, off int64, n uint16) {
		p := make([]byte, n)
		for i := range p {
			p[i] = 0xAA
		}
		_, werr := r.WriteAt(p, off)
		_, rerr := r.ReadAt(p, off)
		_, aerr := r.FetchAdd(off, 0)
		inside := off >= 0 && off+int64(n) <= 4096
		if (werr == nil) != inside || (rerr == nil) != inside {
			t.Fatalf("off %d n %d: write %v read %v", off, n, werr, rerr)
		}
		if aerr == nil && (off < 0 || off+8 > 4096) {
			t.Fatalf("atomic at %d accepted", off)
		}
		for i, c := range backing[4096:] {
			if c != 0 {
				t.Fatalf("byte %d past the region written", 4096+i)
			}
		}
	})
}
