// Package memtest has helpers for testing code built on package mem:
// wrappers that hide a provider's optional capabilities, and counters of
// the process's open file descriptors and SysV shared memory segments for
// leak checks.
package memtest

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/softroce/softroce/mem"
)

// baseOnly exposes only the base Provider contract.
type baseOnly struct{ mem.Provider }

// BaseOnly wraps p so that only the base Provider methods are visible: the
// registry then treats it as a provider written before any optional
// capability existed.
func BaseOnly(p mem.Provider) mem.Provider { return baseOnly{p} }

// Renamed wraps p (base contract only) under another name, so one
// provider can be registered twice, e.g. to test resolution order.
func Renamed(p mem.Provider, name string) mem.Provider { return renamed{baseOnly{p}, name} }

type renamed struct {
	baseOnly
	name string
}

func (r renamed) Name() string { return r.name }

// OpenFDs returns the number of open file descriptors of the process, or
// -1 if /proc/self/fd cannot be read.
func OpenFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// ShmSegments returns the number of SysV shared memory segments in the
// system, or -1 if /proc/sysvipc/shm cannot be read.
func ShmSegments() int {
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		return -1
	}
	defer f.Close()
	n := -1 // header line
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.TrimSpace(s.Text()) != "" {
			n++
		}
	}
	return n
}

// Attached returns the number of attachments (nattch) of SysV segment id,
// or -1 if it is not listed.
func Attached(id int) int {
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	var hdr []string
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if hdr == nil {
			hdr = fields
			continue
		}
		var idv, natt string
		for i, h := range hdr {
			if i >= len(fields) {
				break
			}
			switch h {
			case "shmid":
				idv = fields[i]
			case "nattch":
				natt = fields[i]
			}
		}
		if idv == strconv.Itoa(id) {
			n, err := strconv.Atoi(natt)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
