//go:build race

package cm

// raceEnabled says the race detector is on: it slows the CM's handling of
// each MAD several times over, which the flood tests' rates allow for.
const raceEnabled = true
