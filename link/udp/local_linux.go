package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// Same-host lanes (Config.Local).
//
// An endpoint opened with Config.Local keeps an inbox: a file in /dev/shm
// named after its user, its socket's network namespace and its address,
// mapped shared, holding inboxLanes single-producer rings. Another such
// endpoint of the same user in the same network namespace that sends to
// that address finds the file, claims a lane and writes its datagrams
// there instead of into a socket: the same bytes (BTH to ICRC) but the ICRC,
// which the writer leaves out and the reader does not check (no wire,
// nothing to flip a bit; link.Packet.Local tells a tap to compute it), with
// no system call while the receiver reads. The receiver reads its lanes
// before its socket, in every read path (the view readers, ServeView and
// Poll, hand records to the device in place: viewLocal), and takes its
// socket too at least every localSocketTurn reads. A receiver about to wait
// for its socket counts itself in the inbox's sleepers first, clears the
// inbox's wake-up time and looks at its lanes once more; a sender that sees
// a sleeper after writing, and sets the time, sends it a datagram of 0
// bytes, which ends the wait and is dropped (a RoCE datagram is never
// empty). Later senders find the time set and send none for a while
// (wakeHold), or until a reader sleeps again. Lanes replace the kernel's loopback for softroce peers on
// one host, as a NIC's own loopback does for its QPs; traffic to anyone else
// (the kernel's rxe, other hosts, another user) goes through the socket.
//
// The file layout: a header page (magic, version, the receiver's pid, a
// closed flag, the sleepers count, the wake-up time, one 192-byte header per
// lane: owner, head, tail on their own cache lines), then the lanes' rings,
// laneSize bytes each. A record is recHdr bytes (length, source port, TOS,
// address size, source address) then the datagram, padded to 8 bytes; a
// length of recWrap sends the reader back to the ring's start. Head and tail
// are byte counts that only grow. Everything a reader takes from a lane is
// checked against the ring's bounds and copied out before it is parsed: a
// writer that breaks the format loses its lane's contents, never the
// reader's memory.

const (
	inboxMagic    = 0x53524c4e // "SRLN"
	inboxVersion  = 2          // 2: the wake-up time (offWoken)
	inboxLanes    = 16
	laneSize      = 4 << 20 // a power of two
	inboxHdrSize  = 4096
	laneHdrOff    = 256
	laneHdrSize   = 192
	recHdr        = 24
	recWrap       = 0xffffffff
	inboxFileSize = inboxHdrSize + inboxLanes*laneSize

	// localSocketTurn: a reader whose lanes keep it busy still reads its
	// socket at least once in this many reads.
	localSocketTurn = 8
	// localRetry is how long a destination with no inbox is sent to
	// through the socket before its inbox is looked for again, and how
	// often a peer's process is checked to be alive.
	localRetry = time.Second
	// localFullWait bounds how long a sender waits for room in a full
	// lane before it drops the datagram, as a full socket buffer would.
	// Waiting is the lanes' flow control (a lossless fabric's pause): a
	// burst larger than a lane (128 UC SENDs of 64 KiB from stock
	// ib_send_bw) to a reader that lost its processor for a few
	// milliseconds lost UC messages with a 2 ms bound. A lane that stays
	// full that long is stalled: its writes drop at once until its reader
	// takes something.
	localFullWait = 50 * time.Millisecond
)

// msgLocal marks a message filled from a lane (in msghdr.msg_flags, a bit
// the kernel does not return): decodeMsg sets link.Packet.Local from it.
const msgLocal = 0x10000000

// Header offsets.
const (
	offMagic    = 0
	offVersion  = 4
	offPid      = 8
	offClosed   = 12
	offSleepers = 64
	offWoken    = 72 // when a wake-up was sent to the sleepers (wakeSleepers; 0: none since one slept)
)

// wakeHold is how long a wake-up stands for later writers (wakeSleepers):
// a reader that has not run within it gets another, and a writer that
// died between claiming the wake-up and sending it stalls its reader at
// most this long (a variable for tests).
var wakeHold = time.Millisecond

// inboxDir is where inboxes live (a variable for tests).
var inboxDir = "/dev/shm"

// inboxPath is the inbox file of address ap in network namespace ns.
func inboxPath(ns uint64, ap netip.AddrPort) string {
	a := ap.Addr().WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	return fmt.Sprintf("%s/softroce.%d.%d.%x.%d", inboxDir, os.Getuid(), ns, a.AsSlice(), ap.Port())
}

// netnsOf returns the inode number of socket fd's network namespace
// (SIOCGSKNS), 0 if the kernel does not say.
func netnsOf(fd int) uint64 {
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		return 0
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if unix.Fstat(nsfd, &st) != nil {
		return 0
	}
	return st.Ino
}

// mapping is an inbox file mapped into this process.
type mapping struct {
	mem []byte
}

func (m *mapping) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&m.mem[off])) }
func (m *mapping) i32(off int) *int32  { return (*int32)(unsafe.Pointer(&m.mem[off])) }
func (m *mapping) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&m.mem[off])) }

