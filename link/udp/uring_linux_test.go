package udp

import (
	"testing"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
)

// withURing selects io_uring (tests and benchmarks).
func withURing(m uringMode) Option { return func(c *Config) { c.uring = m } }

// needURing skips t when the kernel gives no io_uring.
func needURing(t testing.TB) {
	t.Helper()
	e := listen(t, "127.0.0.1:0", withURing(uringOn))
	if !e.IOUring() {
		t.Skip("io_uring unavailable (io_uring_setup refused: old kernel, seccomp or kernel.io_uring_disabled)")
	}
}

func TestURingConformance(t *testing.T) {
	needURing(t)
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, mode := range []struct {
			name string
			opts []Option
		}{
			{"offload", []Option{withURing(uringOn)}},
			{"plain", []Option{withURing(uringOn), WithoutGSO(), WithoutGRO()}},
			{"zerocopy", []Option{withURing(uringZC)}},
		} {
			t.Run(addr+"/"+mode.name, func(t *testing.T) {
				linktest.Run(t, func(t testing.TB) (link.Endpoint, link.Endpoint) {
					return listen(t, addr, mode.opts...), listen(t, addr, mode.opts...)
				})
			})
		}
	}
}

// BenchmarkIOUring compares, on loopback with UDP GSO and GRO, the
// recvmmsg/sendmmsg path (mmsg) with io_uring RECVMSG/SENDMSG (uring) and
// io_uring with zero-copy sends (uring-zc), for 4 KiB and 1 KiB RoCE
// payloads in batches of 64. Compare figures of one run only: run with
// -count and alternate, e.g.
//
//	go test -run '^$' -bench IOUring -count 5 ./link/udp
func BenchmarkIOUring(b *testing.B) {
	needURing(b)
	for _, payload := range []int{4096, 1024} {
		for _, m := range []struct {
			name string
			mode uringMode
		}{{"mmsg", uringOff}, {"uring", uringOn}, {"uring-zc", uringZC}} {
			b.Run(m.name+"-"+itoa(payload/1024)+"k", func(b *testing.B) {
				benchBatched(b, 64, payload, withURing(m.mode))
			})
		}
	}
}
