package toolkit

import (
	"fmt"
	"os"
	"strings"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/verbs"
)

// StatsEnv names a file to which every device a tool opens appends its
// non-zero counters when it closes, one line per device (and, from the C
// library, one per CM agent, at close or when the program exits):
//
//	device NAME counters: RxPackets=123 RetryTimeouts=0 ...
//	cm NAME counters: MADsSent=12 Retransmits=1 ...
//
// The speed table reads it (internal/speedtable's parseStats) to report
// retransmit timeouts; the tools' own output stays that of their C
// originals.
const StatsEnv = "SOFTROCE_STATS"

// appendStats appends d's counters to $SOFTROCE_STATS when it is set. A
// file that cannot be written is returned as an error naming the variable.
func appendStats(d *verbs.Device) error { return AppendStats(StatsLine(d)) }

// AppendStats appends text (StatsLine and AgentStatsLine lines) to
// $SOFTROCE_STATS when it is set. A file that cannot be written is
// returned as an error naming the variable.
func AppendStats(text string) error {
	name := os.Getenv(StatsEnv)
	if name == "" {
		return nil
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w; set it to a writable file or unset it", StatsEnv, err)
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: writing %s: %w", StatsEnv, name, err)
	}
	return nil
}

// StatsLine formats d's non-zero counters as one line ending in a newline.
func StatsLine(d *verbs.Device) string {
	return counterLine("device", d.Name(), d.Stats().Each)
}

// AgentStatsLine formats the non-zero counters of a's CM agent on device
// d as one line ending in a newline:
//
//	cm NAME counters: MADsSent=12 Retransmits=1 ...
func AgentStatsLine(d *verbs.Device, a *cm.Agent) string {
	return counterLine("cm", d.Name(), a.Stats().Each)
}

func counterLine(kind, name string, each func(func(string, uint64))) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s counters:", kind, name)
	each(func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(&b, " %s=%d", name, v)
		}
	})
	b.WriteByte('\n')
	return b.String()
}
