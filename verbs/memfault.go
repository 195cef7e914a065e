package verbs

import (
	"encoding/binary"
	"runtime/debug"

	"github.com/softroce/softroce/wire"
)

// Registered memory may be unmapped by its owner while registered (a C
// program's munmap, a truncated file mapping): the device's accesses to it
// go through these, which turn the fault into a false return, and so into
// the access error the work request or the peer sees (LOC_PROT_ERR, a
// remote access NAK), instead of a dead process (issue: a good guest in
// someone else's process). Each costs a deferred function, a few ns per
// copy, not per byte.

// isFault reports whether r, a recovered panic, is a memory fault that
// debug.SetPanicOnFault turned into a panic.
func isFault(r any) bool {
	_, ok := r.(interface{ Addr() uintptr })
	return ok
}

// memCopy copies src to dst; false if either faulted.
func memCopy(dst, src []byte) (ok bool) {
	defer faultToFalse(debug.SetPanicOnFault(true), &ok)
	copy(dst, src)
	return true
}

// memCopyChecked is memCopy of p's payload into dst (its length) that
// also checks the ICRC of the packet being dispatched if it was left for
// the copy (checkLate), in the same pass (wire.ICRCCache.VerifyICRCCopy);
// good reports the check (true if it was done already). The payload is
// copied either way. After a fault (ok false) the check has not run, and
// checkNow does it.
func (d *Device) memCopyChecked(dst []byte, p *wire.Packet) (ok, good bool) {
	defer faultToFalse(debug.SetPanicOnFault(true), &ok)
	if !d.rx.late {
		copy(dst, p.Payload)
		return true, true
	}
	lp := d.rx.lateLP
	b := lp.Bytes()
	off := len(b) - wire.ICRCLen - int(p.BTH.PadCnt) - len(p.Payload)
	_, good = d.rx.icrc.VerifyICRCCopy(lp.Src, lp.Dst, b, off, dst)
	d.rx.late = false // not reached if the copy faults
	if !good {
		d.stats.ICRCErrors.Add(1)
	}
	return true, good
}

// faultToFalse, deferred, restores the goroutine's panic-on-fault setting
// prev and turns a memory fault into *ok = false; any other panic goes on.
func faultToFalse(prev bool, ok *bool) {
	debug.SetPanicOnFault(prev)
	if r := recover(); r != nil {
		if !isFault(r) {
			panic(r)
		}
		*ok = false
	}
}

// memAtomic runs an 8-byte compare-and-swap (cas) or fetch-and-add on b and
// returns the original value; ok is false if b faulted.
func memAtomic(b []byte, cas bool, compare, swapAdd uint64) (orig uint64, ok bool) {
	defer faultToFalse(debug.SetPanicOnFault(true), &ok)
	orig = binary.NativeEndian.Uint64(b)
	if cas {
		if orig == compare {
			binary.NativeEndian.PutUint64(b, swapAdd)
		}
	} else {
		binary.NativeEndian.PutUint64(b, orig+swapAdd)
	}
	return orig, true
}
