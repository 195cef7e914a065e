package toolkit

import (
	"fmt"
	"os"
	"strings"

	"github.com/softroce/softroce/verbs"
)

// StatsEnv names a file to which every device a tool opens appends its
// non-zero counters when it closes, one line per device:
//
//	device NAME counters: RxPackets=123 RetryTimeouts=0 ...
//
// The speed table reads it (internal/speedtable's parseStats) to report
// retransmit timeouts; the tools' own output stays that of their C
// originals.
const StatsEnv = "SOFTROCE_STATS"

// appendStats appends d's counters to $SOFTROCE_STATS when it is set. A
// file that cannot be written is returned as an error naming the variable.
func appendStats(d *verbs.Device) error {
	name := os.Getenv(StatsEnv)
	if name == "" {
		return nil
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w; set it to a writable file or unset it", StatsEnv, err)
	}
	_, err = f.WriteString(StatsLine(d))
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
	var b strings.Builder
	fmt.Fprintf(&b, "device %s counters:", d.Name())
	d.Stats().Each(func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(&b, " %s=%d", name, v)
		}
	})
	b.WriteByte('\n')
	return b.String()
}
