package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unsafe"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/verbs"
)

// Mode is how a ring's data blocks are registered.
type Mode int

const (
	// Auto registers one MR when the blocks are contiguous in this process
	// and one MR per block otherwise.
	Auto Mode = iota
	// Single registers one MR over the whole ring; the blocks must be
	// contiguous (attach with dada.LayoutContiguous).
	Single
	// PerBlock registers one MR per block, wherever the blocks are.
	PerBlock
)

// String returns "auto", "single" or "per-block".
func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Single:
		return "single"
	case PerBlock:
		return "per-block"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "auto", "single" or "per-block" (also "perblock", "block").
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return Auto, nil
	case "single", "whole", "one":
		return Single, nil
	case "per-block", "perblock", "block", "blocks":
		return PerBlock, nil
	}
	return 0, fmt.Errorf("%w: registration mode %q (want auto, single or per-block)", ErrConfig, s)
}

// RegisterOptions control RegisterRing.
type RegisterOptions struct {
	// Mode chooses the registration (default Auto).
	Mode Mode
	// Access are the MR access flags (default LOCAL_WRITE|REMOTE_WRITE).
	Access verbs.Access
	// Logger receives the registration report at info level; nil is silent.
	Logger *slog.Logger
}

// BlockMR locates one data block in the registered memory.
type BlockMR struct {
	MR   *verbs.MR // the region holding the block
	Addr uint64    // address of the block's byte 0 in the MR's address space (for SGEs and remote writes)
	LKey uint32
	RKey uint32
	Len  int // block size
}

// RingMRs are the memory regions covering a ring's data blocks.
type RingMRs struct {
	// Mode is the registration in use: Single or PerBlock.
	Mode Mode
	// Reason says why Auto chose Mode (or "requested").
	Reason string

	ring   *dada.Ring
	mrs    []*verbs.MR
	blocks []BlockMR
	bufsz  int
}

// RegisterRing registers the data blocks of ring (attached in this process)
// with pd. With Auto, one MR covers the ring when its blocks lie back to back
// in this process (attach with dada.LayoutContiguousTry: possible when the
// block size is a page multiple), else each block gets its own MR. Single
// fails with ErrNotContiguous when the blocks are not contiguous; PerBlock
// always registers one MR per block. The ring must stay attached until Close.
func RegisterRing(pd *verbs.PD, ring *dada.Ring, opts RegisterOptions) (*RingMRs, error) {
	if pd == nil || ring == nil {
		return nil, fmt.Errorf("%w: RegisterRing needs a PD and an attached ring", ErrConfig)
	}
	access := opts.Access
	if access == 0 {
		access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	}
	m := &RingMRs{ring: ring, bufsz: ring.BufSize()}
	view, contiguous := ring.ContiguousView()
	switch opts.Mode {
	case Auto:
		if contiguous {
			m.Mode, m.Reason = Single, "blocks are contiguous"
		} else {
			m.Mode, m.Reason = PerBlock, notContiguousReason(ring)
		}
	case Single:
		if !contiguous {
			return nil, fmt.Errorf("%w: ring %s: %s; attach it with dada.LayoutContiguous or register per block",
				ErrNotContiguous, ring.Key().Short(), notContiguousReason(ring))
		}
		m.Mode, m.Reason = Single, "requested"
	case PerBlock:
		m.Mode, m.Reason = PerBlock, "requested"
	default:
		return nil, fmt.Errorf("%w: registration mode %d", ErrConfig, int(opts.Mode))
	}
	infos := ring.Blocks()
	if m.Mode == Single {
		mr, err := pd.RegMR(view, access)
		if err != nil {
			return nil, fmt.Errorf("pipeline: registering ring %s (%d bytes) as one MR: %w", ring.Key().Short(), len(view), err)
		}
		m.mrs = []*verbs.MR{mr}
		for i := range infos {
			off := uint64(i) * uint64(m.bufsz)
			m.blocks = append(m.blocks, BlockMR{MR: mr, Addr: mr.Addr() + off, LKey: mr.LKey(), RKey: mr.RKey(), Len: m.bufsz})
		}
	} else {
		for _, b := range infos {
			mr, err := pd.RegMR(b.Data, access)
			if err != nil {
				m.Close()
				return nil, fmt.Errorf("pipeline: registering block %d of ring %s: %w", b.Index, ring.Key().Short(), err)
			}
			m.mrs = append(m.mrs, mr)
			m.blocks = append(m.blocks, BlockMR{MR: mr, Addr: mr.Addr(), LKey: mr.LKey(), RKey: mr.RKey(), Len: m.bufsz})
		}
	}
	if opts.Logger != nil {
		opts.Logger.Info("pipeline: ring registered", "key", ring.Key().Short(), "mode", m.Mode.String(),
			"reason", m.Reason, "blocks", ring.NBufs(), "bufsz", m.bufsz, "mrs", len(m.mrs))
	}
	return m, nil
}

