package verbs

// RaceEnabled tells the external tests (package verbs_test) whether the
// race detector is on: it makes allocation counts meaningless.
const RaceEnabled = raceEnabled

// budgetInFlight returns what the QP counts in the device's send budget.
func (qp *QP) budgetInFlight() int32 {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.req.counted
}
