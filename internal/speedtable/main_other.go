//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "speedtable: Linux only (/proc, wait4's rusage, loopback 127.0.0.2)")
	os.Exit(1)
}
