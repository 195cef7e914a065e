package perftest

import (
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/oob"
)

// TestPerftestResultRequired: a run without measured iterations has no
// result line to print (runConfig then fails instead of printing zeros).
func TestPerftestResultRequired(t *testing.T) {
	bw, lat := tools[1], tools[4] // write_bw, send_lat
	for _, tc := range []struct {
		tool toolSpec
		dur  int
		res  sizeResult
		want bool
	}{
		{bw, 0, sizeResult{bw: oob.BWReport{Iters: 5000}}, true},
		{bw, 0, sizeResult{}, false},
		{bw, 5, sizeResult{}, false},
		{lat, 0, sizeResult{lat: []time.Duration{time.Microsecond}}, true},
		{lat, 0, sizeResult{}, false},
		{lat, 5, sizeResult{latIter: 10, latAvg: time.Microsecond}, true},
		{lat, 5, sizeResult{}, false},
	} {
		c := &config{tool: tc.tool, duration: tc.dur}
		if got := c.hasResult(tc.res); got != tc.want {
			t.Errorf("%s -D %d %+v: hasResult %v, want %v", tc.tool.name, tc.dur, tc.res, got, tc.want)
		}
	}
}

func TestProgressOnlyOnTerminal(t *testing.T) {
	var b strings.Builder
	c := &config{duration: 10, iters: 5}
	p := newProgress(c, &b)
	if p.on {
		t.Fatal("progress enabled on a pipe/buffer")
	}
	stop := p.run(func() uint64 { return 1 })
	stop()
	p.clear()
	if b.Len() != 0 {
		t.Fatalf("progress wrote %q to a non-terminal", b.String())
	}
}
