package mem

import (
	"fmt"
	"os"
)

// FileDesc is a descriptor naming memory by file descriptor, offset and
// (Request.Length) length, as ibv_reg_dmabuf_mr does. Any mmap-able fd
// works: memfd, tmpfs or regular files, device fds.
type FileDesc struct {
	FD     int
	Offset int64
}

// FDProvider is the file-descriptor provider. Acquire duplicates the fd
// (so the caller may close its own), Map maps the range shared and Unmap
// unmaps it, Release closes the duplicate. Linux only.
type FDProvider struct{ name string }

// NewFD returns an fd provider named name ("fd" if empty).
func NewFD(name string) *FDProvider {
	if name == "" {
		name = "fd"
	}
	return &FDProvider{name: name}
}

type fdClaim struct {
	fd    int // our duplicate
	orig  int // the caller's fd, for messages
	off   int64
	n     int
	write bool
	m     []byte // whole mapping
	view  []byte
}

// Name implements Provider.
func (p *FDProvider) Name() string { return p.name }

// Acquire implements Provider.
func (p *FDProvider) Acquire(req Request) (ClientContext, error) {
	var d FileDesc
	switch x := req.Desc.(type) {
	case FileDesc:
		d = x
	case *FileDesc:
		d = *x
	default:
		return nil, Declinef(WrongDescriptor, "needs a FileDesc descriptor, got %T", req.Desc)
	}
	if !sysSupported {
		return nil, ErrNotSupported
	}
	if d.Offset < 0 || d.FD < 0 {
		return nil, fmt.Errorf("%w: fd %d offset %d", ErrOutOfBounds, d.FD, d.Offset)
	}
	size, regular, err := fdInfo(d.FD)
	if err != nil {
		return nil, err
	}
	if regular && (d.Offset > size || int64(req.Length) > size-d.Offset) {
		return nil, fmt.Errorf("%w: [%d, %d) is beyond the end of fd %d (%d bytes)", ErrOutOfBounds, d.Offset, d.Offset+int64(req.Length), d.FD, size)
	}
	fd, err := dupFD(d.FD)
	if err != nil {
		return nil, err
	}
	return &fdClaim{fd: fd, orig: d.FD, off: d.Offset, n: int(req.Length)}, nil
}

// GetPages implements Provider.
func (p *FDProvider) GetPages(cc ClientContext, write bool, core CoreContext) error {
	cc.(*fdClaim).write = write
	return nil
}

// Map implements Provider: it maps the range MAP_SHARED.
func (p *FDProvider) Map(cc ClientContext) ([]byte, error) {
	c := cc.(*fdClaim)
	ps := int64(os.Getpagesize())
	base := c.off / ps * ps
	delta := int(c.off - base)
	m, err := mmapFD(c.fd, base, roundUp(delta+c.n, int(ps)), c.write)
	if err != nil {
		return nil, fmt.Errorf("registering fd %d: %w", c.orig, err)
	}
	c.m = m
	c.view = m[delta : delta+c.n : delta+c.n]
	return c.view, nil
}

// Unmap implements Provider.
func (p *FDProvider) Unmap(cc ClientContext) error {
	c := cc.(*fdClaim)
	if c.m == nil {
		return nil
	}
	err := munmap(c.m)
	c.m, c.view = nil, nil
	return err
}

// PutPages implements Provider.
func (p *FDProvider) PutPages(cc ClientContext) {}

// PageSize implements Provider.
func (p *FDProvider) PageSize(cc ClientContext) int { return os.Getpagesize() }

// Release implements Provider: it closes the duplicated fd.
func (p *FDProvider) Release(cc ClientContext) {
	c := cc.(*fdClaim)
	if c.fd >= 0 {
		closeFD(c.fd)
		c.fd = -1
	}
}

// Memfd creates an anonymous memory file (memfd_create, close-on-exec) of
// size bytes and returns its fd; the caller closes it.
func Memfd(name string, size int64) (int, error) { return memfdCreate(name, size) }
