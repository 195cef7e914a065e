//go:build !unix

package main

import (
	"errors"
	"os"
)

func execProgram(path string, argv, env []string, view bool, stderr *os.File) error {
	return errors.New("softroce exec needs a Unix system")
}
