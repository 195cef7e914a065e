//go:build race

package verbs

const raceEnabled = true
