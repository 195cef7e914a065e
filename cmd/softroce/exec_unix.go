//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// execProgram replaces the process with the program; it returns only on
// failure. The device view is Linux's (mount namespaces).
func execProgram(path string, argv, env []string, view bool, stderr *os.File) error {
	return syscall.Exec(path, argv, env)
}