// notContiguousReason explains why a ring's blocks are not contiguous.
func notContiguousReason(ring *dada.Ring) string {
	if ps := os.Getpagesize(); ring.BufSize()%ps != 0 {
		return fmt.Sprintf("block size %d is not a multiple of the page size %d, so the blocks cannot be remapped back to back", ring.BufSize(), ps)
	}
	if ring.Layout() == dada.LayoutKernel {
		return "the blocks were attached where the kernel chose (attach with dada.LayoutContiguousTry to make them contiguous)"
	}
	return "the blocks are not back to back in this process"
}

// Block returns the registration of block i (0 <= i < NBufs).
func (m *RingMRs) Block(i int) BlockMR { return m.blocks[i] }

// NBlocks returns the number of blocks.
func (m *RingMRs) NBlocks() int { return len(m.blocks) }

// MRs returns the registered regions (one, or one per block).
func (m *RingMRs) MRs() []*verbs.MR { return m.mrs }

// Lookup returns the registration of the block holding buf[0] (a slice of a
// block in this process, such as dada.Block.Data[off:]) and buf's address in
// that MR's address space, or ok false if buf is not in the ring.
func (m *RingMRs) Lookup(buf []byte) (b BlockMR, addr uint64, ok bool) {
	if cap(buf) == 0 {
		return BlockMR{}, 0, false
	}
	return m.LookupAddr(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

// LookupAddr is Lookup for an address in this process.
func (m *RingMRs) LookupAddr(p uintptr) (b BlockMR, addr uint64, ok bool) {
	i, off, ok := m.ring.BlockOf(p)
	if !ok || i >= len(m.blocks) {
		return BlockMR{}, 0, false
	}
	b = m.blocks[i]
	return b, b.Addr + uint64(off), true
}

// String reports the registration, as the seed's RegisterWholeRing prints it.
func (m *RingMRs) String() string {
	var sb strings.Builder
	n := len(m.blocks)
	if m.Mode == Single && len(m.mrs) == 1 {
		fmt.Fprintf(&sb, "ring %s: one MR over %d blocks × %d bytes (%s): addr=%#x len=%d lkey=%#x rkey=%#x",
			m.ring.Key().Short(), n, m.bufsz, m.Reason, m.mrs[0].Addr(), m.mrs[0].Len(), m.mrs[0].LKey(), m.mrs[0].RKey())
		return sb.String()
	}
	fmt.Fprintf(&sb, "ring %s: %d MRs, one per block of %d bytes (%s)", m.ring.Key().Short(), len(m.mrs), m.bufsz, m.Reason)
	for i, b := range m.blocks {
		fmt.Fprintf(&sb, "\n  block %2d: addr=%#x len=%d lkey=%#x rkey=%#x", i, b.Addr, b.Len, b.LKey, b.RKey)
	}
	return sb.String()
}

// Close deregisters every MR. The ring stays attached.
func (m *RingMRs) Close() error {
	var errs []error
	for _, mr := range m.mrs {
		if mr != nil {
			if err := mr.Deregister(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	m.mrs, m.blocks = nil, nil
	return errors.Join(errs...)
}
