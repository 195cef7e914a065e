package dada

import (
	"errors"
	"fmt"
)

// Config describes a ring to create, with the parameters of psrdada's dada_db.
type Config struct {
	Key        Key    // data block key; the header block is Key+1
	NBufs      int    // data buffers (default 4)
	BufSize    uint64 // bytes per data buffer (default 524288)
	NReaders   int    // readers (default 1, at most 8; dada_db allows 1..5)
	HeaderSize uint64 // bytes per header buffer (default 4096, at least the page size)
	HeaderBufs int    // header buffers (default and psrdada's choice: 8)
	Lock       bool   // lock every segment in memory (dada_db -l)
	Page       bool   // zero every buffer so its pages are allocated (dada_db -p)
	AttachOptions
}

func (c *Config) defaults() {
	if c.NBufs == 0 {
		c.NBufs = DefaultNBufs
	}
	if c.BufSize == 0 {
		c.BufSize = DefaultBufSize
	}
	if c.NReaders == 0 {
		c.NReaders = 1
	}
	if c.HeaderSize == 0 {
		c.HeaderSize = DefaultHeaderSize
	}
	if c.HeaderBufs == 0 {
		c.HeaderBufs = Xfers
	}
}

// HDU is a PSRDADA "header plus data unit": the data block ring at Key and
// the header block ring at Key+1, as every dada_* client uses them.
type HDU struct {
	Data   *Ring // data block
	Header *Ring // header block
}

// Key returns the data block key.
func (h *HDU) Key() Key { return h.Data.key }

// Create creates a ring pair as dada_db does: the data block at cfg.Key and
// a header block of cfg.HeaderBufs buffers at cfg.Key+1, both for
// cfg.NReaders readers. Unlike dada_db, a failure leaves nothing behind.
func Create(cfg Config) (*HDU, error) {
	cfg.defaults()
	if cfg.NBufs < 1 {
		return nil, fmt.Errorf("%w: %d buffers: need at least 1", ErrInvalidConfig, cfg.NBufs)
	}
	if cfg.HeaderSize < uint64(pageSize()) {
		return nil, fmt.Errorf("%w: header buffers of %d bytes: need at least the page size (%d)", ErrInvalidConfig, cfg.HeaderSize, pageSize())
	}
	// check both key sets before creating anything
	if err := checkKeysFree(cfg.Key, ringConfig{uint64(cfg.NBufs), cfg.BufSize, cfg.NReaders, false}); err != nil {
		return nil, err
	}
	if err := checkKeysFree(cfg.Key.HeaderKey(), ringConfig{uint64(cfg.HeaderBufs), cfg.HeaderSize, cfg.NReaders, true}); err != nil {
		return nil, err
	}
	data, err := createRing(cfg.Key, ringConfig{uint64(cfg.NBufs), cfg.BufSize, cfg.NReaders, false}, cfg.AttachOptions)
	if err != nil {
		return nil, err
	}
	hopt := cfg.AttachOptions
	hopt.Layout = LayoutKernel
	hdr, err := createRing(cfg.Key.HeaderKey(), ringConfig{uint64(cfg.HeaderBufs), cfg.HeaderSize, cfg.NReaders, true}, hopt)
	if err != nil {
		data.Destroy()
		return nil, err
	}
	h := &HDU{Data: data, Header: hdr}
	if cfg.Lock {
		if err := errors.Join(data.lockMemory(), hdr.lockMemory()); err != nil {
			h.Destroy()
			return nil, err
		}
	}
	if cfg.Page {
		data.page()
		hdr.page()
	}
	return h, nil
}

// Connect attaches the existing ring pair at key (dada_hdu_connect).
func Connect(key Key, opt AttachOptions) (*HDU, error) {
	hopt := opt
	hopt.Layout = LayoutKernel
	hdr, err := connectRing(key.HeaderKey(), hopt)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w %s (no header block at %s): create the ring first",
				ErrNotFound, key.Short(), key.HeaderKey())
		}
		return nil, err
	}
	data, err := connectRing(key, opt)
	if err != nil {
		hdr.Detach()
		return nil, err
	}
	return &HDU{Data: data, Header: hdr}, nil
}

// Detach detaches both rings from this process.
func (h *HDU) Detach() error { return errors.Join(h.Data.Detach(), h.Header.Detach()) }

// Destroy removes both rings (data block first, as dada_db -d does).
func (h *HDU) Destroy() error { return errors.Join(h.Data.Destroy(), h.Header.Destroy()) }

// Destroy removes the ring pair at key without attaching it fully: whatever
// exists of the data block and the header block is removed. It returns
// ErrNotFound if neither exists.
func Destroy(key Key) error {
	e1 := destroyKey(key)
	e2 := destroyKey(key.HeaderKey())
	if errors.Is(e1, ErrNotFound) && errors.Is(e2, ErrNotFound) {
		return fmt.Errorf("%w %s: nothing to destroy", ErrNotFound, key.Short())
	}
	if errors.Is(e1, ErrNotFound) || errors.Is(e2, ErrNotFound) {
		// a half ring: the other half was removed; report but succeed
		return nil
	}
	return errors.Join(e1, e2)
}
