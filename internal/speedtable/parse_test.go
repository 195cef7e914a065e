package main

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	bwOut = "---------------------------------------------------------------------------------------\n" +
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 1048576    5800             0.00               1896.32\t\t   0.001896\n" +
		"---------------------------------------------------------------------------------------\n"
	latOut = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		" 64      5000          12.71          1059.23      40.68    \t       45.16       \t24.56  \t\t100.67  \t\t157.10 \n"
	demoOut = "measurement                            softroce          TCP    ratio\n" +
		"bandwidth (1 MiB RDMA WRITE)            2.23 GB/s    2.62 GB/s    0.85x\n" +
		"latency (64 B SEND half-RTT)           18.58 us      7.15 us    2.60x\n"
	straceOut = "% time     seconds  usecs/call     calls    errors syscall\n" +
		"------ ----------- ----------- --------- --------- ------------------\n" +
		" 47.58    0.377351         656       575        10 futex\n" +
		"  0.00    0.000000           0         1           execve\n" +
		"------ ----------- ----------- --------- --------- ------------------\n" +
		"100.00    0.793007          57     13691      1438 total\n"
	snmpOut = "Ip: Forwarding DefaultTTL\nIp: 1 64\n" +
		"Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n" +
		"Udp: 18431256 3783 0 18434960 7 0 0 0 0\n" +
		"UdpLite: InDatagrams NoPorts\nUdpLite: 0 0\n"
)

func TestParseBW(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      bwResult
		bad       bool
	}{
		{"write_bw", bwOut, bwResult{Size: 1048576, Iters: 5800, BWAvg: 1896.32, MsgRate: 0.001896}, false},
		{"tcp_bw", "                    TCP BW Test (kernel TCP over 127.0.0.1:5)\n" +
			" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
			" 4096       10544            0.00               3514.20\t\t   0.899635\n", bwResult{4096, 10544, 3514.20, 0.899635}, false},
		{"no header", " 1048576 5800 0.00 1896.32 0.001896\n", bwResult{}, true},
		{"header last", " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]", bwResult{}, true},
		{"short line", " #bytes  BW average[MB/sec]\n 1048576 5800\n", bwResult{}, true},
		{"not a number", " BW average[MB/sec]\n 1048576 5800 0.00 x 0.1\n", bwResult{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBW(tc.out)
			if (err != nil) != tc.bad || got != tc.want {
				t.Errorf("parseBW = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.bad)
			}
		})
	}
}

func TestParseLat(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      latResult
		bad       bool
	}{
		{"send_lat", latOut, latResult{64, 5000, 12.71, 1059.23, 40.68, 45.16}, false},
		{"no header", " 64 5000 12.71 1059.23 40.68 45.16\n", latResult{}, true},
		{"short", " t_typical[usec]\n 64 5000 12.71\n", latResult{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLat(tc.out)
			if (err != nil) != tc.bad || got != tc.want {
				t.Errorf("parseLat = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.bad)
			}
		})
	}
}

func TestParsePingpong(t *testing.T) {
	for _, tc := range []struct {
		out   string
		iters uint64
		usec  float64
		bad   bool
	}{
		{"640000 bytes in 0.44 seconds = 11.56 Mbit/sec\n5000 iters in 0.44 seconds = 88.60 usec/iter\n", 5000, 88.60, false},
		{"5000 iters in 0.44 seconds\n", 0, 0, true},
		{"", 0, 0, true},
	} {
		iters, usec, err := parsePingpong(tc.out)
		if (err != nil) != tc.bad || iters != tc.iters || usec != tc.usec {
			t.Errorf("parsePingpong(%q) = %d, %v, %v", tc.out, iters, usec, err)
		}
	}
}

func TestParseDemo(t *testing.T) {
	d, err := parseDemo(demoOut)
	if err != nil || d != (demoResult{2.23, 2.62, 18.58, 7.15}) {
		t.Errorf("parseDemo = %+v, %v", d, err)
	}
	if _, err := parseDemo("bandwidth (1 MiB RDMA WRITE)            2.23 GB/s    2.62 GB/s    0.85x\n"); err == nil {
		t.Error("parseDemo without a latency line: no error")
	}
}

