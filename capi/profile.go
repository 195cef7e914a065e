//go:build linux && cgo && softroce_capi

package main

import (
	"fmt"
	"os"
	"runtime/pprof"
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

var profile struct {
	once sync.Once
	f    *os.File
}

func init() {
	name := os.Getenv(envCPUProfile)
	if name == "" {
		return
	}
	name = strings.ReplaceAll(name, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(name)
	if err == nil {
		err = pprof.StartCPUProfile(f)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softroce: %s: %v\n", envCPUProfile, err)
		return
	}
	profile.f = f
	onExit(stopProfile)
}

// stopProfile ends the CPU profile (at exit, or on a signal).
func stopProfile() {
	profile.once.Do(func() {
		if profile.f != nil {
			pprof.StopCPUProfile()
			profile.f.Close()
		}
	})
}
