package verbs

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
)

// MWType is a memory window's type (enum ibv_mw_type values).
type MWType uint8

// Memory window types. Type 1 windows are PD-scoped and bound with
// QP.BindMW; type 2 windows (rxe's type 2B) are QP-scoped and bound by a
// WRBindMW send work request whose RKey the consumer chooses (new key8).
const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

// String returns "type 1" or "type 2".
func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type 1"
	case MWType2:
		return "type 2"
	}
	return "MWType(?)"
}

// MW index range: above the MRs' (docs/protocol.md §7.1: the index tells an MR
// key from an MW key).
const (
	minMWIndex = maxMRIndex + 1
	maxMWIndex = 1<<20 - 1
	// MaxMW is the number of memory windows a device supports.
	MaxMW = maxMWIndex - minMWIndex + 1
)

// mwAccessMask are the access flags a window may carry (ibv_mw_bind_info.mw_access_flags).
const mwAccessMask = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessZeroBased

// MWBindInfo describes a binding (struct ibv_mw_bind_info): the window
// covers [Addr, Addr+Length) of MR (in the MR's address space) with the
// remote Access given. With AccessZeroBased (type 2 only) remote addresses
// through the window start at 0; otherwise they are the MR addresses.
// A type 1 bind with Length 0 (MR may be nil) unbinds the window.
type MWBindInfo struct {
	// MR is the region the window exposes part of.
	MR *MR
	// Addr and Length are the window's range in the MR's address space.
	Addr   uint64
	Length uint64
	// Access is the remote access the window grants.
	Access Access
}

// MWBind is a type 1 bind request (struct ibv_mw_bind).
type MWBind struct {
	// WRID is the caller's identifier, returned in the bind's completion.
	WRID uint64
	// Flags are the send flags of the bind (SendSignaled, SendFence).
	Flags SendFlags
	// BindInfo is what to bind the window to.
	BindInfo MWBindInfo
}

type mwState uint8

const (
	mwInvalid mwState = iota // deallocated
	mwFree                   // type 2, not bound
	mwValid                  // type 1 always; type 2 bound
)

// MW is a memory window (struct ibv_mw): a remotely accessible view of part
// of an MR with its own R_Key, access and lifetime. Remote access through a
// window checks the window (key, state, PD, access, QP for type 2, range),
// then the MR under it (state, range).
type MW struct {
	dev   *Device
	pd    *PD
	typ   MWType
	index uint32

	mu     sync.RWMutex
	state  mwState
	key    uint32 // the key remote access must carry
	rkey   uint32 // ibv_mw.rkey: key, or the key of a type 1 bind posted but not yet executed
	mr     *MR
	access Access
	addr   uint64 // first remote address of the window
	mrAddr uint64 // MR address of the window's first byte
	length uint64
	qp     *QP // type 2: the QP it was bound through
}

// Type returns the window type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// RKey returns the window's remote key (ibv_mw.rkey). As ibv_bind_mw(3)
// says, QP.BindMW sets it to the new key when it posts the bind; if the
// bind then fails (WCMWBindErr) the old key stays in force and RKey returns
// it again. A type 2 window takes the key its WRBindMW carries when the
// bind executes.
func (mw *MW) RKey() uint32 { mw.mu.RLock(); defer mw.mu.RUnlock(); return mw.rkey }

// Bound reports whether the window is bound to an MR.
func (mw *MW) Bound() bool {
	mw.mu.RLock()
	defer mw.mu.RUnlock()
	return mw.state == mwValid && mw.mr != nil
}

// IncRKey returns key with its low 8 bits (key8) incremented, as
// ibv_inc_rkey: the key to give the next bind of a window.
func IncRKey(key uint32) uint32 { return key&^0xFF | (key+1)&0xFF }

// AllocMW allocates a memory window (ibv_alloc_mw). A type 1 window starts
// valid but unbound; a type 2 window starts free (unusable until bound).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, newErr("alloc mw", "window type must be MWType1 or MWType2", syscall.EINVAL)
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	d := pd.dev
	mw := &MW{dev: d, pd: pd, typ: typ, state: mwFree}
	if typ == MWType1 {
		mw.state = mwValid
	}
	d.keys.mu.Lock()
	var idx uint32
	if n := len(d.keys.mwFree); n > 0 {
		idx = d.keys.mwFree[n-1]
		d.keys.mwFree = d.keys.mwFree[:n-1]
	} else {
		if d.keys.mws.next >= MaxMW {
			d.keys.mu.Unlock()
			pd.unref()
			return nil, newErr("alloc mw", "memory window table full: deallocate windows first", syscall.ENOMEM)
		}
		idx = d.keys.mws.next
		d.keys.mws.next++
	}
	mw.index = idx + minMWIndex
	mw.key = mw.index<<8 | uint32(rand.IntN(256))
	mw.rkey = mw.key
	d.keys.mws.set(idx, mw)
	d.keys.mu.Unlock()
	d.stats.MWs.Add(1)
	return mw, nil
}

