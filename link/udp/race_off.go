//go:build !race

package udp

// raceEnabled: built with the race detector (prefaultLane does not touch
// a writer's ring beside its writes there).
const raceEnabled = false
