//go:build race

package main

// raceEnabled: krping wlat spins on memory the engine writes (as krping
// does on DMA memory), which the race detector reports.
const raceEnabled = true
