//go:build !race

package verbs

// raceEnabled reports a build with the race detector (racedetect_on.go).
const raceEnabled = false
