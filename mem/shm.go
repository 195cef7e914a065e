package mem

import (
	"errors"
	"fmt"
	"os"

	"github.com/softroce/softroce/internal/sysv"
)

// ShmSegment is a descriptor naming a SysV shared memory segment, by shmid
// or by key, and an offset into it. The region covers
// [Offset, Offset+Request.Length) of the segment.
type ShmSegment struct {
	ID     int    // shmid, when ByKey is false
	Key    int    // IPC key, when ByKey is true
	ByKey  bool   // look the segment up by Key
	Offset uint64 // byte offset of the region in the segment
}

// ShmByID names segment id at offset.
func ShmByID(id int, offset uint64) ShmSegment { return ShmSegment{ID: id, Offset: offset} }

// ShmByKey names the segment with IPC key key at offset.
func ShmByKey(key int, offset uint64) ShmSegment {
	return ShmSegment{Key: key, ByKey: true, Offset: offset}
}

// Shm is the SysV shared memory provider. It takes ShmSegment descriptors:
// GetPages attaches the segment (read-only unless the request writes),
// which keeps it alive even if it is removed meanwhile, and PutPages
// detaches it. Linux only.
type Shm struct{ name string }

// NewShm returns a SysV shm provider named name ("shm" if empty).
func NewShm(name string) *Shm {
	if name == "" {
		name = "shm"
	}
	return &Shm{name: name}
}

type shmClaim struct {
	id      int
	off, n  uint64
	segSize uint64
	seg     []byte
}

// Name implements Provider.
func (s *Shm) Name() string { return s.name }

// Acquire implements Provider.
func (s *Shm) Acquire(req Request) (ClientContext, error) {
	var d ShmSegment
	switch x := req.Desc.(type) {
	case ShmSegment:
		d = x
	case *ShmSegment:
		d = *x
	default:
		return nil, Declinef(WrongDescriptor, "needs a ShmSegment descriptor, got %T", req.Desc)
	}
	if !sysSupported {
		return nil, ErrNotSupported
	}
	id := d.ID
	if d.ByKey {
		var err error
		if id, err = shmByKey(d.Key); err != nil {
			return nil, err
		}
	}
	size, err := shmSize(id)
	if err != nil {
		return nil, err
	}
	if d.Offset > size || req.Length > size-d.Offset {
		return nil, fmt.Errorf("%w: [%d, %d) is outside shmid %d of %d bytes", ErrOutOfBounds, d.Offset, d.Offset+req.Length, id, size)
	}
	return &shmClaim{id: id, off: d.Offset, n: req.Length, segSize: size}, nil
}

// GetPages implements Provider: it attaches the segment.
func (s *Shm) GetPages(cc ClientContext, write bool, core CoreContext) error {
	c := cc.(*shmClaim)
	seg, err := shmAttach(c.id, write)
	if err != nil {
		return err
	}
	if uint64(len(seg)) < c.off+c.n {
		shmDetach(seg)
		return fmt.Errorf("%w: shmid %d shrank to %d bytes", ErrOutOfBounds, c.id, len(seg))
	}
	c.seg = seg
	return nil
}

// Map implements Provider.
func (s *Shm) Map(cc ClientContext) ([]byte, error) {
	c := cc.(*shmClaim)
	return c.seg[c.off : c.off+c.n : c.off+c.n], nil
}

// Unmap implements Provider.
func (s *Shm) Unmap(cc ClientContext) error { return nil }

// PutPages implements Provider: it detaches the segment.
func (s *Shm) PutPages(cc ClientContext) {
	c := cc.(*shmClaim)
	if c.seg != nil {
		shmDetach(c.seg)
		c.seg = nil
	}
}

// PageSize implements Provider.
func (s *Shm) PageSize(cc ClientContext) int { return os.Getpagesize() }

// Release implements Provider.
func (s *Shm) Release(cc ClientContext) {}

// CreateShm creates a new SysV segment of size bytes with IPC key key
// (0 = IPC_PRIVATE) and permissions perm, failing if the key exists. It
// returns the shmid; remove the segment with RemoveShm.
func CreateShm(key, size, perm int) (int, error) { return shmCreate(key, size, perm) }

// RemoveShm marks segment id for removal (IPC_RMID); it disappears once
// the last attachment is gone.
func RemoveShm(id int) error { return shmRemove(id) }

// The SysV calls, through internal/sysv (the one copy of the wrappers, shared
// with package dada), with mem's errors.

// shmErr says which call failed on what, in err; sysv's ErrUnsupported
// is mem's ErrNotSupported as it is.
func shmErr(err error, format string, args ...any) error {
	if errors.Is(err, sysv.ErrUnsupported) {
		return ErrNotSupported
	}
	return fmt.Errorf("mem: "+format+": %w", append(args, err)...)
}

func shmByKey(key int) (int, error) {
	id, err := sysv.ShmGet(int32(key), 0, 0)
	if err != nil {
		return -1, shmErr(err, "shmget key %#x", key)
	}
	return id, nil
}

func shmSize(id int) (uint64, error) {
	size, err := sysv.ShmSize(id)
	if err != nil {
		return 0, shmErr(err, "shmctl IPC_STAT shmid %d", id)
	}
	return size, nil
}

func shmAttach(id int, write bool) ([]byte, error) {
	flag := 0
	if !write {
		flag = sysv.ShmRdonly
	}
	b, err := sysv.ShmAttach(id, 0, flag)
	if err != nil {
		return nil, shmErr(err, "shmat shmid %d", id)
	}
	return b, nil
}

func shmDetach(b []byte) error {
	err := sysv.ShmDetach(b)
	if errors.Is(err, sysv.ErrUnsupported) {
		return ErrNotSupported
	}
	return err
}

// shmCreate creates a segment; a negative size is too large for shmget(2),
// as its size_t sees it.
func shmCreate(key, size, perm int) (int, error) {
	id, err := sysv.ShmGet(int32(key), uint64(size), sysv.IPCCreat|sysv.IPCExcl|(perm&0o777))
	if err != nil {
		return -1, shmErr(err, "shmget key %#x size %d", key, size)
	}
	return id, nil
}

func shmRemove(id int) error {
	if err := sysv.ShmRemove(id); err != nil {
		return shmErr(err, "shmctl IPC_RMID shmid %d", id)
	}
	return nil
}