func laneOwner(i int) int { return laneHdrOff + i*laneHdrSize }
func laneHead(i int) int  { return laneHdrOff + i*laneHdrSize + 64 }
func laneTail(i int) int  { return laneHdrOff + i*laneHdrSize + 128 }
func laneRing(m *mapping, i int) []byte {
	o := inboxHdrSize + i*laneSize
	return m.mem[o : o+laneSize : o+laneSize]
}

// mapInbox maps an inbox file.
func mapInbox(fd int) (*mapping, error) {
	mem, err := unix.Mmap(fd, 0, inboxFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return &mapping{mem: mem}, nil
}

// inbox is an endpoint's receiving side of its lanes.
type inbox struct {
	mu     sync.Mutex // the lanes' one reader; Close unmaps under it
	m      *mapping   // nil once closed
	path   string
	next   int                // the lane a read starts at (round robin)
	reads  int                // reads that found lanes busy since the socket's last turn
	mapped [inboxLanes]bool   // lanes whose ring the reader has paged in (mapAfter)
	seen   [inboxLanes]bool   // lanes the reader has found records in
	seenAt [inboxLanes]uint64 // and their tail then
	views  int                // viewLocal handlers running on the rings: close leaves the unmapping to the last
	pf     prefault
	closed bool
}

// openInbox creates the inbox of the endpoint bound on fd at local. A file
// left by a process that had the address before is replaced: this
// endpoint holds the address's port now.
func openInbox(fd int, ns uint64, local netip.AddrPort) (*inbox, error) {
	path := inboxPath(ns, local)
	markClosed(path)
	os.Remove(path)
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	defer unix.Close(f)
	if err := unix.Ftruncate(f, inboxFileSize); err != nil {
		unix.Unlink(path)
		return nil, &os.PathError{Op: "truncate", Path: path, Err: err}
	}
	m, err := mapInbox(f)
	if err != nil {
		unix.Unlink(path)
		return nil, err
	}
	atomic.StoreUint32(m.u32(offVersion), inboxVersion)
	atomic.StoreUint32(m.u32(offPid), uint32(os.Getpid()))
	atomic.StoreUint32(m.u32(offMagic), inboxMagic)
	sweepInboxes(path)
	return &inbox{m: m, path: path}, nil
}

// markClosed sets the closed flag of the inbox file at path, if there is
// one: its process ended without closing it (killed, or a C program's
// exit, which closes nothing), and senders that still map it would write
// into a ring no one reads until their next check of its process (a second
// later). A sender checks the flag at every batch and drops the peer; a
// connection's first messages to a restarted peer at the same address were
// lost so, and came again only with the connection manager's resend, 4 s
// later.
func markClosed(path string) {
	f, ok := openInboxFile(path)
	if !ok {
		return
	}
	defer unix.Close(f)
	var one [4]byte
	binary.NativeEndian.PutUint32(one[:], 1)
	unix.Pwrite(f, one[:], offClosed)
}

// openInboxFile opens the inbox file at path for reading and writing if it
// is one of this user's, of an inbox's size (not a symbolic link), and
// reports whether it did; the caller closes the descriptor.
func openInboxFile(path string) (int, bool) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Size != inboxFileSize || st.Uid != uint32(os.Getuid()) {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}

// sweepInboxes removes the inbox files of this user whose process ended
// without closing them (killed), other than keep: their pages would stay
// in tmpfs until the address was bound again. A file whose process cannot
// be told (another PID namespace sharing /dev/shm) may go too: its senders
// then find no inbox and use the socket.
func sweepInboxes(keep string) {
	prefix := fmt.Sprintf("softroce.%d.", os.Getuid())
	ents, err := os.ReadDir(inboxDir)
	if err != nil {
		return
	}
	for _, de := range ents {
		name := de.Name()
		if len(name) <= len(prefix) || name[:len(prefix)] != prefix {
			continue
		}
		path := inboxDir + "/" + name
		if path == keep {
			continue
		}
		var hdr [16]byte
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		n, _ := f.ReadAt(hdr[:], 0)
		f.Close()
		pid := int(*(*uint32)(unsafe.Pointer(&hdr[offPid])))
		if n == len(hdr) && *(*uint32)(unsafe.Pointer(&hdr[offMagic])) == inboxMagic && pid > 0 &&
			unix.Kill(pid, 0) == unix.ESRCH {
			os.Remove(path)
		}
	}
}

// openLocal opens the endpoint's inbox and lets it send to others'
// (Config.Local). Without /dev/shm or SIOCGSKNS it logs why and goes on
// with the socket alone.
func (e *Endpoint) openLocal() {
	var err error
	cerr := e.rc.Control(func(fd uintptr) {
		e.netns = netnsOf(int(fd))
		if e.netns == 0 {
			err = errors.New("the kernel does not name the socket's network namespace (SIOCGSKNS)")
			return
		}
		e.inbox, err = openInbox(int(fd), e.netns, e.local)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		e.inbox = nil
		if e.log != nil {
			e.log.Info("udp: no same-host lanes; every datagram goes through the socket", "err", err)
		}
		return
	}
	e.tx.local = true
	e.tx.wakeFn = e.tx.wake
}

// close marks the inbox closed for its senders, removes its file and
// unmaps it.
func (in *inbox) close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil
	}
	in.closed = true
	atomic.StoreUint32(in.m.u32(offClosed), 1)
	err := unix.Unlink(in.path)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		err = &os.PathError{Op: "remove", Path: in.path, Err: err}
	} else {
		err = nil
	}
	if in.views == 0 {
		in.unmap()
	}
	return err
}

