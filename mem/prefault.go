package mem

// Prefault faults in the pages under b, for writing when write is set, the
// way ibv_reg_mr's pinning does: after it, the first access to the memory
// costs no page fault. softroce's transport touches a registered buffer on
// its receive loop, shared by every QP of a device; without it, the first
// touches of a large buffer happen there, and where a fault allocates a
// transparent huge page (THP "always") each one can stall the loop for
// milliseconds, long enough for a peer's retries to run out.
//
// A write prefault leaves the bytes as they are. It is best effort: it uses
// madvise(MADV_POPULATE_WRITE/READ) (Linux 5.14 and later), else mlock and
// munlock in pieces RLIMIT_MEMLOCK allows; it returns the error of the
// last way tried when none could be used, and does nothing on other
// operating systems (ErrNotSupported).
func Prefault(b []byte, write bool) error {
	if len(b) == 0 {
		return nil
	}
	return prefault(b, write)
}
