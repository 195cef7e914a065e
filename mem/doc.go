// Package mem provides memory registration over pluggable memory providers,
// softroce's Go-native form of the kernel's peer-memory clients.
//
// A Provider owns some kind of memory and follows the peer_memory_client
// life cycle: Acquire (is this range mine?), GetPages (pin), Map (give the
// stack a []byte view), Unmap, PutPages, PageSize, Release. Optional
// capabilities are separate small interfaces found with type assertions
// (ContextProvider for the get/put context-private-data callbacks one
// vendor appends to the ABI, VersionedProvider, and later extensions), so a
// provider written against the base contract keeps working when the
// contract grows — the Go counterpart of one superset callback table whose
// extra entries may be empty.
//
// A Registry holds providers by name, registered and removed at run time.
// RegisterMemory asks them in order; the first that owns the range wins.
// Each decline carries a typed reason (NotMine, WrongDescriptor, Partial,
// ...), reported in a *ResolveError when nobody takes the range. A range
// that overlaps one provider's memory without lying inside it is refused
// with ErrSpansProviders. Limits on region count and size give
// *LimitError.
//
// The result is a *Region: the mapped view, its address, length, page size
// and provider, and its state. Accesses go through Region.Enter/Exit (or
// Access, ReadAt, WriteAt, FetchAdd, CompareSwap), a read-side guard of two
// atomic adds that never allocates. A provider revokes a registration
// through the CoreContext it got in GetPages; the region becomes invalid at
// once, Invalidate waits for accesses in flight, unmaps and unpins, then
// calls the region's OnInvalidate listeners. Every later access returns
// ErrInvalidated, so nothing touches the revoked memory again.
//
// Built-in providers: Heap (Go memory, the catch-all for Bytes
// descriptors), Mmap (anonymous mappings, optional huge pages and mlock),
// Shm (SysV shared memory by key or shmid), FDProvider (fd + offset +
// length, as ibv_reg_dmabuf_mr; memfd or any mmap-able fd) and
// Accelerator, a simulated device with its own address space, reachable
// only through Map/Unmap, whose Revoke and Free trigger invalidation. The
// mmap, shm, fd and accelerator providers are Linux-only and return
// ErrNotSupported elsewhere.
package mem
