package perftest

import (
	"errors"
	"time"
)

// ptDefDuration is perftest's -D when none is given (DEF_DURATION): it
// still bounds -f in iterations mode, where perftest checks the two.
const ptDefDuration = 5

func ptDurationOrDefault(d int) int {
	if d <= 0 {
		return ptDefDuration
	}
	return d
}

// ptMargin returns the margin of a run of duration seconds given -f
// (negative: not given): perftest's default, a quarter of -D rounded down,
// for a -D run without -f; else margin as given.
func ptMargin(duration, margin int) int {
	if duration > 0 && margin < 0 {
		return duration / 4
	}
	return margin
}

// ptMarginFits reports whether margin (seconds; negative: not given) leaves
// time to measure in a run of duration seconds (0: iterations mode), by
// perftest's rule: DURATION > 2*MARGIN, with -D's default of 5 seconds in
// iterations mode.
func ptMarginFits(duration, margin int) bool {
	return margin < 0 || ptDurationOrDefault(duration) > 2*margin
}

// ptSampler counts the iterations of a -D run that complete inside
// perftest's measured period: from -f seconds after the start to -f
// seconds before the end of -D. The margins leave out the start (first
// touches of the buffers, the first window, the peer still setting up)
// and the end (QPs stopping one by one), as perftest does on both sides.
// A run without a margin does not use one: it counts every completion, up
// to the last.
type ptSampler struct {
	from, to time.Time
	iters    uint64
}

// sampler returns the sampler of a -D run that started at start, or nil
// when the run has no margin.
func (c *ptConfig) sampler(start time.Time) *ptSampler {
	if c.duration <= 0 || c.margin <= 0 {
		return nil
	}
	m := time.Duration(c.margin) * time.Second
	return &ptSampler{from: start.Add(m), to: start.Add(time.Duration(c.duration)*time.Second - m)}
}

// add counts n iterations completed at t, if t lies in the period.
func (s *ptSampler) add(t time.Time, n uint64) {
	if !t.Before(s.from) && t.Before(s.to) {
		s.iters += n
	}
}

// result returns the iterations counted and the period's length in seconds.
func (s *ptSampler) result() (uint64, float64) {
	return s.iters, s.to.Sub(s.from).Seconds()
}

// ptDurationLat is the outcome of a -D latency run that started at start
// and completed n iterations: the average over the measured period (smp;
// nil: the whole run).
func ptDurationLat(smp *ptSampler, start time.Time, n uint64) (ptLatRun, error) {
	d := time.Since(start)
	if smp != nil {
		var secs float64
		n, secs = smp.result()
		d = time.Duration(secs * float64(time.Second))
	}
	if n == 0 {
		return ptLatRun{}, errors.New("no iteration completed within the duration's measured period: " +
			"give a longer -D or a shorter -f (the period is -D less -f at each end)")
	}
	return ptLatRun{avg: d / time.Duration(n), iters: n}, nil
}