func TestParseBench(t *testing.T) {
	out := "goos: linux\n" +
		"BenchmarkLoopback/batched-64-gso-gro-2         \t 1000000\t      1520 ns/op\t2810.36 MB/s\t       524.2 cpu-us/MiB\t    657846 pkts/s\t       0 B/op\t       0 allocs/op\n" +
		"BenchmarkLoopback/per-packet-2                 \t  300000\t      8000 ns/op\t 538.10 MB/s\n" +
		"BenchmarkLoopback/tcp-1MiB                     \t    4425\t    300442 ns/op\t3490.12 MB/s\t       367.4 cpu-us/MiB\n" +
		"BenchmarkOther                                 \t  300000\t      8000 ns/op\n" +
		"PASS\n"
	want := map[string]map[string]float64{
		"BenchmarkLoopback/batched-64-gso-gro": {"ns/op": 1520, "MB/s": 2810.36, "cpu-us/MiB": 524.2, "pkts/s": 657846, "B/op": 0, "allocs/op": 0},
		"BenchmarkLoopback/per-packet":         {"ns/op": 8000, "MB/s": 538.10},
		"BenchmarkLoopback/tcp-1MiB":           {"ns/op": 300442, "MB/s": 3490.12, "cpu-us/MiB": 367.4},
		"BenchmarkOther":                       {"ns/op": 8000},
	}
	if diff := cmp.Diff(want, parseBench(out)); diff != "" {
		t.Errorf("parseBench (-want +got):\n%s", diff)
	}
}

// TestParseSyscallCounts: the total of strace -c and the count of perf
// stat -x, (the two ways speedtable counts system calls).
func TestParseSyscallCounts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func(string) (uint64, error)
		out   string
		want  uint64
		bad   bool
	}{
		{"strace", parseStraceTotal, straceOut, 13691, false},
		{"strace", parseStraceTotal, "100.00    0.100000           5     20000           total\n", 20000, false},
		{"strace", parseStraceTotal, "% time     seconds  usecs/call     calls    errors syscall\n", 0, true},
		{"perf", parsePerfCount, "# started on Fri Nov 27 07:20:01 2026\n\n36263,,raw_syscalls:sys_enter,2500531434,100.00,,\n", 36263, false},
		{"perf", parsePerfCount, "8,,syscalls:sys_enter_read,2500531434,100.00,,\n36263,,raw_syscalls:sys_enter,1,100.00,,\n", 36263, false},
		{"perf", parsePerfCount, "<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n", 0, true},
		{"perf", parsePerfCount, "", 0, true},
	} {
		got, err := tc.parse(tc.out)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%s: parse(%q) = %d, %v", tc.name, tc.out, got, err)
		}
	}
}

func TestParseLoadavg(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		bad  bool
	}{
		{"1.64 1.48 1.00 3/143 32103\n", 1.64, false},
		{"0.00 0.01 0.05 1/90 7", 0, false},
		{"1.64", 0, true},
		{"x 1 2 3/4 5", 0, true},
	} {
		got, err := parseLoadavg(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseLoadavg(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestParseSnmp(t *testing.T) {
	m, err := parseSnmp(snmpOut, "Udp")
	if err != nil || m["RcvbufErrors"] != 7 || m["InDatagrams"] != 18431256 {
		t.Errorf("parseSnmp Udp = %v, %v", m, err)
	}
	if _, err := parseSnmp(snmpOut, "Tcp"); err == nil {
		t.Error("parseSnmp Tcp: no error without Tcp lines")
	}
	if _, err := parseSnmp("Udp: A B\nUdp: 1\n", "Udp"); err == nil {
		t.Error("parseSnmp: no error for a short value line")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPairedRatio(t *testing.T) {
	for _, tc := range []struct {
		a, b []float64
		want float64
		ok   bool
	}{
		{nil, []float64{1}, 0, false},
		{[]float64{1, 4, 9}, []float64{2, 2, 3}, 2, true}, // ratios 0.5, 2, 3
		{[]float64{1, 2}, []float64{4}, 0.375, true},      // medians 1.5 / 4
		{[]float64{1}, []float64{0}, 0, false},
	} {
		got, ok := pairedRatio(tc.a, tc.b)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("pairedRatio(%v, %v) = %v, %v; want %v, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseStats(t *testing.T) {
	text := "device 127.0.0.2 counters: TxPackets=7 RetryTimeouts=3\n" +
		"something else: RetryTimeouts=100\n" +
		"device 127.0.0.1 counters: RetryTimeouts=2 Bad=x\n"
	got := parseStats(text)
	want := map[string]uint64{"TxPackets": 7, "RetryTimeouts": 5}
	if len(got) != len(want) || got["TxPackets"] != 7 || got["RetryTimeouts"] != 5 {
		t.Errorf("parseStats = %v, want %v", got, want)
	}
}