// Dealloc frees the window (ibv_dealloc_mw). A bound window is unbound
// first; afterwards its R_Key gets remote access errors. Like Invalidate it
// waits for remote accesses in progress through the window.
func (mw *MW) Dealloc() error {
	mw.mu.Lock()
	if mw.state == mwInvalid {
		mw.mu.Unlock()
		return newErr("dealloc mw", "already deallocated", syscall.EINVAL)
	}
	old := mw.unbindLocked()
	mw.state = mwInvalid
	mw.mu.Unlock()
	drainMR(old)
	d := mw.dev
	d.keys.mu.Lock()
	if d.keys.mws.get(mw.index-minMWIndex) == mw {
		d.keys.mws.set(mw.index-minMWIndex, nil)
		d.keys.mwFree = append(d.keys.mwFree, mw.index-minMWIndex)
	}
	d.keys.mu.Unlock()
	mw.pd.unref()
	d.stats.MWs.Add(^uint64(0))
	return nil
}

// unbindLocked detaches the window from its MR and returns the MR.
func (mw *MW) unbindLocked() *MR {
	mr := mw.mr
	if mr != nil {
		mr.mu.Lock()
		mr.numMW--
		mr.mu.Unlock()
	}
	mw.mr, mw.qp, mw.length, mw.addr, mw.mrAddr, mw.access = nil, nil, 0, 0, 0, 0
	return mr
}

// drainMR waits for accesses in progress on mr (they hold its read lock).
func drainMR(mr *MR) {
	if mr != nil {
		mr.mu.Lock()
		//lint:ignore SA2001 the empty critical section is the barrier
		mr.mu.Unlock()
	}
}

func (d *Device) lookupMW(key uint32) *MW {
	idx := key >> 8
	if idx < minMWIndex || idx > maxMWIndex {
		return nil
	}
	return d.keys.mws.get(idx - minMWIndex)
}

// BindMW binds a type 1 window (ibv_bind_mw): it posts a bind work request
// on qp and returns the window's new R_Key, valid once the request has
// executed (in order with earlier work requests; its completion has opcode
// WCBindMW and, on failure, status WCMWBindErr with the QP moved to ERR).
func (qp *QP) BindMW(mw *MW, b MWBind) (uint32, error) {
	if mw == nil || mw.typ != MWType1 {
		return 0, newErr("bind mw", "BindMW binds type 1 windows; bind type 2 windows with a WRBindMW work request", syscall.EINVAL)
	}
	if mw.pd != qp.pd {
		return 0, newErr("bind mw", "window and QP are in different PDs", syscall.EINVAL)
	}
	bi := &b.BindInfo
	if bi.Length > 0 {
		if bi.MR == nil {
			return 0, newErr("bind mw", "bind with a length needs an MR", syscall.EINVAL)
		}
		if bi.MR.PD() != qp.pd {
			return 0, newErr("bind mw", "MR and QP are in different PDs", syscall.EINVAL)
		}
	}
	if bi.Access&AccessZeroBased != 0 {
		return 0, newErr("bind mw", "type 1 windows cannot be zero-based", syscall.EINVAL)
	}
	mw.mu.Lock()
	key := IncRKey(mw.rkey)
	old := mw.rkey
	mw.rkey = key // before posting: the bind may execute at once
	mw.mu.Unlock()
	wr := [1]SendWR{{WRID: b.WRID, Opcode: WRBindMW, Flags: b.Flags, MW: mw, RKey: key, BindInfo: *bi}}
	if _, err := qp.PostSend(wr[:]); err != nil {
		mw.mu.Lock()
		if mw.rkey == key {
			mw.rkey = old
		}
		mw.mu.Unlock()
		return 0, err
	}
	return key, nil
}

// checkBindWR validates a bind work request at post time.
func (qp *QP) checkBindWR(wr *SendWR) error {
	if wr.MW == nil || wr.MW.dev != qp.dev {
		return errBindNoMW
	}
	if wr.BindInfo.Access&^mwAccessMask != 0 {
		return errBindAccess
	}
	if wr.RKey>>8 != wr.MW.index {
		return errBindKey
	}
	return nil
}

