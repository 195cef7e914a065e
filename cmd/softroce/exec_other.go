//go:build !unix

package main

import "errors"

func execProgram(path string, argv, env []string) error {
	return errors.New("softroce exec needs a Unix system")
}
