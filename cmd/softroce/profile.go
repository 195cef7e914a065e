package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Profiling for any command, set in the environment so that every tool's flags
// stay those of its C original:
//
//	SOFTROCE_CPUPROFILE=FILE   write a CPU profile (go tool pprof FILE)
//	SOFTROCE_TRACE=FILE        write an execution trace (go tool trace FILE)
const (
	envCPUProfile = "SOFTROCE_CPUPROFILE"
	envTrace      = "SOFTROCE_TRACE"
)

// startProfiles starts what the environment asks for and returns the function
// that stops it and closes the files. A file that cannot be created is one
// line on stderr and ok false.
func startProfiles(stderr io.Writer) (stop func(), ok bool) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	open := func(env string) (*os.File, bool) {
		name := os.Getenv(env)
		if name == "" {
			return nil, true
		}
		f, err := os.Create(name)
		if err != nil {
			fmt.Fprintf(stderr, "softroce: %s: %v; set it to a writable file or unset it\n", env, err)
			return nil, false
		}
		return f, true
	}
	if f, good := open(envCPUProfile); !good {
		return stop, false
	} else if f != nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			fmt.Fprintf(stderr, "softroce: %s: %v\n", envCPUProfile, err)
			return stop, false
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if f, good := open(envTrace); !good {
		stop()
		return func() {}, false
	} else if f != nil {
		if err := trace.Start(f); err != nil {
			f.Close()
			stop()
			fmt.Fprintf(stderr, "softroce: %s: %v\n", envTrace, err)
			return func() {}, false
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, true
}