// unmap ends the page-in work and unmaps the inbox (mu held).
func (in *inbox) unmap() {
	in.pf.end()
	unix.Munmap(in.m.mem)
	in.m = nil
}

// mapAfter starts the reader's page-in of lane i (ring) once it has read
// prefaultAfter bytes of it since it first found records there (tail: the
// lane's tail now).
func (in *inbox) mapAfter(i int, tail uint64, ring []byte) {
	switch {
	case !in.seen[i]:
		in.seen[i], in.seenAt[i] = true, tail
	case tail-in.seenAt[i] >= prefaultAfter:
		in.mapped[i] = true
		mapLane(&in.pf, ring)
	}
}

// pendingLocked reports a lane holding a record.
func (in *inbox) pendingLocked() bool {
	m := in.m
	for i := 0; i < inboxLanes; i++ {
		if atomic.LoadUint64(m.u64(laneHead(i))) != atomic.LoadUint64(m.u64(laneTail(i))) {
			return true
		}
	}
	return false
}

// sleep counts the caller as a sleeper, about to wait for the socket, and
// reports whether it may wait: false (and not counted) when a lane holds
// records.
func (in *inbox) sleep() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return true
	}
	atomic.AddInt32(in.m.i32(offSleepers), 1)
	// A wake-up sent before this one counted itself may still wait in the
	// socket; whatever is written after the look below must send another.
	atomic.StoreUint64(in.m.u64(offWoken), 0)
	if in.pendingLocked() {
		atomic.AddInt32(in.m.i32(offSleepers), -1)
		return false
	}
	return true
}

// wake uncounts a sleeper whose wait ended.
func (in *inbox) wake() {
	in.mu.Lock()
	if !in.closed {
		atomic.AddInt32(in.m.i32(offSleepers), -1)
	}
	in.mu.Unlock()
}

// fillLocal receives lane records into the armed messages h as recvmmsg would
// (length, source address, a TOS control message, a GRO control message
// for a run of equal datagrams from one source when the buffers are GRO's)
// and returns how many it filled, and whether the socket is due a read.
func (e *Endpoint) fillLocal(h []mmsghdr) (int, bool) {
	in := e.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return 0, true
	}
	m := in.m
	k := 0
	for l := 0; l < inboxLanes && k < len(h); l++ {
		i := (in.next + l) % inboxLanes
		ring, head, tail, ok := e.openLane(i)
		if !ok {
			continue
		}
		for k < len(h) && tail != head {
			t, ok := e.fillMsg(&h[k], ring, tail, head)
			if !ok {
				e.ctr.localCorrupt.Add(1)
				tail = head
				break
			}
			tail = t
			if h[k].n != ^uint32(0) {
				k++
			}
		}
		atomic.StoreUint64(m.u64(laneTail(i)), tail)
	}
	return k, in.endRead(k)
}

// endRead ends a read of the lanes that took k records: the next read
// starts at the next lane, and it reports whether the socket is due a read
// (nothing taken, or localSocketTurn reads since its last).
func (in *inbox) endRead(k int) bool {
	in.next = (in.next + 1) % inboxLanes
	if k == 0 {
		in.reads = 0
		return true
	}
	in.reads++
	if in.reads >= localSocketTurn {
		in.reads = 0
		return true
	}
	return false
}

// openLane returns lane i's ring, head and tail when it holds records (in.mu
// held); a lane holding more than a ring's worth, or a tail past its head,
// is emptied and counted corrupt.
func (e *Endpoint) openLane(i int) (ring []byte, head, tail uint64, ok bool) {
	in := e.inbox
	m := in.m
	head = atomic.LoadUint64(m.u64(laneHead(i)))
	tail = atomic.LoadUint64(m.u64(laneTail(i)))
	if head == tail {
		return nil, 0, 0, false
	}
	ring = laneRing(m, i)
	if !in.mapped[i] {
		in.mapAfter(i, tail, ring)
	}
	if head-tail > laneSize {
		e.ctr.localCorrupt.Add(1)
		atomic.StoreUint64(m.u64(laneTail(i)), head)
		return nil, 0, 0, false
	}
	return ring, head, tail, true
}

// laneRec is a lane record's header, as recordAt read it.
type laneRec struct {
	pos, n, size int  // its offset in the ring, the datagram's length, the bytes it takes
	wrap         bool // a wrap record (size: the rest of the ring)
	port         uint16
	tos, alen    uint8
	src          [16]byte
}

// from is the record's source address.
func (r laneRec) from() netip.AddrPort {
	if r.alen == 4 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(r.src[:4])), r.port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(r.src), r.port)
}

