package verbs

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softroce/softroce/mem"
)

// PD is a protection domain: MRs, QPs, SRQs and AHs of one PD work together.
type PD struct {
	dev    *Device
	handle uint32
	mu     sync.Mutex
	users  int // MRs, QPs, SRQs and AHs still allocated on it
	closed bool
}

// Device returns the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.dev }

// Handle returns the PD's number (unique per device).
func (pd *PD) Handle() uint32 { return pd.handle }

func (pd *PD) ref() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return newErr("pd", "protection domain is deallocated", syscall.EINVAL)
	}
	pd.users++
	return nil
}

func (pd *PD) unref() {
	pd.mu.Lock()
	pd.users--
	pd.mu.Unlock()
}

// Dealloc frees the PD. Like ibv_dealloc_pd it fails with EBUSY while MRs,
// QPs, SRQs or AHs still use it.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return newErr("dealloc pd", "already deallocated", syscall.EINVAL)
	}
	if pd.users > 0 {
		return newErr("dealloc pd", "PD still has MRs, QPs, SRQs or AHs: destroy them first", syscall.EBUSY)
	}
	pd.closed = true
	return nil
}

// MR is a registered memory region. Remote and local access by the device
// goes only through the device's MR table (key -> MR -> PD -> access ->
// bounds) under the MR's read lock; Deregister and Invalidate take it
// exclusively, so after they return the device never touches the memory again.
type MR struct {
	dev   *Device
	index uint32

	mu     sync.RWMutex
	pd     *PD
	buf    []byte
	iova   uint64
	access Access
	key    uint32 // lkey == rkey (user MRs, docs/protocol.md §7.1)
	valid  bool
	dereg  bool
	region *mem.Region // memory from a provider (nil: a plain []byte)
	numMW  int         // memory windows bound to the MR
	// ownRegion: the MR was registered through RegMem and deregisters region.
	ownRegion bool
	// lent counts packets built but not yet written whose payload is in
	// the MR's memory (zero-copy send, zc.go).
	lent atomic.Int32
}

// LKey returns the local key.
func (mr *MR) LKey() uint32 { mr.mu.RLock(); defer mr.mu.RUnlock(); return mr.key }

// RKey returns the remote key (equal to the local key, as rxe's user MRs).
func (mr *MR) RKey() uint32 { return mr.LKey() }

// Addr returns the address of the region's first byte in the region's own
// address space: 0 for zero-based MRs, otherwise the buffer's address. SGEs
// and remote RDMA addresses are Addr plus an offset.
func (mr *MR) Addr() uint64 { mr.mu.RLock(); defer mr.mu.RUnlock(); return mr.iova }

// Len returns the region's length in bytes.
func (mr *MR) Len() int { mr.mu.RLock(); defer mr.mu.RUnlock(); return len(mr.buf) }

// Access returns the access flags.
func (mr *MR) Access() Access { mr.mu.RLock(); defer mr.mu.RUnlock(); return mr.access }

// PD returns the protection domain.
func (mr *MR) PD() *PD { mr.mu.RLock(); defer mr.mu.RUnlock(); return mr.pd }

// Bytes returns the registered buffer.
func (mr *MR) Bytes() []byte { mr.mu.RLock(); defer mr.mu.RUnlock(); return mr.buf }

// Valid reports whether the region is usable (registered and not invalidated).
func (mr *MR) Valid() bool { mr.mu.RLock(); defer mr.mu.RUnlock(); return mr.valid }

func bufAddr(b []byte) uint64 {
	if cap(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

func checkAccess(a Access) error {
	// Verbs require LOCAL_WRITE whenever REMOTE_WRITE or REMOTE_ATOMIC is requested
	// (docs/protocol.md §7.2).
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return newErr("reg mr", "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too", syscall.EINVAL)
	}
	if a&AccessOnDemand != 0 {
		return newErr("reg mr", "on-demand paging is not supported", syscall.EOPNOTSUPP)
	}
	return nil
}

// RegMR registers buf with the given access flags (ibv_reg_mr). The memory
// must stay valid until Deregister returns. Like ibv_reg_mr's pinning, it
// faults the pages in (for writing when access allows local or remote
// writes; the bytes stay as they are), so that the transport's first touch
// of them does not stall the device's receive loop on page faults: a large
// registration costs its page faults here, once. Registrations beyond the
// device's MR count (ENOMEM) or size (EINVAL) limits fail (Config.MaxMR,
// Config.MaxMRSize).
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	iova := uint64(0)
	if access&AccessZeroBased == 0 {
		iova = bufAddr(buf)
	}
	return pd.RegMRIOVA(buf, iova, access)
}

