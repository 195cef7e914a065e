package verbs

import (
	"errors"
	"syscall"

	"github.com/softroce/softroce/mem"
)

// maxMR is the MR count limit (Config.MaxMR, at most rxe's 2^19-1).
func (d *Device) maxMR() int {
	if n := d.cfg.MaxMR; n > 0 && n < maxMRIndex {
		return n
	}
	return maxMRIndex
}

// maxMRSize is the MR length limit (Config.MaxMRSize, 0: none).
func (d *Device) maxMRSize() uint64 {
	if n := d.cfg.MaxMRSize; n > 0 {
		return n
	}
	return ^uint64(0)
}

// MemoryRegistry returns the registry PD.RegMem and PD.RegDmabufMR use:
// Config.Memory, or the device's own with the "fd" and "heap" providers.
// Register further providers on it to make their memory registrable; they
// are asked after those two, and the heap takes every mem.Bytes
// descriptor, so name later providers' memory by address (or by their own
// descriptor types), or pass a Config.Memory ordered as you need.
func (d *Device) MemoryRegistry() *mem.Registry {
	if d.cfg.Memory != nil {
		return d.cfg.Memory
	}
	d.memOnce.Do(func() {
		g := mem.NewRegistry(mem.Options{Logger: d.log})
		_ = g.Register(mem.NewFD("fd"))
		_ = g.Register(mem.NewHeap("heap"))
		d.memReg = g
	})
	return d.memReg
}

// memErr turns a package mem registration error into a verbs error with
// the errno rdma-core would give, keeping the cause for errors.Is/As.
func memErr(op string, err error) error {
	errno := syscall.EINVAL
	reason := "memory registration failed: " + err.Error()
	switch {
	case errors.Is(err, mem.ErrSpansProviders):
		reason = "one MR cannot cover several providers' memory: " + err.Error()
	case errors.Is(err, mem.ErrNoProvider):
		errno = syscall.EFAULT
		reason = "no memory provider owns the range; register the provider (Device.MemoryRegistry().Register) or pass a descriptor: " + err.Error()
	case errors.Is(err, mem.ErrTooManyRegions):
		errno = syscall.ENOMEM
	case errors.Is(err, mem.ErrInvalidated), errors.Is(err, mem.ErrOutOfBounds), errors.Is(err, mem.ErrBadAddress):
		errno = syscall.EFAULT
	case errors.Is(err, mem.ErrNotSupported):
		errno = syscall.EOPNOTSUPP
	}
	return &Error{Op: op, Reason: reason, Errno: errno, Err: err}
}

func wantsWrite(a Access) bool {
	return a&(AccessLocalWrite|AccessRemoteWrite|AccessRemoteAtomic) != 0
}

// RegMem registers memory a provider of the device's registry resolves
// (Device.MemoryRegistry): req names it by address (host or device) and/or
// descriptor (mem.Bytes, mem.FileDesc, mem.ShmSegment, ...); req.Write is
// set from access. The MR owns the region: Deregister deregisters it too.
// A range spanning several providers' memory fails with an error matching
// mem.ErrSpansProviders (and EINVAL); a range no provider owns,
// mem.ErrNoProvider (EFAULT). When the provider revokes the memory the MR
// becomes invalid and an EventMRInvalidated async event reports it.
func (pd *PD) RegMem(req mem.Request, access Access) (*MR, error) {
	return pd.regMem("reg mr", req, access)
}

func (pd *PD) regMem(op string, req mem.Request, access Access) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if req.Length > pd.dev.maxMRSize() {
		return nil, errMRSize(op, req.Length, pd.dev.maxMRSize())
	}
	if wantsWrite(access) {
		req.Write = true
	}
	r, err := pd.dev.MemoryRegistry().RegisterMemory(req)
	if err != nil {
		return nil, memErr(op, err)
	}
	mr, err := pd.RegRegion(r, access)
	if err != nil {
		_ = r.Deregister()
		return nil, err
	}
	mr.mu.Lock()
	mr.ownRegion = true
	mr.mu.Unlock()
	return mr, nil
}

// RegDmabufMR registers length bytes at offset of the file descriptor fd
// (a dma-buf, memfd, tmpfs or any mmap-able file) as ibv_reg_dmabuf_mr
// does: iova is the address the MR is known by (remote RDMA addresses and
// SGE addresses are iova plus an offset). The fd is duplicated; the caller
// may close its own. It goes through the registry's fd provider.
func (pd *PD) RegDmabufMR(fd int, offset, length, iova uint64, access Access) (*MR, error) {
	if fd < 0 || offset > 1<<63-1 {
		return nil, newErr("reg dmabuf mr", "negative fd or offset", syscall.EINVAL)
	}
	if access&AccessZeroBased != 0 && iova != 0 {
		return nil, newErr("reg dmabuf mr", "a zero-based MR must have iova 0", syscall.EINVAL)
	}
	mr, err := pd.regMem("reg dmabuf mr", mem.Request{Addr: iova, Length: length,
		Desc: mem.FileDesc{FD: fd, Offset: int64(offset)}}, access)
	if err != nil {
		return nil, err
	}
	return mr, nil
}

func errMRSize(op string, n, max uint64) error {
	return newErr(op, "region of "+utoa(n)+" bytes exceeds the device's max_mr_size "+utoa(max)+" (Config.MaxMRSize)", syscall.EINVAL)
}

func utoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// releaseMemory deregisters the provider regions RegMem made for MRs still
// registered when the device closes, so their pins, mappings and file
// descriptors do not outlive the device. Those MRs become invalid and
// their Bytes empty.
func (d *Device) releaseMemory() {
	d.keys.mu.Lock()
	var mrs []*MR
	for i := uint32(1); i < d.keys.mrs.next; i++ {
		if mr := d.keys.mrs.get(i); mr != nil {
			mrs = append(mrs, mr)
		}
	}
	d.keys.mu.Unlock()
	for _, mr := range mrs {
		mr.mu.Lock()
		r := mr.region
		own := mr.ownRegion && !mr.dereg
		if own {
			mr.valid, mr.ownRegion, mr.buf = false, false, nil
		}
		mr.mu.Unlock()
		if own {
			_ = r.Deregister()
		}
	}
}
