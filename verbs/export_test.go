package verbs

// RaceEnabled tells the external tests (package verbs_test) whether the
// race detector is on: it makes allocation counts meaningless.
const RaceEnabled = raceEnabled
