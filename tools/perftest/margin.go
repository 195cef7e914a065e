package perftest

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// defDuration is perftest's -D when none is given (DEF_DURATION): it
// still bounds -f in iterations mode, where perftest checks the two.
const defDuration = 5

func durationOrDefault(d int) int {
	if d <= 0 {
		return defDuration
	}
	return d
}

// effectiveMargin returns the margin of a run of duration seconds given -f
// (negative: not given): perftest's default, a quarter of -D rounded down,
// for a -D run without -f; else margin as given.
func effectiveMargin(duration, margin int) int {
	if duration > 0 && margin < 0 {
		return duration / 4
	}
	return margin
}

// marginFits reports whether margin (seconds; negative: not given) leaves
// time to measure in a run of duration seconds (0: iterations mode), by
// perftest's rule: DURATION > 2*MARGIN, with -D's default of 5 seconds in
// iterations mode.
func marginFits(duration, margin int) bool {
	return margin < 0 || durationOrDefault(duration) > 2*margin
}

// marginSampler counts the iterations of a -D run that complete inside
// perftest's measured period: from -f seconds after the start to -f
// seconds before the end of -D. The margins leave out the start (first
// touches of the buffers, the first window, the peer still setting up)
// and the end (QPs stopping one by one), as perftest does on both sides.
// A run without a margin does not use one: it counts every completion, up
// to the last.
type marginSampler struct {
	from, to time.Time
	iters    uint64
}

// sampler returns the sampler of a -D run that started at start, or nil
// when the run has no margin.
func (c *config) sampler(start time.Time) *marginSampler {
	if c.duration <= 0 || c.margin <= 0 {
		return nil
	}
	m := time.Duration(c.margin) * time.Second
	return &marginSampler{from: start.Add(m), to: start.Add(time.Duration(c.duration)*time.Second - m)}
}

// add counts n iterations completed at t, if t lies in the period.
func (s *marginSampler) add(t time.Time, n uint64) {
	if !t.Before(s.from) && t.Before(s.to) {
		s.iters += n
	}
}

// result returns the iterations counted and the period's length in seconds.
func (s *marginSampler) result() (uint64, float64) {
	return s.iters, s.to.Sub(s.from).Seconds()
}

// durationLat is the outcome of a -D latency run that started at start
// and completed n iterations: the average over the measured period (smp;
// nil: the whole run).
func durationLat(smp *marginSampler, start time.Time, n uint64) (latRun, error) {
	d := time.Since(start)
	if smp != nil {
		var secs float64
		n, secs = smp.result()
		d = time.Duration(secs * float64(time.Second))
	}
	if n == 0 {
		return latRun{}, errors.New("no iteration completed within the duration's measured period: " +
			"give a longer -D or a shorter -f (the period is -D less -f at each end)")
	}
	return latRun{avg: d / time.Duration(n), iters: n, period: d}, nil
}

// cpuUsage is perftest's --cpu_util: the share of all processors' time spent
// in user mode over a -D run's measured period, from the first line of
// /proc/stat (user against user plus idle, as perftest computes it; 0
// where /proc/stat cannot be read). A nil *cpuUsage reports 0.
type cpuUsage struct {
	mu     sync.Mutex
	user   [2]uint64
	idle   [2]uint64
	have   [2]bool
	timers [2]*time.Timer
}

// cpuSampler returns the CPU sampler of a -D run that started at start, or
// nil without --cpu_util.
func (c *config) cpuSampler(start time.Time) *cpuUsage {
	if !c.cpuUtil || c.duration <= 0 {
		return nil
	}
	m := time.Duration(max(c.margin, 0)) * time.Second
	p := &cpuUsage{}
	ends := [2]time.Time{start.Add(m), start.Add(time.Duration(c.duration)*time.Second - m)}
	for i, at := range ends {
		p.timers[i] = time.AfterFunc(time.Until(at), func() { p.take(i) })
	}
	return p
}

func (p *cpuUsage) take(i int) {
	user, idle, ok := procStat()
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok && !p.have[i] {
		p.user[i], p.idle[i], p.have[i] = user, idle, true
	}
}

// util stops the sampler and returns the period's utilisation in percent.
// A run that ended before its period's end (-D up, the QPs flushed) is
// sampled now.
func (p *cpuUsage) util() float64 {
	if p == nil {
		return 0
	}
	for _, t := range p.timers {
		if t != nil {
			t.Stop()
		}
	}
	p.mu.Lock()
	started := p.have[0]
	p.mu.Unlock()
	if started {
		p.take(1)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.have[0] || !p.have[1] {
		return 0
	}
	du, di := float64(p.user[1]-p.user[0]), float64(p.idle[1]-p.idle[0])
	if du+di <= 0 {
		return 0
	}
	return du / (du + di) * 100
}

// procStat reads the user and idle times of /proc/stat's "cpu" line.
func procStat() (user, idle uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	return parseProcStat(bufio.NewReader(f))
}

func parseProcStat(r *bufio.Reader) (user, idle uint64, ok bool) {
	line, _ := r.ReadString('\n')
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	user, err1 := strconv.ParseUint(f[1], 10, 64)
	idle, err2 := strconv.ParseUint(f[4], 10, 64)
	return user, idle, err1 == nil && err2 == nil
}
