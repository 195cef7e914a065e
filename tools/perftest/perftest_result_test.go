package perftest

import (
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/oob"
)

// TestPerftestResultRequired: a run without measured iterations has no
// result line to print (ptRun then fails instead of printing zeros).
func TestPerftestResultRequired(t *testing.T) {
	bw, lat := ptTools[1], ptTools[4] // write_bw, send_lat
	for _, tc := range []struct {
		tool ptTool
		dur  int
		res  ptResult
		want bool
	}{
		{bw, 0, ptResult{bw: oob.BWReport{Iters: 5000}}, true},
		{bw, 0, ptResult{}, false},
		{bw, 5, ptResult{}, false},
		{lat, 0, ptResult{lat: []time.Duration{time.Microsecond}}, true},
		{lat, 0, ptResult{}, false},
		{lat, 5, ptResult{latIter: 10, latAvg: time.Microsecond}, true},
		{lat, 5, ptResult{}, false},
	} {
		c := &ptConfig{tool: tc.tool, duration: tc.dur}
		if got := c.hasResult(tc.res); got != tc.want {
			t.Errorf("%s -D %d %+v: hasResult %v, want %v", tc.tool.name, tc.dur, tc.res, got, tc.want)
		}
	}
}

func TestProgressOnlyOnTerminal(t *testing.T) {
	var b strings.Builder
	c := &ptConfig{duration: 10, iters: 5}
	p := newPtProgress(c, &b)
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
