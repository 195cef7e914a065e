package udp

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// io_uring ABI: constants and layouts from linux/io_uring.h.
const (
	iouOpPollAdd     = 6  // IORING_OP_POLL_ADD
	iouOpSendmsg     = 9  // IORING_OP_SENDMSG
	iouOpRecvmsg     = 10 // IORING_OP_RECVMSG
	iouOpAsyncCancel = 14 // IORING_OP_ASYNC_CANCEL
	iouOpSendmsgZC   = 48 // IORING_OP_SENDMSG_ZC (Linux 6.1)

	iosqeIOLink = 1 << 2 // IOSQE_IO_LINK

	iouEnterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	iouFeatSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP (Linux 5.4)
	iouFeatNodrop     = 1 << 1 // IORING_FEAT_NODROP (Linux 5.5)

	iouOffSQRing = 0          // IORING_OFF_SQ_RING
	iouOffSQEs   = 0x10000000 // IORING_OFF_SQES

	iouCQEFMore  = 1 << 1 // IORING_CQE_F_MORE
	iouCQEFNotif = 1 << 3 // IORING_CQE_F_NOTIF

	iouRegisterProbe = 8      // IORING_REGISTER_PROBE
	iouOpSupported   = 1 << 0 // IO_URING_OP_SUPPORTED

	iouSendZCReportUsage  = 1 << 3  // IORING_SEND_ZC_REPORT_USAGE (sqe.ioprio)
	iouNotifUsageZCCopied = 1 << 31 // IORING_NOTIF_USAGE_ZC_COPIED (notification cqe.res)
)

// iouSQOffsets is struct io_sqring_offsets.
type iouSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// iouCQOffsets is struct io_cqring_offsets.
type iouCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// iouParams is struct io_uring_params.
type iouParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  iouSQOffsets
	cqOff                                                                  iouCQOffsets
}

// iouSQE is struct io_uring_sqe (64 bytes) with the fields this package uses.
type iouSQE struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	opFlags  uint32 // msg_flags, poll32_events, cancel_flags, ...
	userData uint64
	_        [3]uint64
}

// iouCQE is struct io_uring_cqe (16 bytes; rings are set up without CQE32).
type iouCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// Compile-time checks of the layouts above.
var (
	_ [120]byte = [unsafe.Sizeof(iouParams{})]byte{}
	_ [64]byte  = [unsafe.Sizeof(iouSQE{})]byte{}
	_ [16]byte  = [unsafe.Sizeof(iouCQE{})]byte{}
)

// uringSetup is io_uring_setup(2). It is a variable so that tests can make
// it fail and check the fallback to recvmmsg/sendmmsg.
var uringSetup = func(entries uint32, p *iouParams) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// ring is one io_uring instance: a submission queue filled by a single
// goroutine at a time and a completion queue reaped by the same goroutine.
// It tracks pending, the requests submitted or queued whose result has not
// been reaped. Notifications (IORING_CQE_F_NOTIF: a zero-copy send's second
// completion) are not counted: their callers do, since the kernel posts one
// for some sends whose result lacks IORING_CQE_F_MORE (a linked send
// cancelled by an earlier failure, Linux 6.18).
type ring struct {
	fd      int
	mem     []byte // SQ and CQ rings (IORING_FEAT_SINGLE_MMAP)
	sqeMem  []byte
	sqes    []iouSQE
	sqHead  *uint32 // written by the kernel
	sqTail  *uint32 // written here
	sqMask  uint32
	sqSize  uint32
	cqHead  *uint32 // written here
	cqTail  *uint32 // written by the kernel
	cqMask  uint32
	cqes    []iouCQE
	tail    uint32 // local SQ tail; published to *sqTail by enter
	pending int
	calls   *atomic.Uint64 // incremented per io_uring_enter
}

