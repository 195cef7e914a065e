package mem

import (
	"fmt"
	"log/slog"
	"os"
)

// HugePages selects huge page use for Mmap allocations.
type HugePages uint8

// Huge page modes.
const (
	HugeOff     HugePages = iota // ordinary pages
	HugeRequire                  // MAP_HUGETLB; Alloc fails with ErrNoHugePages when none are reserved
	HugePrefer                   // MAP_HUGETLB, else ordinary pages with MADV_HUGEPAGE (transparent huge pages)
)

// MmapOptions configure an Mmap provider.
type MmapOptions struct {
	Name      string    // provider name; "mmap" if empty
	HugePages HugePages // huge page mode
	// Lock mlocks each allocation (needs RLIMIT_MEMLOCK or CAP_IPC_LOCK).
	Lock   bool
	Logger *slog.Logger // fallbacks are logged here; nil is silent
}

// Mmap is the anonymous-mmap provider: Alloc maps private anonymous memory
// (optionally huge pages, optionally mlocked) that the provider then owns
// by address, so Bytes descriptors and address-only requests inside an
// allocation resolve to it. Free revokes the allocation's registrations
// before unmapping. Linux only; elsewhere Alloc returns ErrNotSupported.
type Mmap struct {
	bufProvider
	opts MmapOptions
}

// NewMmap returns an mmap provider.
func NewMmap(opts MmapOptions) *Mmap {
	if opts.Name == "" {
		opts.Name = "mmap"
	}
	return &Mmap{bufProvider: bufProvider{name: opts.Name}, opts: opts}
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// Alloc maps n bytes and returns them. The slice is valid until Free.
func (m *Mmap) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, ErrZeroLength
	}
	if !sysSupported {
		return nil, ErrNotSupported
	}
	var (
		b   []byte
		err error
		ps  = os.Getpagesize()
	)
	if m.opts.HugePages != HugeOff {
		hps := hugePageSize()
		b, err = mmapAnon(roundUp(n, hps), true)
		if err == nil {
			ps = hps
		} else if m.opts.HugePages == HugeRequire {
			return nil, err
		} else {
			if m.opts.Logger != nil {
				m.opts.Logger.Info("huge pages unavailable, using ordinary pages with MADV_HUGEPAGE", "provider", m.name, "err", err)
			}
			b = nil
		}
	}
	if b == nil {
		b, err = mmapAnon(roundUp(n, ps), false)
		if err != nil {
			return nil, err
		}
		if m.opts.HugePages == HugePrefer {
			madviseHuge(b)
		}
	}
	x := &buffer{mem: b, n: n, pageSize: ps}
	if m.opts.Lock {
		if err := mlock(b); err != nil {
			munmap(b)
			return nil, err
		}
		x.locked = true
	}
	if err := m.add(x); err != nil {
		munmap(b)
		return nil, err
	}
	return b[:n:n], nil
}

// PageSizeOf returns the page size backing a slice returned by Alloc (the
// huge page size when MAP_HUGETLB succeeded), or 0 if b is not one.
func (m *Mmap) PageSizeOf(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if x, _ := m.find(addrOf(b), addrOf(b)+1); x != nil {
		return x.pageSize
	}
	return 0
}

// Free revokes every registration on b (a slice returned by Alloc), then
// unmaps it.
func (m *Mmap) Free(b []byte) error {
	x, err := m.take(b, fmt.Errorf("%w: mmap buffer freed while registered", ErrRevoked))
	if err != nil {
		return err
	}
	return m.unmap(x)
}

func (m *Mmap) unmap(x *buffer) error {
	if x.locked {
		munlock(x.mem)
	}
	if err := munmap(x.mem); err != nil {
		return fmt.Errorf("mem: munmap: %w", err)
	}
	return nil
}

// Close frees every allocation (revoking their registrations); later
// requests are declined as Unavailable.
func (m *Mmap) Close() error {
	var first error
	for _, x := range m.takeAll(fmt.Errorf("%w: mmap provider closed", ErrRevoked)) {
		if err := m.unmap(x); err != nil && first == nil {
			first = err
		}
	}
	return first
}
