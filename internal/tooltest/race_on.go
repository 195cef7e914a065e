//go:build race

package tooltest

// RaceEnabled says the race detector is on. krping wlat spins on memory the engine writes (as krping
// does on DMA memory), which the race detector reports.
const RaceEnabled = true