// recordAt reads the header of the record at tail (below head) once and
// checks it against the ring: ok is false for a record that breaks the
// format (past the ring or the head, a length out of range, an address
// not of the socket's family).
func (e *Endpoint) recordAt(ring []byte, tail, head uint64) (r laneRec, ok bool) {
	pos := int(tail % laneSize)
	if laneSize-pos < 8 {
		return r, false
	}
	r.pos = pos
	w := *(*uint32)(unsafe.Pointer(&ring[pos]))
	if w == recWrap {
		r.wrap, r.size = true, laneSize-pos
		return r, head-tail >= uint64(r.size) // false: a wrap past the head
	}
	r.n = int(w)
	r.size = (recHdr + r.n + 7) &^ 7
	if r.n < wire.ICRCLen || r.n > link.MaxDatagram || pos+r.size > laneSize || head-tail < uint64(r.size) {
		return r, false
	}
	var hdr [recHdr]byte
	copy(hdr[:], ring[pos:pos+recHdr])
	r.port, r.tos, r.alen = uint16(hdr[4])|uint16(hdr[5])<<8, hdr[6], hdr[7]
	if e.is6 && r.alen != 16 || !e.is6 && r.alen != 4 {
		return r, false
	}
	r.src = [16]byte(hdr[8:24])
	return r, true
}

// viewLocal hands lane records to handle in place, as the view readers
// (ServeView, Poll) hand out datagrams: pkts[i].Buf points into a lane's
// ring, valid until handle returns, and the lanes' tails move past them
// only then (a copy into a receive buffer, fillLocal, was a third copy of
// every byte: the writer's into the ring, this one, and the device's into
// a memory region). It returns how many it handed, and whether the socket
// is due a read (as fillLocal). A record is checked against the ring as
// fillLocal checks it; while handle runs, only its writer, a process of
// the same user, could change it (the file is the user's alone, mode
// 0600). Only with GRO buffers: without them, pkts' own buffers are the
// reader's and must stay in place.
func (e *Endpoint) viewLocal(pkts []link.Packet, handle func(pkts []link.Packet)) (int, bool) {
	in := e.inbox
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return 0, true
	}
	m := in.m
	var (
		tails [inboxLanes]uint64
		moved uint32 // lanes whose tail moves (bit i)
		bytes uint64
	)
	k := 0
	for l := 0; l < inboxLanes && k < len(pkts); l++ {
		i := (in.next + l) % inboxLanes
		ring, head, tail, ok := e.openLane(i)
		if !ok {
			continue
		}
		for k < len(pkts) && tail != head {
			rec, ok := e.recordAt(ring, tail, head)
			if !ok {
				e.ctr.localCorrupt.Add(1)
				tail = head
				break
			}
			tail += uint64(rec.size)
			if rec.wrap {
				continue
			}
			p := &pkts[k]
			d := rec.pos + recHdr
			p.Buf, p.N = ring[d:d+rec.n:d+rec.n], rec.n
			p.Src, p.Dst, p.TOS, p.Local = rec.from(), e.local, rec.tos, true
			p.IPHdrLen, p.TTL = 0, 0
			bytes += uint64(rec.n)
			k++
		}
		tails[i] = tail
		moved |= 1 << i
	}
	turn := in.endRead(k)
	if k == 0 {
		storeTails(m, &tails, moved)
		in.mu.Unlock()
		return 0, turn
	}
	in.views++
	in.mu.Unlock()

	e.ctr.localIn.Add(uint64(k))
	e.ctr.packetsIn.Add(uint64(k))
	e.ctr.bytesIn.Add(bytes)
	handle(pkts[:k])

	in.mu.Lock()
	in.views--
	if !in.closed {
		storeTails(m, &tails, moved)
	} else if in.views == 0 {
		in.unmap()
	}
	in.mu.Unlock()
	return k, turn
}

// storeTails gives back the ring space of the lanes in moved (bit i: lane
// i) up to tails[i].
func storeTails(m *mapping, tails *[inboxLanes]uint64, moved uint32) {
	for i := range tails {
		if moved&(1<<i) != 0 {
			atomic.StoreUint64(m.u64(laneTail(i)), tails[i])
		}
	}
}

