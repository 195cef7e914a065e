package tooltest

import (
	"strconv"
	"testing"
)

// CapturesDir holds the real tools' reference captures, as seen from a
// package two levels below the module root.
const CapturesDir = "../../testdata/captures"

// Atoi is strconv.Atoi failing the test on error.
func Atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