// execBind runs a BIND_MW work request (docs/protocol.md §7.3; rxe_mw.c's checks). It
// returns false (MW_BIND_ERR) if the bind is not allowed.
func (qp *QP) execBind(wr *SendWR) bool {
	mw := wr.MW
	bi := &wr.BindInfo
	mw.mu.Lock()
	if mw.pd != qp.pd || wr.RKey>>8 != mw.index {
		mw.mu.Unlock()
		return false
	}
	mr := bi.MR
	switch mw.typ {
	case MWType1:
		if mw.state != mwValid || bi.Access&AccessZeroBased != 0 {
			mw.mu.Unlock()
			return false
		}
		if bi.Length == 0 {
			mr = nil
		}
	case MWType2:
		if mw.state != mwFree || mr == nil || bi.Length == 0 {
			mw.mu.Unlock()
			return false
		}
	}
	if mr != nil {
		mr.mu.Lock()
		ok := mr.valid && !mr.dereg && mr.pd == qp.pd && mr.access&AccessZeroBased == 0 &&
			mr.access&AccessMWBind != 0 &&
			(bi.Access&(AccessRemoteWrite|AccessRemoteAtomic) == 0 || mr.access&AccessLocalWrite != 0) &&
			bi.Addr >= mr.iova && bi.Length <= uint64(len(mr.buf)) && bi.Addr-mr.iova <= uint64(len(mr.buf))-bi.Length
		if !ok {
			mr.mu.Unlock()
			mw.mu.Unlock()
			return false
		}
		mr.numMW++
		mr.mu.Unlock()
	}
	old := mw.unbindLocked()
	mw.key, mw.rkey = wr.RKey, wr.RKey
	mw.state = mwValid
	if mr != nil {
		mw.mr, mw.access, mw.mrAddr, mw.length = mr, bi.Access, bi.Addr, bi.Length
		mw.addr = bi.Addr
		if bi.Access&AccessZeroBased != 0 {
			mw.addr = 0
		}
		if mw.typ == MWType2 {
			mw.qp = qp
		}
	}
	mw.mu.Unlock()
	drainMR(old)
	return true
}

// invalidate invalidates a type 2 window whose current key is key, bound
// in pd (LOCAL_INV, or SEND_WITH_INV received on remote, the QP it is
// bound to). Type 1 windows cannot be invalidated.
func (mw *MW) invalidate(pd *PD, key uint32, remote *QP) bool {
	if mw == nil {
		return false
	}
	mw.mu.Lock()
	if mw.typ != MWType2 || mw.state != mwValid || mw.key != key || mw.pd != pd || (remote != nil && mw.qp != remote) {
		mw.mu.Unlock()
		return false
	}
	old := mw.unbindLocked()
	mw.state = mwFree
	mw.mu.Unlock()
	drainMR(old)
	return true
}

// acquire resolves a remote access through the window: window checks
// first, then the MR's. It returns the MR read-locked (end with release)
// and the byte offset in it, or nil.
func (mw *MW) acquire(qp *QP, key uint32, va, n uint64, need Access) (*MR, int) {
	if mw == nil {
		return nil, 0
	}
	mw.mu.RLock()
	mr := mw.mr
	if mr == nil || mw.key != key || mw.state != mwValid || mw.pd != qp.pd ||
		(mw.typ == MWType2 && mw.qp != qp) || mw.access&need != need ||
		va < mw.addr || n > mw.length || va-mw.addr > mw.length-n {
		mw.mu.RUnlock()
		return nil, 0
	}
	mva := mw.mrAddr + (va - mw.addr)
	mr.mu.RLock()
	if !mr.valid || mr.dereg || mva < mr.iova || n > uint64(len(mr.buf)) || mva-mr.iova > uint64(len(mr.buf))-n {
		mr.mu.RUnlock()
		mw.mu.RUnlock()
		return nil, 0
	}
	if mr.region != nil {
		if _, err := mr.region.Enter(); err != nil {
			mr.mu.RUnlock()
			mw.mu.RUnlock()
			return nil, 0
		}
	}
	mw.mu.RUnlock()
	return mr, int(mva - mr.iova)
}

// rAcquire resolves a remote key (an MR's or a window's) for the responder.
func (qp *QP) rAcquire(key uint32, va, n uint64, need Access) (*MR, int) {
	if key>>8 <= maxMRIndex {
		return qp.dev.acquire(qp.pd, key, va, n, need)
	}
	return qp.dev.lookupMW(key).acquire(qp, key, va, n, need)
}

// mwTable maps window indices (minus minMWIndex) to windows, like mrTable.
type mwTable struct {
	chunks [(MaxMW + mrChunk - 1) / mrChunk]atomic.Pointer[[mrChunk]atomic.Pointer[MW]]
	next   uint32
}

func (t *mwTable) get(idx uint32) *MW {
	if idx >= MaxMW {
		return nil
	}
	c := t.chunks[idx/mrChunk].Load()
	if c == nil {
		return nil
	}
	return c[idx%mrChunk].Load()
}

func (t *mwTable) set(idx uint32, mw *MW) {
	c := t.chunks[idx/mrChunk].Load()
	if c == nil {
		c = new([mrChunk]atomic.Pointer[MW])
		t.chunks[idx/mrChunk].Store(c)
	}
	c[idx%mrChunk].Store(mw)
}
