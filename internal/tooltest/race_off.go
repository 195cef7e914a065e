//go:build !race

package tooltest

// RaceEnabled says the race detector is on.
const RaceEnabled = false
