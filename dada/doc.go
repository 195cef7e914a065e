// Package dada implements PSRDADA ring buffers in pure Go, bit-compatible
// with the shared-memory ABI of the C psrdada library 1.1.0, so that Go
// programs and the stock tools (dada_db, dada_junkdb, dada_dbnull,
// dada_dbdisk, dada_dbmonitor, ...) can share one ring.
//
// # Rings
//
// A ring ("ipcbuf" in C, Ring here) is a System V shared memory sync segment
// at key B, nbufs data segments and semaphore sets. Every key is derived
// from B in steps of 0x10000 as the C creator derives them: the 2-semaphore
// connect set at B+0x10000, one 5-semaphore set per reader at
// B+(2+r)·0x10000 (r < 8), and data segment i at B+(10+i)·0x10000. The
// derived keys are also stored in the sync segment, and attachers read them
// from there. All objects have permissions 0666.
//
// The sync segment is the C struct ipcsync_t of src/ipcbuf.h on 64-bit
// Linux (528 bytes: semaphore keys, nbufs, bufsz, the writer's w_buf_next,
// w_buf_curr, w_state and w_xfer, per reader r_bufs, r_states and r_xfers
// for 8 readers, n_readers, 8 transfer slots of s_buf, s_byte, eod, e_buf,
// e_byte, and on_device_id) followed by count[nbufs] and the unaligned
// shmkey[nbufs], in native byte order. Semaphores start as the C code sets
// them: WRITE 1, READ n_readers, and per reader SODACK 8, EODACK 8, FULL 0,
// CLEAR 0, READER_CONN 1. Lock and unlock operations use SEM_UNDO, so the
// kernel gives a lock back when its holder dies; nothing else does.
//
// The protocol is the one of src/ipcbuf.c and src/ipcio.c, step for step:
// the first buffer a writer opens raises start of data; each filled buffer
// adds one to every reader's FULL; a writer reuses a slot only after taking
// one CLEAR from every reader for each pending pass (count[]); a buffer
// marked filled with fewer than bufsz bytes, or the last one at Close, ends
// the transfer (end of data, with its byte count); transfers are counted in
// w_xfer and r_xfers exactly as in C. A reader gets a slot by READ and the
// first free READER_CONN in order of r_bufs.
//
// # Header plus data unit
//
// Every psrdada client uses a pair of rings, an HDU: the data block at key K
// and a header block at K+1 with 8 buffers of (by default) 4096 bytes. Each
// transfer (observation) starts with an ASCII header (type Header: "KEY
// value" lines, HDR_SIZE required) written into one header buffer and ended
// there, as psrdada 1.1 writers do, followed by the data.
//
//	h, err := dada.Create(dada.Config{Key: 0xdada, NBufs: 8, BufSize: 1 << 20})
//	w, err := h.OpenWriter(ctx, dada.WriterOptions{})
//	err = w.WriteHeader(hdr)
//	_, err = w.Write(data) // or OpenBlock / MarkFilled to place data in place
//	err = w.Close()        // end of data, unlock
//
// and in another process (or another Connect in the same one):
//
//	h, err := dada.Connect(0xdada, dada.AttachOptions{})
//	r, err := h.OpenReader(ctx)
//	hdr, err := r.ReadHeader()
//	n, err := io.Copy(dst, r) // or NextBlock / MarkCleared
//
// One attachment (HDU) holds at most one Writer or Reader, as one C
// dada_hdu_t does. Every blocking wait takes a context: semaphores are
// waited for with semtimedop in short slices, checking the context between.
//
// # Direct placement and RDMA
//
// Writer.OpenBlock returns the next free block whole, with its slot index,
// so that a receiver (for example an RDMA engine) can land data in place and
// then call MarkFilled with the byte count. Ring.Blocks gives, for every
// block, its key, shmid, address in this process and a []byte view: what a
// memory registration needs. The kernel places separately attached segments
// where it likes; with AttachOptions.Layout LayoutContiguous (or
// LayoutContiguousTry) and a page-multiple block size, the blocks are
// attached in ascending order into one reserved address range (mmap
// PROT_NONE, then shmat with SHM_REMAP at consecutive addresses), so that
// ContiguousView covers the whole ring and one memory region can be
// registered. Contiguous checks the actual addresses. Other processes,
// including the C tools, see the same pages whatever layout each uses.
//
// # Errors
//
// Errors a user can hit say what to do and match sentinels with errors.Is:
// ErrExists, ErrNotFound, ErrKeyCollision (*KeyCollisionError names the key
// and the ring that uses it), ErrNoMemory (*NoMemoryError reports
// kernel.shmmax, kernel.shmall and free memory), ErrWriterDied
// (*WriterDiedError: the previous writer exited mid-transfer; its SEM_UNDO
// released the lock but readers may wait forever), ErrBadLayout,
// ErrDestroyed and others. Create checks every key before creating anything
// and removes what it created if a later step fails; Destroy removes
// whatever exists of a ring, even a half-destroyed one.
//
// Where psrdada would let a writer carry on after its predecessor died (in
// the WRITING state, without a start of data, so that readers can hang),
// OpenWriter returns a *WriterDiedError; with WriterOptions.Recover it ends
// the dead writer's transfer after the last buffer it marked filled, so
// readers see a clean end of data, and starts a new one.
//
// A reader killed while it held a slot leaves the slot's state behind (its
// locks come back through SEM_UNDO). As in psrdada 1.1.0, a reader's r_bufs
// steps past the end-of-data buffer too, so the next reader (Go or C) that
// takes the slot continues at the next transfer. OpenReader also handles what
// the C reader does not: a dead reader that held a buffer (its FULL already
// taken), and one that had taken a transfer's header but not finished its
// data, whose rest the first ReadHeader skips (Reader.Rejoin tells).
//
// Detaching a contiguous attachment replaces each block by reserved pages
// before the range is unmapped, so it never unmaps addresses another thread
// mapped in the meantime.
//
// # Differences from the C library
//
// Header.Set puts a new key on its own line before "DATA" (C joins it to
// that line). Create leaves nothing behind on failure (dada_db leaves the
// data block when the header block fails). Viewers (unlocked readers) and
// CUDA device buffers are not implemented; Ring.Stats gives what
// dada_dbmonitor shows.
package dada