// fillMsg fills message h from the ring's records at tail (below head) and
// returns the new tail; ok is false for a record that breaks the format. A
// wrap record fills nothing (h.n is then all ones). With GRO buffers (more
// room than one datagram) it packs a run of datagrams of one size from
// one source and TOS, as the kernel's UDP GRO would.
func (e *Endpoint) fillMsg(h *mmsghdr, ring []byte, tail, head uint64) (uint64, bool) {
	iov := h.hdr.Iov
	buf := unsafe.Slice(iov.Base, iov.Len)
	var (
		src  [16]byte
		port uint16
		tos  uint8
		alen uint8
		seg  int
		off  int
		segs int
	)
	for tail != head {
		rec, ok := e.recordAt(ring, tail, head)
		if !ok || rec.wrap {
			if segs > 0 {
				break // the run ends before it
			}
			if !ok {
				return tail, false
			}
			h.n = ^uint32(0)
			return tail + uint64(rec.size), true
		}
		n, size := rec.n, rec.size
		r := ring[rec.pos : rec.pos+size]
		rport, rtos, ralen := rec.port, rec.tos, rec.alen
		if segs > 0 {
			// Extend the run only with the same source, TOS and size
			// (the last of a run may be shorter), within the buffer.
			if rport != port || rtos != tos || ralen != alen || rec.src != src ||
				n > seg || off+n > len(buf) || segs >= maxGSOSegments {
				break
			}
		}
		if segs == 0 {
			port, tos, alen, src = rport, rtos, ralen, rec.src
			seg = n
			if n > len(buf) {
				// Too large for the reader's buffer: reported truncated.
				h.n = uint32(n)
				h.hdr.Flags = unix.MSG_TRUNC
				off = 0
				segs = 1
				tail += uint64(size)
				break
			}
		}
		copy(buf[off:off+n], r[recHdr:recHdr+n])
		off += n
		segs++
		tail += uint64(size)
		if n < seg || !e.gro {
			break // a short datagram ends a run; without GRO a message is one datagram
		}
	}
	if h.hdr.Flags&unix.MSG_TRUNC == 0 {
		h.n = uint32(off)
	}
	h.hdr.Flags |= msgLocal
	e.ctr.localIn.Add(uint64(segs))
	from := laneRec{port: port, alen: alen, src: src}.from()
	if h.hdr.Name != nil {
		h.hdr.Namelen = putSockaddr((*sockaddr)(unsafe.Pointer(h.hdr.Name)), from, e.is6, 0)
	}
	cl := 0
	if h.hdr.Control != nil {
		ctl := unsafe.Slice(h.hdr.Control, oobLen)
		lvl, typ := int32(unix.IPPROTO_IP), int32(unix.IP_TOS)
		if e.is6 {
			lvl, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
		}
		d, sp := putCmsg(ctl, lvl, typ, 4)
		putInt32(d, int32(tos))
		cl += sp
		if segs > 1 {
			d, sp := putCmsg(ctl[cl:], unix.SOL_UDP, unix.UDP_GRO, 4)
			putInt32(d, int32(seg))
			cl += sp
		}
	}
	h.hdr.SetControllen(cl)
	return tail, true
}

// recvm is every reader's recvmmsg: lane records first, then the socket
// (for the messages the lanes left, at least every localSocketTurn reads).
// It counts the system calls it makes (Stats.Syscalls): a read the lanes
// fill makes none.
// drained reports that the socket was read and gave fewer messages than
// asked: only then may the reader wait for the socket's next readiness.
func (e *Endpoint) recvm(fd uintptr, h []mmsghdr, sockOnly bool) (k int, errno unix.Errno, drained bool) {
	turn := true
	if e.inbox != nil && !sockOnly {
		k, turn = e.fillLocal(h)
	}
	if k == 0 {
		k, errno = recvmmsg(fd, h)
		e.ctr.syscalls.Add(1)
		return k, errno, errno == unix.EAGAIN || errno == 0 && k < len(h)
	}
	if turn && k < len(h) {
		n, errno := recvmmsg(fd, h[k:])
		e.ctr.syscalls.Add(1)
		if errno == 0 {
			return k + n, 0, k+n < len(h)
		}
		return k, 0, errno == unix.EAGAIN
	}
	return k, 0, false
}

// sleepLocal is called by a reader about to wait for its socket: it counts
// the reader as a sleeper and reports whether it may wait (false: the
// lanes hold records; read again). A reader that waits calls wakeLocal
// after.
func (e *Endpoint) sleepLocal() bool {
	if e.inbox == nil {
		return true
	}
	return e.inbox.sleep()
}

func (e *Endpoint) wakeLocal() {
	if e.inbox != nil {
		e.inbox.wake()
	}
}

// peer is a destination's inbox as a sender sees it.
type peer struct {
	m       *mapping // nil: no inbox (send through the socket) until retry
	lane    int
	owner   uint64
	pid     int
	retry   int64  // mono: when to look for the inbox again (m nil) or check the receiver's process
	touched bool   // written in this WriteBatch: publish its head and look for sleepers at its end
	head    uint64 // the lane's head as written, published at the end of a run (publish)
	stalled bool   // the lane stayed full for localFullWait: drop at once while its tail stays
	stallAt uint64 // the tail it stalled at
	pf      prefault
	pfd     int    // the inbox file until prefaultLane takes it (-1: taken, or none)
	head0   uint64 // the lane's head when claimed
}

// localSeq numbers the lanes this process claims: a lane's owner tag is
// the pid and that number.
var localSeq atomic.Uint32

// peerFor returns dst's inbox, nil when it has none (tx.mu held).
func (e *Endpoint) peerFor(dst netip.AddrPort) *peer {
	tx := &e.tx
	p := tx.peers[dst]
	now := mono()
	if p != nil && p.m == nil && now < p.retry {
		return nil
	}
	if p != nil && p.m != nil {
		if atomic.LoadUint32(p.m.u32(offClosed)) != 0 {
			// Its process closed it, or a new one at the address
			// replaced it (markClosed): look for the address's inbox
			// once now, as a restarted peer's is there already.
			e.dropPeer(dst, p, now)
		} else if now < p.retry {
			return p
		} else if unix.Kill(p.pid, 0) != unix.ESRCH { // time to check the receiver's process
			p.retry = now + int64(localRetry)
			return p
		} else {
			e.dropPeer(dst, p, now)
			return nil
		}
	}
	if tx.peers == nil {
		tx.peers = make(map[netip.AddrPort]*peer)
	}
	np := e.openPeer(dst)
	np.retry = now + int64(localRetry)
	tx.peers[dst] = np
	if np.m == nil {
		return nil
	}
	e.ctr.localPeers.Add(1)
	return np
}