// newRing sets up a ring of at least entries submission slots and checks
// that the kernel has what this package relies on: one mapping for both
// rings, no dropped completions, and the opcodes ops.
func newRing(entries uint32, calls *atomic.Uint64, ops ...uint8) (*ring, error) {
	var p iouParams
	fd, err := uringSetup(entries, &p)
	if err != nil {
		return nil, os.NewSyscallError("io_uring_setup", err)
	}
	r := &ring{fd: fd, calls: calls}
	if p.features&(iouFeatSingleMmap|iouFeatNodrop) != iouFeatSingleMmap|iouFeatNodrop {
		unix.Close(fd)
		return nil, fmt.Errorf("io_uring: kernel lacks IORING_FEAT_SINGLE_MMAP or IORING_FEAT_NODROP (Linux 5.5)")
	}
	for _, op := range ops {
		if !r.supports(op) {
			unix.Close(fd)
			return nil, fmt.Errorf("io_uring: opcode %d not supported: %w", op, errors.ErrUnsupported)
		}
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(iouCQE{})))
	r.mem, err = unix.Mmap(fd, iouOffSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("mmap", err)
	}
	r.sqeMem, err = unix.Mmap(fd, iouOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(iouSQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Munmap(r.mem)
		unix.Close(fd)
		return nil, os.NewSyscallError("mmap", err)
	}
	at := func(off uint32) unsafe.Pointer { return unsafe.Pointer(&r.mem[off]) }
	r.sqes = unsafe.Slice((*iouSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.sqHead, r.sqTail = (*uint32)(at(p.sqOff.head)), (*uint32)(at(p.sqOff.tail))
	r.sqMask, r.sqSize = *(*uint32)(at(p.sqOff.ringMask)), p.sqEntries
	r.cqHead, r.cqTail = (*uint32)(at(p.cqOff.head)), (*uint32)(at(p.cqOff.tail))
	r.cqMask = *(*uint32)(at(p.cqOff.ringMask))
	r.cqes = unsafe.Slice((*iouCQE)(at(p.cqOff.cqes)), p.cqEntries)
	array := unsafe.Slice((*uint32)(at(p.sqOff.array)), p.sqEntries)
	for i := range array {
		array[i] = uint32(i) // slot i of the ring always names SQE i
	}
	r.tail = atomic.LoadUint32(r.sqTail)
	return r, nil
}

// supports asks the kernel (IORING_REGISTER_PROBE) whether it knows op.
func (r *ring) supports(op uint8) bool {
	const nops = 256
	var buf [16 + nops*8]byte // struct io_uring_probe + io_uring_probe_op[nops]
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouRegisterProbe, uintptr(unsafe.Pointer(&buf[0])), nops, 0, 0)
	if e != 0 {
		return false
	}
	lastOp := buf[0]
	if op > lastOp {
		return false
	}
	flags := *(*uint16)(unsafe.Pointer(&buf[16+int(op)*8+2]))
	return flags&iouOpSupported != 0
}

// push returns a zeroed submission slot, submitting what is queued first if
// the queue is full; the request counts as pending from now on.
func (r *ring) push() (*iouSQE, error) {
	for r.tail-atomic.LoadUint32(r.sqHead) >= r.sqSize {
		if err := r.enter(0); err != nil {
			return nil, err
		}
	}
	s := &r.sqes[r.tail&r.sqMask]
	*s = iouSQE{}
	r.tail++
	r.pending++
	return s, nil
}

// queued returns how many pushed requests the kernel has not consumed yet.
func (r *ring) queued() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// enter submits what is queued and, if wait > 0, waits until at least wait
// completions are available. An interrupted wait returns nil: callers loop
// on the completion queue.
func (r *ring) enter(wait uint32) error {
	atomic.StoreUint32(r.sqTail, r.tail)
	flags := uintptr(0)
	if wait > 0 {
		flags = iouEnterGetEvents
	}
	r.calls.Add(1)
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.queued()), uintptr(wait), flags, 0, 0)
	switch e {
	case 0, unix.EINTR:
		return nil
	case unix.EAGAIN, unix.EBUSY:
		// Completions back up (kept by IORING_FEAT_NODROP): the caller
		// reaps and comes back.
		if r.ready() > 0 {
			return nil
		}
	}
	return os.NewSyscallError("io_uring_enter", e)
}

// ready returns how many completions wait in the completion queue.
func (r *ring) ready() uint32 { return atomic.LoadUint32(r.cqTail) - *r.cqHead }

// reap passes each available completion to fn and releases it, and returns
// how many there were.
func (r *ring) reap(fn func(userData uint64, res int32, flags uint32)) int {
	head, tail := *r.cqHead, atomic.LoadUint32(r.cqTail)
	n := int(tail - head)
	for ; head != tail; head++ {
		c := &r.cqes[head&r.cqMask]
		ud, res, fl := c.userData, c.res, c.flags
		atomic.StoreUint32(r.cqHead, head+1)
		if fl&iouCQEFNotif == 0 {
			r.pending--
		}
		fn(ud, res, fl)
	}
	return n
}

// drain waits until no request is pending, discarding completions
// (notifications that come later are discarded by later reaps).
func (r *ring) drain() error {
	for {
		r.reap(func(uint64, int32, uint32) {})
		if r.pending <= 0 {
			return nil
		}
		if err := r.enter(1); err != nil {
			return err
		}
	}
}

// close unmaps the rings and closes the ring's file descriptor; nothing may
// be pending (see drain).
func (r *ring) close() error {
	unix.Munmap(r.sqeMem)
	unix.Munmap(r.mem)
	return unix.Close(r.fd)
}
