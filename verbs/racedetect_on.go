//go:build race

package verbs

// raceEnabled reports a build with the race detector (go test -race).
// Such a build sends no payload zero-copy (Device.zc): the detector cannot
// see that the kernel has read a lent payload before the peer's
// acknowledgement lets the program reuse the memory (the order goes
// through the network), and reports the program's reuse against the
// reads of whichever goroutine sent the packet.
const raceEnabled = true