// dropPeer forgets a peer whose inbox closed or whose process ended.
func (e *Endpoint) dropPeer(dst netip.AddrPort, p *peer, now int64) {
	if p.m != nil {
		atomic.CompareAndSwapUint64(p.m.u64(laneOwner(p.lane)), p.owner, 0)
		p.release()
	}
	e.tx.peers[dst] = &peer{retry: now + int64(localRetry)}
}

// openPeer looks for dst's inbox and claims a lane in it.
func (e *Endpoint) openPeer(dst netip.AddrPort) *peer {
	fd, ok := openInboxFile(inboxPath(e.netns, dst))
	if !ok {
		return &peer{}
	}
	defer unix.Close(fd)
	m, err := mapInbox(fd)
	if err != nil {
		return &peer{}
	}
	if atomic.LoadUint32(m.u32(offMagic)) != inboxMagic || atomic.LoadUint32(m.u32(offVersion)) != inboxVersion ||
		atomic.LoadUint32(m.u32(offClosed)) != 0 {
		unix.Munmap(m.mem)
		return &peer{}
	}
	pid := int(atomic.LoadUint32(m.u32(offPid)))
	if unix.Kill(pid, 0) == unix.ESRCH {
		// Left by a process that ended (killed) before a new one bound
		// the address and replaced the file: what is written there is
		// never read.
		unix.Munmap(m.mem)
		return &peer{}
	}
	owner := uint64(os.Getpid())<<32 | uint64(localSeq.Add(1))
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < inboxLanes; i++ {
			o := m.u64(laneOwner(i))
			cur := atomic.LoadUint64(o)
			if cur != 0 {
				// Second pass: take the lanes of processes that ended.
				if pass == 0 || unix.Kill(int(cur>>32), 0) != unix.ESRCH {
					continue
				}
			}
			if atomic.CompareAndSwapUint64(o, cur, owner) {
				pr := &peer{m: m, lane: i, owner: owner, pid: pid, pfd: -1}
				pr.head0 = atomic.LoadUint64(m.u64(laneHead(i)))
				if dfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
					pr.pfd = dfd // for prefaultLane, once the lane carries prefaultAfter bytes
				}
				return pr
			}
		}
	}
	unix.Munmap(m.mem)
	return &peer{} // every lane taken: the socket
}

// Lanes' first pass. tmpfs gives a sparse file its pages at their first
// touch, and each such fault stops the writer, and the reader in its own
// mapping, once per 4 KiB page. On a virtual machine with costly faults
// (16 µs a page measured, where fallocate and MADV_POPULATE_WRITE take
// 0.4 µs a page) a lane's first 4 MiB made a 64 KiB MPI ping-pong's first
// 64 round trips ten times as slow as the rest. A hypervisor that shadows
// the guest's page tables (PVM) stops the first access to each page even
// after that, 6 µs a page measured, so every page is touched once as well.
// The work starts once a lane has carried prefaultAfter bytes, and runs
// beside the traffic, in a goroutine per lane and side: done
// inline, its ~10 ms delayed a new lane's first datagram past tight
// retransmit timers. Until it is done the lane's first pass faults as
// before. The ring's memory is committed at once (laneSize per lane in
// use, as its first pass would commit it); a kernel without the calls
// (MADV_POPULATE_* is 5.14) leaves the faults to the first pass.

// prefaultAfter is how much a lane carries before its page-in starts:
// traffic of a few messages (a connection manager's, cmtime's hundred
// connections) does not pay for it, nor a program's first messages wait
// for processors busy with it (cmtime's connections took 5-12 ms instead
// of 1 ms with the page-in at the lane's claim); a stream starts it
// within its first 256 KiB.
const prefaultAfter = 256 << 10

// prefault is a mapping's background page-in work (prefaultLane, mapLane):
// it is stopped and waited for before the mapping goes.
type prefault struct {
	wg   sync.WaitGroup
	stop atomic.Bool
}

// end stops the work and waits for it.
func (pf *prefault) end() {
	pf.stop.Store(true)
	pf.wg.Wait()
}

// prefaultLane starts the writer's page-in of lane i of the inbox mapped
// at m; dfd is the inbox file, which the goroutine closes.
func prefaultLane(pf *prefault, dfd int, m *mapping, i int) {
	pf.wg.Add(1)
	go func() {
		defer pf.wg.Done()
		defer unix.Close(dfd)
		ring := laneRing(m, i)
		unix.Fallocate(dfd, 0, int64(inboxHdrSize+i*laneSize), laneSize)
		unix.Madvise(ring, unix.MADV_POPULATE_WRITE)
		if raceEnabled {
			return // an atomic add of 0 beside the writer's copies: a report
		}
		// A write access that changes nothing: an atomic add of 0 (the
		// writer may be writing the same word; a reclaimed lane's reader
		// may be reading a dead writer's records).
		for p := 0; p < len(ring) && !pf.stop.Load(); p += pageSize {
			atomic.AddUint32((*uint32)(unsafe.Pointer(&ring[p])), 0)
			touchPace(p)
		}
	}()
}