// RegMRIOVA registers buf as RegMR does, with iova as the address of its
// first byte in the region's address space (ibv_reg_mr_iova2): SGEs and
// remote accesses name iova plus an offset. A zero-based region
// (AccessZeroBased) must have iova 0.
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if access&AccessZeroBased != 0 && iova != 0 {
		return nil, newErr("reg mr", "a zero-based MR must have iova 0", syscall.EINVAL)
	}
	if iova+uint64(len(buf)) < iova {
		return nil, newErr("reg mr", "iova plus length wraps around", syscall.EINVAL)
	}
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if max := pd.dev.maxMRSize(); uint64(len(buf)) > max {
		return nil, errMRSize("reg mr", uint64(len(buf)), max)
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	d := pd.dev
	d.prefault("reg mr", buf, access)
	mr := &MR{dev: d, pd: pd, buf: buf, access: access, valid: true, iova: iova}
	d.keys.mu.Lock()
	if d.keys.mrLive >= d.maxMR() {
		d.keys.mu.Unlock()
		pd.unref()
		return nil, newErr("reg mr", "too many MRs (max_mr "+utoa(uint64(d.maxMR()))+", Config.MaxMR): deregister some first", syscall.ENOMEM)
	}
	var idx uint32
	if n := len(d.keys.mrFree); n > 0 {
		idx = d.keys.mrFree[n-1]
		d.keys.mrFree = d.keys.mrFree[:n-1]
	} else {
		if d.keys.mrs.next == 0 {
			d.keys.mrs.next = 1 // index 0 unused
		}
		if d.keys.mrs.next > maxMRIndex {
			d.keys.mu.Unlock()
			pd.unref()
			return nil, newErr("reg mr", "MR table full (max_mr "+utoa(maxMRIndex)+")", syscall.ENOMEM)
		}
		idx = d.keys.mrs.next
		d.keys.mrs.next++
	}
	mr.index = idx
	mr.key = idx<<8 | uint32(rand.IntN(256))
	d.keys.mrs.set(idx, mr)
	d.keys.mrLive++
	d.keys.mu.Unlock()
	d.stats.MRs.Add(1)
	return mr, nil
}

// prefault faults in buf's pages for a registration (mem.Prefault). It is
// best effort: memory it could not fault in still works, its first
// touches are only slower; why is logged at debug level.
func (d *Device) prefault(op string, buf []byte, access Access) {
	err := mem.Prefault(buf, wantsWrite(access))
	if err != nil && d.log != nil && !errors.Is(err, mem.ErrNotSupported) {
		d.log.Debug(op+": pages not faulted in", "bytes", len(buf), "err", err)
	}
}

// Deregister removes the region (ibv_dereg_mr). It waits for any access in
// progress; afterwards remote access gets NAK 0x62 and local use LOC_PROT_ERR.
func (mr *MR) Deregister() error {
	mr.mu.Lock()
	if mr.dereg {
		mr.mu.Unlock()
		return newErr("dereg mr", "already deregistered", syscall.EINVAL)
	}
	if mr.numMW > 0 {
		mr.mu.Unlock()
		return newErr("dereg mr", "memory windows are still bound to the MR: invalidate or deallocate them first", syscall.EBUSY)
	}
	mr.dereg, mr.valid = true, false
	mr.buf = nil
	pd := mr.pd
	var own *mem.Region
	if mr.ownRegion {
		own = mr.region
	}
	mr.mu.Unlock()
	mr.waitLent() // the kernel reads lent payloads when they are written
	d := mr.dev
	d.keys.mu.Lock()
	if d.keys.mrs.get(mr.index) == mr {
		d.keys.mrs.set(mr.index, nil)
		d.keys.mrFree = append(d.keys.mrFree, mr.index)
		d.keys.mrLive--
	}
	d.keys.mu.Unlock()
	pd.unref()
	if own != nil {
		_ = own.Deregister() // after a provider's revocation this only releases
	}
	d.stats.MRs.Add(^uint64(0))
	return nil
}

