package dada

// ReaderStats is the state of one reader slot.
type ReaderStats struct {
	State      State  // r_states[i]
	RBuf       uint64 // r_bufs[i]: count of the next buffer to read
	RXfer      uint64 // r_xfers[i]
	Full       int    // FULL semaphore: buffers ready for this reader
	Clear      int    // CLEAR semaphore: buffers released, not yet reused
	SODAck     int    // SODACK semaphore
	EODAck     int    // EODACK semaphore
	ReaderConn int    // READER_CONN: 1 when the slot is free
}

// Stats is a snapshot of a ring's shared state, read without locks (as
// dada_dbmonitor does).
type Stats struct {
	Key      Key
	NBufs    uint64
	BufSize  uint64
	NReaders int
	WState   State  // w_state
	WBufCurr uint64 // buffers marked filled since creation
	WBufNext uint64 // buffers opened since creation
	WXfer    uint64 // transfers ended since creation
	Write    int    // WRITE semaphore: 1 when no writer holds the lock
	Read     int    // READ semaphore: free reader locks
	Readers  []ReaderStats
}

// Stats reads a snapshot of the ring's shared state.
func (r *Ring) Stats() Stats {
	s := r.sync
	st := Stats{Key: r.key, NBufs: r.nbufs, BufSize: r.bufsz, NReaders: r.nreaders,
		WState: s.wState(), WBufCurr: s.get(offWBufCurr), WBufNext: s.get(offWBufNext), WXfer: s.get(offWXfer),
		Write: r.semval(r.semConn, semWrite), Read: r.semval(r.semConn, semRead)}
	for i := 0; i < r.nreaders; i++ {
		id := r.semData[i]
		st.Readers = append(st.Readers, ReaderStats{State: s.rState(i), RBuf: s.getAt(offRBufs, i), RXfer: s.getAt(offRXfers, i),
			Full: r.semval(id, semFull), Clear: r.semval(id, semClear), SODAck: r.semval(id, semSODAck),
			EODAck: r.semval(id, semEODAck), ReaderConn: r.semval(id, semReaderConn)})
	}
	return st
}

// MaxFull returns the largest FULL semaphore value over the ring's reader
// slots: the blocks filled and not yet read by the slowest reader. It is
// the Readers[i].Full of Stats without the rest of the snapshot: one
// semaphore read per reader and no allocation, for a writer that reports
// its ring's occupancy per block.
func (r *Ring) MaxFull() int {
	full := 0
	for i := 0; i < r.nreaders; i++ {
		full = max(full, r.semval(r.semData[i], semFull))
	}
	return full
}