// mapLane starts the reader's page-in of a lane's ring (mapAfter): a read
// of every page.
func mapLane(pf *prefault, ring []byte) {
	pf.wg.Add(1)
	go func() {
		defer pf.wg.Done()
		unix.Madvise(ring, unix.MADV_POPULATE_READ)
		var sum uint32
		for p := 0; p < len(ring) && !pf.stop.Load(); p += pageSize {
			sum += atomic.LoadUint32((*uint32)(unsafe.Pointer(&ring[p])))
			touchPace(p)
		}
		touchSink.Add(sum)
	}()
}

// touchPace paces a page-in loop at offset off: a pause after every
// touchBurst pages, so that the work (~6 ms of a processor per lane and
// side where faults are costly) does not hold a processor while both
// sides' traffic starts (on two processors, one burst each delayed a new
// connection's first answer past a 10 ms loss probe).
func touchPace(off int) {
	if (off/pageSize)%touchBurst == touchBurst-1 {
		time.Sleep(touchPause)
	}
}

const (
	touchBurst = 16
	touchPause = 200 * time.Microsecond
)

// pageSize is the unit the lanes are touched in (the smallest page size
// of the platforms softroce runs on).
const pageSize = 4096

// touchSink keeps mapLane's reads.
var touchSink atomic.Uint32

// release ends the page-in of a peer's lane, closes what it holds of the
// inbox file and unmaps it.
func (p *peer) release() {
	p.pf.end()
	if p.pfd >= 0 {
		unix.Close(p.pfd)
		p.pfd = -1
	}
	unix.Munmap(p.m.mem)
}

// closePeers gives up every lane the endpoint holds (tx.mu held).
func (e *Endpoint) closePeers() {
	for dst, p := range e.tx.peers {
		if p.m != nil {
			atomic.CompareAndSwapUint64(p.m.u64(laneOwner(p.lane)), p.owner, 0)
			p.release()
		}
		delete(e.tx.peers, dst)
	}
}

// writeLocal writes the leading packets of pkts whose destinations have
// inboxes into their lanes and returns how many it took (tx.mu held). A
// datagram a full lane has no room for within localFullWait is dropped and
// counted, as a full socket buffer drops one; it counts as sent.
func (e *Endpoint) writeLocal(pkts []link.Packet) (int, error) {
	tx := &e.tx
	np := 0
	var (
		last              *peer
		out, drops, bytes uint64
	)
	for np < len(pkts) {
		p := &pkts[np]
		if !p.Dst.IsValid() || p.Dst.Addr().IsMulticast() {
			break
		}
		pr := last
		if pr == nil || tx.lastDst != p.Dst {
			pr = e.peerFor(p.Dst)
			if pr == nil {
				break
			}
			if last != nil && last != pr {
				e.wakePeer(last, tx.lastDst)
			}
			last, tx.lastDst = pr, p.Dst
		}
		_, src, _, err := e.addrs(p)
		if err == nil && p.Len()+e.ipOverhead() > e.mtu {
			// As the socket refuses it: RoCE does not fragment.
			err = e.writeError(unix.EMSGSIZE, p)
		}
		if err != nil {
			if np == 0 {
				return 0, err
			}
			break
		}
		if sp := p.Src.Port(); tx.maxPorts > 0 && sp != 0 {
			src = netip.AddrPortFrom(src.Addr(), sp)
		}
		// No ICRC: the reader does not check it (nothing on the way can
		// flip a bit), and computing it was a sixth of the writer's time
		// in a WRITE stream. Local tells a tap (link/tee) to compute it
		// for what it reports.
		p.Local = true
		// Counted at the end: an atomic add waits for the record's
		// stores to land, and per record that held the sender up for
		// each record's cache misses in turn.
		if e.putRecord(pr, p, src) {
			out++
			bytes += uint64(p.Len())
		} else {
			drops++
		}
		p.Src = src
		np++
	}
	if last != nil {
		e.wakePeer(last, tx.lastDst)
	}
	e.ctr.localOut.Add(out)
	e.ctr.packetsOut.Add(out)
	e.ctr.bytesOut.Add(bytes)
	if drops > 0 {
		e.ctr.localDrops.Add(drops)
	}
	return np, nil
}

// ipOverhead is the IP and UDP header bytes of a datagram.
func (e *Endpoint) ipOverhead() int {
	if e.is6 {
		return 48
	}
	return 28
}