// Invalidate moves the region to the invalid state (as LOCAL_INV or an
// incoming SEND_WITH_INV does): synchronous, later accesses fail until
// Revalidate. The memory provider uses it to revoke access.
func (mr *MR) Invalidate() {
	mr.mu.Lock()
	mr.valid = false
	mr.mu.Unlock()
}

// Revalidate makes an invalidated region usable again with a new key8
// (like a fast-register). It returns the new key.
func (mr *MR) Revalidate() uint32 {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if !mr.dereg {
		mr.valid = true
		mr.key = mr.index<<8 | (mr.key+1)&0xFF
	}
	return mr.key
}

// Rereg flags (enum ibv_rereg_mr_flags values).
const (
	ReregChangeTranslation = 1
	ReregChangePD          = 2
	ReregChangeAccess      = 4
)

// Rereg changes the region's buffer, PD and/or access (ibv_rereg_mr); flags
// select what changes. The keys stay the same index with a new key8, and
// the MR is valid again (also after an invalidation). Changing the
// translation of an MR over provider memory detaches it from the provider
// region (deregistering the region if RegMem made it); write access to a
// read-only provider region is refused (EACCES). It fails with EBUSY while
// memory windows are bound to the MR.
func (mr *MR) Rereg(flags int, pd *PD, buf []byte, access Access) error {
	if flags == 0 || flags&^7 != 0 {
		return newErr("rereg mr", "flags must be a non-empty set of CHANGE_TRANSLATION|CHANGE_PD|CHANGE_ACCESS", syscall.EINVAL)
	}
	if flags&ReregChangeTranslation != 0 {
		if max := mr.dev.maxMRSize(); uint64(len(buf)) > max {
			return errMRSize("rereg mr", uint64(len(buf)), max)
		}
	}
	if flags&ReregChangeAccess != 0 {
		if err := checkAccess(access); err != nil {
			return err
		}
	}
	if flags&ReregChangeTranslation != 0 {
		acc := access
		if flags&ReregChangeAccess == 0 {
			acc = mr.Access()
		}
		mr.dev.prefault("rereg mr", buf, acc)
	}
	if flags&ReregChangePD != 0 {
		if pd == nil || pd.dev != mr.dev {
			return newErr("rereg mr", "new PD is nil or of another device", syscall.EINVAL)
		}
		if err := pd.ref(); err != nil {
			return err
		}
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dereg {
		if flags&ReregChangePD != 0 {
			pd.unref()
		}
		return newErr("rereg mr", "MR is deregistered", syscall.EINVAL)
	}
	if mr.numMW > 0 {
		if flags&ReregChangePD != 0 {
			pd.unref()
		}
		return newErr("rereg mr", "memory windows are bound to the MR: invalidate or deallocate them first", syscall.EBUSY)
	}
	if flags&ReregChangeTranslation == 0 && flags&ReregChangeAccess != 0 && mr.region != nil &&
		wantsWrite(access) && !mr.region.Writable() {
		if flags&ReregChangePD != 0 {
			pd.unref()
		}
		return newErr("rereg mr", "write access to a provider region registered read-only", syscall.EACCES)
	}
	if flags&ReregChangeTranslation == 0 && mr.region != nil && !mr.region.Valid() {
		if flags&ReregChangePD != 0 {
			pd.unref()
		}
		return newErr("rereg mr", "the provider revoked the MR's memory: change the translation or deregister it", syscall.EFAULT)
	}
	if flags&ReregChangeTranslation != 0 {
		mr.waitLent() // the old buffer may be freed once Rereg returns
	}
	var detached *mem.Region
	if flags&ReregChangeTranslation != 0 && mr.region != nil {
		if mr.ownRegion {
			detached = mr.region
		}
		mr.region, mr.ownRegion = nil, false
	}
	if detached != nil {
		defer detached.Deregister() //nolint:errcheck // no accessor can be inside: we hold the MR lock
	}
	if flags&ReregChangePD != 0 {
		mr.pd.unref()
		mr.pd = pd
	}
	if flags&ReregChangeAccess != 0 {
		mr.access = access
	}
	if flags&ReregChangeTranslation != 0 {
		mr.buf = buf
	}
	if flags&(ReregChangeTranslation|ReregChangeAccess) != 0 {
		switch {
		case mr.access&AccessZeroBased != 0:
			mr.iova = 0
		case mr.region != nil:
			mr.iova = mr.region.Addr()
		default:
			mr.iova = bufAddr(mr.buf)
		}
	}
	mr.valid = true
	mr.key = mr.index<<8 | (mr.key+1)&0xFF
	return nil
}

// lookupMR returns the MR whose index the key names, or nil. The caller
// checks the full key under the MR's lock.
func (d *Device) lookupMR(key uint32) *MR { return d.keys.mrs.get(key >> 8) }

// mrChunk is the MR table's allocation unit.
const mrChunk = 1024

// keyTables are the device's memory keys: the MR and MW tables, with the
// free indices of each for reuse.
type keyTables struct {
	mu     sync.Mutex // serialises MR and MW table writers; lookups are lock-free
	mrs    mrTable
	mrFree []uint32
	mrLive int     // registered MRs (under mu)
	mws    mwTable // under mu for writers, like mrs
	mwFree []uint32
}

// mrTable maps MR indices to MRs: chunks of atomic pointers, allocated as
// indices are used, so that lookups take no lock (writers hold
// Device.keys.mu).
type mrTable struct {
	chunks [(maxMRIndex + 1) / mrChunk]atomic.Pointer[[mrChunk]atomic.Pointer[MR]]
	next   uint32 // first never-used index
}

func (t *mrTable) get(idx uint32) *MR {
	if idx > maxMRIndex {
		return nil
	}
	c := t.chunks[idx/mrChunk].Load()
	if c == nil {
		return nil
	}
	return c[idx%mrChunk].Load()
}

func (t *mrTable) set(idx uint32, mr *MR) {
	c := t.chunks[idx/mrChunk].Load()
	if c == nil {
		c = new([mrChunk]atomic.Pointer[MR])
		t.chunks[idx/mrChunk].Store(c)
	}
	c[idx%mrChunk].Store(mr)
}

// acquire returns the MR key names, read-locked, with the byte offset of
// [va, va+n) if key, PD, access, state and bounds all check (docs/protocol.md
// §7.1), else nil.
// The caller ends the access with release.
func (d *Device) acquire(pd *PD, key uint32, va uint64, n uint64, need Access) (*MR, int) {
	return d.lookupMR(key).acquire(pd, key, va, n, need)
}

// acquire is Device.acquire for an MR found earlier (the responder keeps
// the MR of a multi-packet WRITE): every check is repeated, so a region
// deregistered or re-keyed meanwhile fails.
func (mr *MR) acquire(pd *PD, key uint32, va uint64, n uint64, need Access) (*MR, int) {
	if mr == nil {
		return nil, 0
	}
	mr.mu.RLock()
	if mr.key != key || !mr.valid || mr.pd != pd || mr.access&need != need ||
		va < mr.iova || n > uint64(len(mr.buf)) || va-mr.iova > uint64(len(mr.buf))-n {
		mr.mu.RUnlock()
		return nil, 0
	}
	if mr.region != nil {
		// The provider's read-side guard: fails once the region is revoked.
		if _, err := mr.region.Enter(); err != nil {
			mr.mu.RUnlock()
			return nil, 0
		}
	}
	return mr, int(va - mr.iova)
}

// release ends an access begun by acquire.
func (mr *MR) release() {
	if mr.region != nil {
		mr.region.Exit()
	}
	mr.mu.RUnlock()
}

// RegRegion registers memory a provider resolved (see package mem): the MR
// reads and writes the region's view inside the region's guard, and when
// the provider revokes the region the MR becomes invalid (remote access then
// gets NAK 0x62, local use LOC_PROT_ERR). The MR's address is the region's
// address (0 if ZERO_BASED). Deregister does not deregister the region.
func (pd *PD) RegRegion(r *mem.Region, access Access) (*MR, error) {
	if r == nil {
		return nil, newErr("reg mr", "nil region", syscall.EINVAL)
	}
	if access&(AccessLocalWrite|AccessRemoteWrite|AccessRemoteAtomic) != 0 && !r.Writable() {
		return nil, newErr("reg mr", "write access to a region registered read-only", syscall.EACCES)
	}
	view, err := r.Enter()
	if err != nil {
		return nil, newErr("reg mr", "region is "+err.Error(), syscall.EFAULT)
	}
	r.Exit()
	mr, err := pd.RegMR(view, access)
	if err != nil {
		return nil, err
	}
	mr.mu.Lock()
	mr.region = r
	if access&AccessZeroBased == 0 {
		mr.iova = r.Addr()
	}
	mr.mu.Unlock()
	// Zero-copy packets hold the region's guard until written (zc.go): a
	// teardown sends what the device has queued instead of waiting for
	// the queue's next send (a peer's answer, or a retransmit timer).
	r.OnDrain(mr.dev.kick)
	r.OnInvalidate(func(mem.Invalidation) {
		mr.mu.Lock()
		live := !mr.dereg
		mr.valid = false
		mr.mu.Unlock()
		if live {
			mr.dev.event(AsyncEvent{Type: EventMRInvalidated, MR: mr})
		}
	})
	return mr, nil
}

// Region returns the provider region behind the MR, or nil.
func (mr *MR) Region() *mem.Region { mr.mu.RLock(); defer mr.mu.RUnlock(); return mr.region }

// gather copies len(dst) bytes starting at byte off of the SGE list into
// dst. It returns false on any key/PD/bounds failure (LOC_PROT_ERR).
func (d *Device) gather(pd *PD, sges []SGE, off int, dst []byte) bool {
	for i := range sges {
		if len(dst) == 0 {
			return true
		}
		s := &sges[i]
		if off >= int(s.Length) {
			off -= int(s.Length)
			continue
		}
		n := min(int(s.Length)-off, len(dst))
		mr, o := d.acquire(pd, s.LKey, s.Addr+uint64(off), uint64(n), 0)
		if mr == nil {
			return false
		}
		ok := memCopy(dst[:n], mr.buf[o:o+n])
		mr.release()
		if !ok {
			return false
		}
		dst = dst[n:]
		off = 0
	}
	return len(dst) == 0
}

// scatter copies src into the SGE list starting at byte off; the MRs need
// LOCAL_WRITE. It returns false on a key/PD/access/bounds failure or if
// the list is too short.
func (d *Device) scatter(pd *PD, sges []SGE, off int, src []byte) bool {
	for i := range sges {
		if len(src) == 0 {
			return true
		}
		s := &sges[i]
		if off >= int(s.Length) {
			off -= int(s.Length)
			continue
		}
		n := min(int(s.Length)-off, len(src))
		mr, o := d.acquire(pd, s.LKey, s.Addr+uint64(off), uint64(n), AccessLocalWrite)
		if mr == nil {
			return false
		}
		ok := memCopy(mr.buf[o:o+n], src[:n])
		mr.release()
		if !ok {
			return false
		}
		src = src[n:]
		off = 0
	}
	return len(src) == 0
}

// checkSGEs validates an SGE list at post time: every lkey names a valid MR
// of pd (with LOCAL_WRITE if write) and every SGE lies inside it.
func (d *Device) checkSGEs(pd *PD, sges []SGE, need Access) bool {
	for i := range sges {
		s := &sges[i]
		if s.Length == 0 {
			continue
		}
		mr, _ := d.acquire(pd, s.LKey, s.Addr, uint64(s.Length), need)
		if mr == nil {
			return false
		}
		mr.release()
	}
	return true
}
