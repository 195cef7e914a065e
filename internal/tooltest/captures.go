package tooltest

import (
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// ModuleRoot is the module's root directory, found from this file's place
// in it, so that a test finds the shared test data at any depth.
var ModuleRoot = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}()

// CapturesDir holds the real tools' reference captures.
var CapturesDir = filepath.Join(ModuleRoot, "testdata", "captures")

// Atoi is strconv.Atoi failing the test on error.
func Atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