// putRecord appends p (from src) to pr's lane, waiting up to localFullWait
// for room; false: no room (dropped). The record is published with the
// run's others (publish): a store that publishes waits for every store
// before it to land (as any atomic read-modify-write does), and once per
// record it held the sender up for each record's cache misses in turn
// (92 % of the time of this function, in perf, on a 1 MiB WRITE stream).
func (e *Endpoint) putRecord(pr *peer, p *link.Packet, src netip.AddrPort) bool {
	m := pr.m
	ring := laneRing(m, pr.lane)
	n := p.Len()
	size := uint64((recHdr + n + 7) &^ 7)
	tp := m.u64(laneTail(pr.lane))
	if !pr.touched {
		pr.head = atomic.LoadUint64(m.u64(laneHead(pr.lane)))
	}
	head := pr.head
	var deadline int64
	for {
		tail := atomic.LoadUint64(tp)
		if tail > head || head-tail > laneSize {
			return false // a broken lane: its reader resets it
		}
		pos := head % laneSize
		need := size
		if pos+size > laneSize {
			need += laneSize - pos // the wrap record takes the rest
		}
		if laneSize-(head-tail) >= need {
			if pos+size > laneSize {
				*(*uint32)(unsafe.Pointer(&ring[pos])) = recWrap
				head += laneSize - pos
			}
			pr.stalled = false
			break
		}
		if pr.stalled && tail == pr.stallAt {
			return false
		}
		now := mono()
		if deadline == 0 {
			deadline = now + int64(localFullWait)
			e.ctr.localFull.Add(1)
			if pr.touched {
				publish(pr) // let the reader see what waits
			}
		} else if now > deadline {
			pr.stalled, pr.stallAt = true, tail
			return false
		}
		e.wakeSleepers(m, p.Dst)
		time.Sleep(20 * time.Microsecond)
	}
	pos := head % laneSize
	r := ring[pos : pos+size]
	*(*uint32)(unsafe.Pointer(&r[0])) = uint32(n)
	r[4], r[5] = byte(src.Port()), byte(src.Port()>>8)
	r[6] = p.TOS
	a := src.Addr()
	if a.Is4() {
		r[7] = 4
		a4 := a.As4()
		copy(r[8:24], a4[:])
	} else {
		r[7] = 16
		a16 := a.As16()
		copy(r[8:24], a16[:])
	}
	d := r[recHdr:]
	if len(p.Data) == 0 {
		copy(d, p.Buf[:p.N])
	} else {
		at := p.DataAt
		c := copy(d, p.Buf[:at])
		c += copy(d[c:], p.Data)
		copy(d[c:], p.Buf[at:p.N])
	}
	pr.head = head + size
	pr.touched = true
	return true
}

// publish makes the records written to pr's lane visible to its reader.
func publish(pr *peer) {
	atomic.StoreUint64(pr.m.u64(laneHead(pr.lane)), pr.head)
	if pr.pfd >= 0 && pr.head-pr.head0 >= prefaultAfter {
		prefaultLane(&pr.pf, pr.pfd, pr.m, pr.lane)
		pr.pfd = -1
	}
}

// wakePeer sends pr's receiver a wake-up when a reader of it sleeps.
func (e *Endpoint) wakePeer(pr *peer, dst netip.AddrPort) {
	if !pr.touched {
		return
	}
	pr.touched = false
	publish(pr)
	e.wakeSleepers(pr.m, dst)
}

// wakeSleepers sends the inbox m's sleepers a wake-up, unless none sleeps
// or another writer sent one less than wakeHold ago: a sleeper that has not
// run since its wake-up needs no second one (the datagram costs the sender
// a trip through the kernel's UDP path and the receiver a wake-up; a C
// program's thread that sent a DREQ a call found its peer asleep for half
// of them). The first writer after a sleeper counted itself (inbox.sleep
// clears offWoken) sends it. The time is the wall clock's, which every
// process reads alike; a clock that steps back only sends one more.
func (e *Endpoint) wakeSleepers(m *mapping, dst netip.AddrPort) {
	if atomic.LoadInt32(m.i32(offSleepers)) <= 0 {
		return
	}
	w := atomic.LoadUint64(m.u64(offWoken))
	now := uint64(time.Now().UnixNano())
	if d := int64(now - w); w != 0 && d >= 0 && d < int64(wakeHold) {
		return
	}
	if !atomic.CompareAndSwapUint64(m.u64(offWoken), w, now) {
		return // another writer sends it
	}
	if !e.sendWake(dst) {
		// Not sent (a full send buffer, an address gone): the next
		// writer tries again.
		atomic.CompareAndSwapUint64(m.u64(offWoken), now, 0)
	}
}

// sendWake sends an empty datagram to dst's socket (tx.mu held), without
// allocating: the address and the call are the endpoint's (wakeTo, wakeFn).
// It reports whether the kernel took it.
func (e *Endpoint) sendWake(dst netip.AddrPort) bool {
	tx := &e.tx
	tx.wakeLen = putSockaddr(&tx.wakeTo, dst, e.is6, e.scope)
	e.ctr.localWakes.Add(1)
	e.ctr.syscalls.Add(1)
	tx.wakeErr = 0
	if tx.fd >= 0 {
		tx.wake(uintptr(tx.fd))
	} else if e.rc.Control(tx.wakeFn) != nil {
		return false
	}
	return tx.wakeErr == 0
}

// wake is sendWake's system call on socket fd.
func (tx *txState) wake(fd uintptr) {
	_, _, tx.wakeErr = unix.RawSyscall6(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&tx.wakeTo)), uintptr(tx.wakeLen))
}
