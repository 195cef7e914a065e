//go:build linux && cgo && softroce_capi

package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
)

// envCPUProfile names the file the library writes a Go CPU profile of the
// program's run to (go tool pprof FILE), as SOFTROCE_CPUPROFILE does for
// the Go tools; "%p" in it becomes the process ID, so that a server and a
// client each write their own. The profile ends when the program exits
// (exit or return from main) or is stopped by SIGINT or SIGTERM.
const envCPUProfile = "SOFTROCE_CPUPROFILE"

// envTrace names the file the library writes a Go execution trace of the
// program's run to (go tool trace FILE), as SOFTROCE_TRACE does for the Go
// tools, with "%p" and its end as envCPUProfile's. The program's threads
// show in it while they run the library's Go code.
const envTrace = "SOFTROCE_TRACE"

var profile struct {
	once     sync.Once
	cpu, trc *os.File
}

func init() {
	profile.cpu = startProfile(envCPUProfile, pprof.StartCPUProfile)
	profile.trc = startProfile(envTrace, trace.Start)
	if profile.cpu != nil || profile.trc != nil {
		onExit(stopProfile)
	}
}

// startProfile creates the file the environment variable env names and
// starts writing to it; nil when env is unset or on a failure (one line
// on stderr).
func startProfile(env string, start func(io.Writer) error) *os.File {
	name := os.Getenv(env)
	if name == "" {
		return nil
	}
	name = strings.ReplaceAll(name, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(name)
	if err == nil {
		err = start(f)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softroce: %s: %v\n", env, err)
		return nil
	}
	return f
}

// stopProfile ends the CPU profile and the trace (at exit, or on a
// signal).
func stopProfile() {
	profile.once.Do(func() {
		if profile.cpu != nil {
			pprof.StopCPUProfile()
			profile.cpu.Close()
		}
		if profile.trc != nil {
			trace.Stop()
			profile.trc.Close()
		}
	})
}
