package main

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// bwResult is the result line of write_bw or tcp_bw.
type bwResult struct {
	Size    int
	Iters   uint64
	BWAvg   float64 // MB/sec as perftest prints it (2^20 bytes)
	MsgRate float64 // Mpps
}

// latResult is the result line of send_lat, write_lat or tcp_lat (usec).
type latResult struct {
	Size                   int
	Iters                  uint64
	Min, Max, Typical, Avg float64
}

// resultFields returns the fields of the line after perftest's result
// header (the first line containing marker).
func resultFields(out, marker string) ([]string, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, marker) && i+1 < len(lines) {
			return strings.Fields(lines[i+1]), nil
		}
	}
	return nil, fmt.Errorf("no result header %q in output", marker)
}

func parseFloats(f []string) ([]float64, error) {
	v := make([]float64, len(f))
	for i, s := range f {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("result field %d: %q is not a number", i+1, s)
		}
		v[i] = x
	}
	return v, nil
}

// parseBW reads a bandwidth test's result line.
func parseBW(out string) (bwResult, error) {
	f, err := resultFields(out, "BW average")
	if err != nil {
		return bwResult{}, err
	}
	if len(f) != 5 {
		return bwResult{}, fmt.Errorf("bandwidth result line has %d fields, want 5: %q", len(f), strings.Join(f, " "))
	}
	v, err := parseFloats(f)
	if err != nil {
		return bwResult{}, err
	}
	return bwResult{Size: int(v[0]), Iters: uint64(v[1]), BWAvg: v[3], MsgRate: v[4]}, nil
}

// parseLat reads a latency test's result line.
func parseLat(out string) (latResult, error) {
	f, err := resultFields(out, "t_typical")
	if err != nil {
		return latResult{}, err
	}
	if len(f) < 6 {
		return latResult{}, fmt.Errorf("latency result line has %d fields, want at least 6: %q", len(f), strings.Join(f, " "))
	}
	v, err := parseFloats(f[:6])
	if err != nil {
		return latResult{}, err
	}
	return latResult{Size: int(v[0]), Iters: uint64(v[1]), Min: v[2], Max: v[3], Typical: v[4], Avg: v[5]}, nil
}

var ppItersRE = regexp.MustCompile(`(?m)^(\d+) iters in [\d.]+ seconds = ([\d.]+) usec/iter$`)

// parsePingpong reads rc_pingpong's "N iters in S seconds = U usec/iter".
func parsePingpong(out string) (iters uint64, usec float64, err error) {
	m := ppItersRE.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, errors.New("no \"usec/iter\" line in output")
	}
	iters, _ = strconv.ParseUint(m[1], 10, 64)
	usec, err = strconv.ParseFloat(m[2], 64)
	return iters, usec, err
}

// demoResult is the speed table of softroce demo.
type demoResult struct {
	BW, TCPBW   float64 // GB/s (10^9 bytes)
	Lat, TCPLat float64 // half round trip, usec
}

var (
	demoBWRE  = regexp.MustCompile(`(?m)^bandwidth \(1 MiB RDMA WRITE\)\s+([\d.]+) GB/s\s+([\d.]+) GB/s`)
	demoLatRE = regexp.MustCompile(`(?m)^latency \(64 B SEND half-RTT\)\s+([\d.]+) us\s+([\d.]+) us`)
)

// parseDemo reads the bandwidth and latency lines of softroce demo.
func parseDemo(out string) (demoResult, error) {
	b, l := demoBWRE.FindStringSubmatch(out), demoLatRE.FindStringSubmatch(out)
	if b == nil || l == nil {
		return demoResult{}, errors.New("no bandwidth or latency line in demo output")
	}
	var d demoResult
	var err error
	for _, x := range []struct {
		s string
		p *float64
	}{{b[1], &d.BW}, {b[2], &d.TCPBW}, {l[1], &d.Lat}, {l[2], &d.TCPLat}} {
		if *x.p, err = strconv.ParseFloat(x.s, 64); err != nil {
			return demoResult{}, err
		}
	}
	return d, nil
}

// parseBench returns the metrics of each benchmark in go test -bench
// output (unit -> value: "MB/s", "cpu-us/MiB", ...), by name without the
// -GOMAXPROCS suffix.
func parseBench(out string) map[string]map[string]float64 {
	res := map[string]map[string]float64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				if res[name] == nil {
					res[name] = map[string]float64{}
				}
				res[name][f[i+1]] = v
			}
		}
	}
	return res
}

// parseStraceTotal returns the calls of the "total" line of strace -c.
func parseStraceTotal(out string) (uint64, error) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && f[len(f)-1] == "total" {
			return strconv.ParseUint(f[3], 10, 64)
		}
	}
	return 0, errors.New("no total line in strace -c output")
}

// parsePerfCount returns the count of the raw_syscalls:sys_enter line of
// perf stat -x, output ("count,unit,event,...").
func parsePerfCount(out string) (uint64, error) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, ",")
		if len(f) >= 3 && f[2] == "raw_syscalls:sys_enter" {
			return strconv.ParseUint(f[0], 10, 64)
		}
	}
	return 0, errors.New("no raw_syscalls:sys_enter count in perf stat output")
}

// parseLoadavg returns the 1-minute load average of /proc/loadavg.
func parseLoadavg(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, fmt.Errorf("loadavg %q: too few fields", s)
	}
	return strconv.ParseFloat(f[0], 64)
}

// parseSnmp returns the counters of one protocol ("Udp") of /proc/net/snmp
// (a header line of names, then a line of values).
func parseSnmp(s, proto string) (map[string]uint64, error) {
	var names []string
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		if len(f)-1 != len(names) {
			return nil, fmt.Errorf("snmp %s: %d names, %d values", proto, len(names), len(f)-1)
		}
		m := map[string]uint64{}
		for i, n := range names {
			v, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("snmp %s %s: %w", proto, n, err)
			}
			m[n] = v
		}
		return m, nil
	}
	return nil, fmt.Errorf("snmp: no %s lines", proto)
}

// median of xs (NaN-free); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pairedRatio is the median of a[i]/b[i] when a and b hold one value per
// round each, else the ratio of their medians.
func pairedRatio(a, b []float64) (float64, bool) {
	if len(a) == 0 || len(b) == 0 {
		return 0, false
	}
	if len(a) != len(b) {
		mb := median(b)
		return median(a) / mb, mb != 0
	}
	var r []float64
	for i := range a {
		if b[i] != 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return median(r), len(r) > 0
}

// parseStats sums, over the lines of a $SOFTROCE_STATS file (the tools'
// devices' counters, internal/toolkit's StatsEnv), each counter's values;
// other lines are skipped.
func parseStats(text string) map[string]uint64 {
	m := make(map[string]uint64)
	for _, line := range strings.Split(text, "\n") {
		_, rest, ok := strings.Cut(line, " counters:")
		if !ok || !strings.HasPrefix(line, "device ") {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				m[k] += n
			}
		}
	}
	return m
}
