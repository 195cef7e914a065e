package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/link/udp"
)

// UDPRecvConfig controls RecvUDP.
type UDPRecvConfig struct {
	Format PacketFormat
	// Window is how many ring blocks are open at once (default 2, at most
	// NBufs-1): a packet may arrive this many blocks late and still be placed.
	Window int
	// IdleTimeout ends the observation when no packet came for this long
	// after the first (default 1 s).
	IdleTimeout time.Duration
	// Packets ends the observation after this many packets (sequence
	// numbers), lost ones included; 0: only the idle timeout ends it.
	Packets uint64
	// MaxGap is the largest forward jump in blocks a sequence number may make;
	// packets jumping further are counted Bad and dropped (default 1024).
	MaxGap uint64
	// Header is the observation header template (default: HDR_SIZE 4096
	// only). RecvUDP adds UTC_START (first packet), PKT_START (its sequence
	// number), PKT_SIZE, PKT_HEADER, OBS_OFFSET 0 and, if Packets is set,
	// TRANSFER_SIZE.
	Header *dada.Header
	// Batch is the number of datagrams per recvmmsg (default 64).
	Batch int
	// NoGRO turns UDP generic receive offload off. With GRO (Linux, used
	// when the kernel has it) a run of datagrams of one flow arrives as one
	// buffer, scattered here straight into the ring's packet slots.
	NoGRO bool
	// Stats receives the live counters (may be nil).
	Stats *Stats
	// Logger receives progress messages; nil is silent.
	Logger *slog.Logger
}

// Summary describes one finished observation.
type Summary struct {
	Bytes    uint64 // data bytes in the transfer (zero fill included)
	Blocks   uint64 // blocks marked filled
	Packets  uint64 // UDP: packets placed
	Lost     uint64 // UDP: packets zero-filled
	Elapsed  time.Duration
	Header   *dada.Header // the header written to the ring
	StartSeq uint64       // UDP: the first packet's sequence number
	Offload  bool         // UDP: GRO (receiver) or GSO (sender) was used
	Via      string       // RoCE: "RDMA WRITE WITH IMM" or "SEND", and the number of QPs
}

// Gbps returns the transfer's data rate in Gb/s.
func (s Summary) Gbps() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Bytes) * 8 / s.Elapsed.Seconds() / 1e9
}

type openBlock struct {
	data []byte
	bits []uint64 // one bit per packet slot
	got  uint64   // packets placed
}

// udpRecv is the state of one observation.
type udpRecv struct {
	cfg   UDPRecvConfig
	f     PacketFormat
	st    *Stats
	w     *dada.Writer
	ring  *dada.Ring
	ppb   uint64 // packets per block
	bufsz int

	win      []openBlock
	winStart uint64 // observation block number of win[0]
	started  bool
	start    uint64 // sequence number of packet index 0
	next     uint64 // highest index placed + 1
	received uint64
	limitHit bool
	gro      bool
	t0, last time.Time // first and last packet
	sum      Summary
}

// RecvUDP receives one observation from conn into the ring hdu: it locks the
// ring for writing, waits for the first packet, writes the header and places
// each packet's payload at the position its sequence number gives, until
// cfg.Packets packets or cfg.IdleTimeout without packets, then ends the
// transfer (the last block short) and unlocks the ring. The ring's block
// size must be a multiple of the payload size. ctx cancels the observation
// (the transfer is ended cleanly with what arrived).
func RecvUDP(ctx context.Context, conn *net.UDPConn, hdu *dada.HDU, cfg UDPRecvConfig) (Summary, error) {
	f, err := cfg.Format.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	ring := hdu.Data
	bufsz := ring.BufSize()
	if bufsz%f.PayloadSize != 0 {
		return Summary{}, fmt.Errorf("%w: the ring's block size %d is not a multiple of the %d-byte packet payload", ErrConfig, bufsz, f.PayloadSize)
	}
	if cfg.Window <= 0 {
		cfg.Window = 2
	}
	if n := ring.NBufs(); cfg.Window > n-1 {
		cfg.Window = max(n-1, 1)
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = time.Second
	}
	if cfg.MaxGap == 0 {
		cfg.MaxGap = 1024
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	if cfg.Stats == nil {
		cfg.Stats = new(Stats)
	}
	r := &udpRecv{cfg: cfg, f: f, st: cfg.Stats, ring: ring, ppb: uint64(bufsz / f.PayloadSize), bufsz: bufsz}
	r.win = make([]openBlock, cfg.Window)
	for i := range r.win {
		r.win[i].bits = make([]uint64, (r.ppb+63)/64)
	}
	w, err := hdu.OpenWriter(ctx, dada.WriterOptions{})
	if err != nil {
		return Summary{}, err
	}
	r.w = w
	err = r.loop(ctx, conn)
	if ferr := r.finish(); err == nil {
		err = ferr
	}
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && r.started {
		r.st.Transfers.Add(1)
	}
	return r.sum, err
}

// rxBatch is the receive buffers of one RecvUDP: up to B messages of K
// datagram slots each (K > 1 with GRO), every slot a header buffer and a
// payload buffer aimed at the ring slot of the packet expected there (or at
// scratch).
type rxBatch struct {
	bc      *udp.BatchConn
	B, K    int
	kk      int // datagrams expected per message (GRO adapts it)
	plen    int
	hdrs    []byte
	scratch []byte
	trash   []byte
	inRing  []bool   // slot s is aimed at the ring at its expected index
	expect  []uint64 // expected index of slot s
	state   []uint8  // slotEmpty, slotPlaced or slotPending
}

// Slot states of an rxBatch.
const (
	slotEmpty   = iota // empty or bad
	slotPlaced         // landed in the ring where its sequence number says
	slotPending        // a good datagram still to be placed (from scratch)
)

func (x *rxBatch) hdr(s, hl int) []byte { return x.hdrs[s*hl : (s+1)*hl] }

func (x *rxBatch) scr(s, pl int) []byte { return x.scratch[s*pl : (s+1)*pl] }

// newRxBatch turns GRO on if wanted and allocates the receive buffers.
func (r *udpRecv) newRxBatch(conn *net.UDPConn) (*rxBatch, error) {
	f := r.f
	x := &rxBatch{B: r.cfg.Batch, K: 1, kk: 1, plen: f.PacketLen()}
	r.gro = !r.cfg.NoGRO && udp.EnableGRO(conn)
	if r.gro {
		x.K = max(1, min(64, 65535/x.plen))
	}
	bc, err := udp.NewBatchConn(conn, x.B, 2*x.K+1)
	if err != nil {
		return nil, err
	}
	slots := x.B * x.K
	x.bc = bc
	x.hdrs = make([]byte, slots*f.HeaderLen)
	x.scratch = make([]byte, slots*f.PayloadSize)
	x.trash = make([]byte, x.B)
	x.inRing = make([]bool, slots)
	x.expect = make([]uint64, slots)
	x.state = make([]uint8, slots)
	return x, nil
}

// loop receives batches and places their packets until the packet limit,
// the idle timeout or the end of ctx.
func (r *udpRecv) loop(ctx context.Context, conn *net.UDPConn) error {
	x, err := r.newRxBatch(conn)
	if err != nil {
		return err
	}
	last := time.Now()
	slice := min(r.cfg.IdleTimeout, 100*time.Millisecond)
	for {
		if ctx.Err() != nil {
			return nil
		}
		if r.started && (r.limitHit || time.Since(last) >= r.cfg.IdleTimeout) {
			return nil
		}
		M := r.aim(x)
		conn.SetReadDeadline(time.Now().Add(slice))
		n, err := x.bc.Recv(M, r.gro)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return fmt.Errorf("pipeline: receiving: %w", err)
		}
		last = time.Now()
		if !r.started {
			r.t0 = last
		}
		r.last = last
		r.classify(x, n)
		if r.started {
			r.countReordered(x, n)
		}
		r.keepInPlace(x, n)
		for s := 0; s < n*x.K; s++ {
			if x.state[s] != slotPending {
				continue
			}
			if err := r.place(x, s); err != nil {
				return err
			}
		}
		if r.cfg.Packets > 0 && r.received >= r.cfg.Packets {
			r.limitHit = true
		}
		// idle counts from here: waiting for a free block is not idleness
		last = time.Now()
	}
}

// aim points each datagram slot's payload at the ring slot of the next
// indices (or at scratch) and returns how many messages to receive.
func (r *udpRecv) aim(x *rxBatch) int {
	M, K := max(1, x.B/x.kk), x.K
	for i := 0; i < M; i++ {
		for j := 0; j < K; j++ {
			s := i*K + j
			e := r.next + uint64(i*x.kk+j)
			dst, ok := r.slot(e)
			x.inRing[s] = ok && j < x.kk
			x.expect[s] = e
			if !x.inRing[s] {
				dst = x.scr(s, r.f.PayloadSize)
			}
			x.bc.Add(i, 2*j, x.hdr(s, r.f.HeaderLen))
			x.bc.Add(i, 2*j+1, dst)
		}
		x.bc.Add(i, 2*K, x.trash[i:i+1])
		x.bc.SetLen(i, 2*K+1)
	}
	return M
}

// classify splits each of the n messages received into datagrams, marks
// the good ones pending and counts the bad ones; the first message sets how
// many datagrams the next batch expects per message.
func (r *udpRecv) classify(x *rxBatch, n int) {
	K, plen := x.K, x.plen
	for i := 0; i < n; i++ {
		L, g := x.bc.Len(i), x.bc.GSOSize(i)
		cnt := 1
		if g > 0 {
			cnt = (L + g - 1) / g
		}
		if i == 0 {
			x.kk = 1
			if g == plen {
				x.kk = min(cnt, K)
			}
		}
		for j := 0; j < K; j++ {
			x.state[i*K+j] = slotEmpty
		}
		if g != 0 && g != plen {
			r.st.Bad.Add(uint64(cnt))
			continue
		}
		for j := 0; j < cnt; j++ {
			if j >= K || (j == cnt-1 && L-j*plen != plen) {
				r.st.Bad.Add(1)
				continue
			}
			x.state[i*K+j] = slotPending
		}
	}
}

// countReordered counts the packets that arrive after a later one.
func (r *udpRecv) countReordered(x *rxBatch, n int) {
	hi := r.next
	for s := 0; s < n*x.K; s++ {
		if x.state[s] != slotPending {
			continue
		}
		if idx, ok := r.index(r.f.Seq(x.hdr(s, r.f.HeaderLen))); ok {
			if idx < hi {
				r.st.Reordered.Add(1)
			}
			hi = max(hi, idx+1)
		}
	}
}

// keepInPlace keeps the packets that landed at their own ring slot and
// moves the others that landed in the ring out to scratch.
func (r *udpRecv) keepInPlace(x *rxBatch, n int) {
	for s := 0; s < n*x.K; s++ {
		if x.state[s] != slotPending || !x.inRing[s] {
			continue
		}
		idx, ok := r.index(r.f.Seq(x.hdr(s, r.f.HeaderLen)))
		if ok && idx == x.expect[s] {
			r.mark(idx)
			x.state[s] = slotPlaced
			continue
		}
		dst, _ := r.slot(x.expect[s])
		copy(x.scr(s, r.f.PayloadSize), dst)
	}
}

// place puts the pending packet of slot s where its sequence number says
// (starting the observation at the first packet, advancing the window),
// or counts it late, bad, duplicate or beyond the limit.
func (r *udpRecv) place(x *rxBatch, s int) error {
	seq := r.f.Seq(x.hdr(s, r.f.HeaderLen))
	if !r.started {
		if err := r.begin(seq, r.t0); err != nil {
			return err
		}
	}
	idx, ok := r.index(seq)
	if !ok {
		if seq < r.start {
			r.st.Late.Add(1)
		} else {
			r.st.Bad.Add(1)
		}
		return nil
	}
	if r.cfg.Packets > 0 && idx >= r.cfg.Packets {
		r.limitHit = true
		return nil
	}
	blk := idx / r.ppb
	if blk < r.winStart {
		r.st.Late.Add(1)
		return nil
	}
	if blk-r.winStart >= uint64(len(r.win))+r.cfg.MaxGap {
		r.st.Bad.Add(1)
		return nil
	}
	for blk >= r.winStart+uint64(len(r.win)) {
		if err := r.advance(); err != nil {
			return err
		}
	}
	dst, _ := r.slot(idx)
	ob := &r.win[blk-r.winStart]
	k := idx % r.ppb
	if ob.bits[k/64]&(1<<(k%64)) != 0 {
		r.st.Dup.Add(1)
		return nil
	}
	copy(dst, x.scr(s, r.f.PayloadSize))
	r.mark(idx)
	return nil
}

// index converts a sequence number to a packet index of the observation.
func (r *udpRecv) index(seq uint64) (uint64, bool) {
	d := seq - r.start
	if seq < r.start || d%r.f.SeqStep != 0 {
		return 0, false
	}
	return d / r.f.SeqStep, true
}

// slot returns the ring bytes of packet index idx if its block is open.
func (r *udpRecv) slot(idx uint64) ([]byte, bool) {
	blk := idx / r.ppb
	if !r.started || blk < r.winStart || blk >= r.winStart+uint64(len(r.win)) || (r.cfg.Packets > 0 && idx >= r.cfg.Packets) {
		return nil, false
	}
	off := int(idx%r.ppb) * r.f.PayloadSize
	return r.win[blk-r.winStart].data[off : off+r.f.PayloadSize], true
}

// mark records packet idx as placed.
func (r *udpRecv) mark(idx uint64) {
	ob := &r.win[idx/r.ppb-r.winStart]
	k := idx % r.ppb
	ob.bits[k/64] |= 1 << (k % 64)
	ob.got++
	r.received++
	r.next = max(r.next, idx+1)
	r.sum.Packets++
	r.st.Packets.Add(1)
	r.st.Bytes.Add(uint64(r.f.PayloadSize))
}

// begin starts the observation at the first packet: header, open blocks.
func (r *udpRecv) begin(seq uint64, t0 time.Time) error {
	r.started, r.start = true, seq
	h := r.cfg.Header
	if h == nil {
		h = dada.NewHeader(dada.DefaultHeaderSize)
	} else {
		h = h.Clone()
	}
	if _, ok := h.Get("UTC_START"); !ok {
		h.Set("UTC_START", t0.UTC().Format("2006-01-02-15:04:05"))
	}
	h.SetUint("PKT_START", seq)
	h.SetInt("PKT_SIZE", int64(r.f.PayloadSize))
	h.SetInt("PKT_HEADER", int64(r.f.HeaderLen))
	h.SetUint("OBS_OFFSET", 0)
	if r.cfg.Packets > 0 {
		h.SetUint("TRANSFER_SIZE", r.cfg.Packets*uint64(r.f.PayloadSize))
	}
	if err := r.w.WriteHeader(h); err != nil {
		return err
	}
	r.sum.Header, r.sum.StartSeq = h, seq
	r.sum.Packets = 0
	r.t0 = t0
	for i := range r.win {
		if err := r.open(i); err != nil {
			return err
		}
	}
	if r.cfg.Logger != nil {
		r.cfg.Logger.Info("pipeline: observation started", "seq", seq, "key", r.ring.Key().Short())
	}
	return nil
}

// open opens a ring block into window slot i.
func (r *udpRecv) open(i int) error {
	t := time.Now()
	b, err := r.w.OpenBlock()
	r.st.WaitNanos.Add(int64(time.Since(t)))
	if err != nil {
		return err
	}
	ob := &r.win[i]
	ob.data, ob.got = b.Data, 0
	clear(ob.bits)
	return nil
}

// complete zero-fills the holes of window slot 0 below packet slot upto,
// counts them lost and marks the block filled with upto packets.
func (r *udpRecv) complete(upto uint64) error {
	ob := &r.win[0]
	if ob.got < upto {
		for k := uint64(0); k < upto; k++ {
			w := ob.bits[k/64]
			if w == ^uint64(0) && k%64 == 0 && k+64 <= upto {
				k += 63
				continue
			}
			if w&(1<<(k%64)) == 0 {
				off := int(k) * r.f.PayloadSize
				clear(ob.data[off : off+r.f.PayloadSize])
			}
		}
		lost := upto - uint64(popcount(ob.bits, upto))
		r.st.Lost.Add(lost)
		r.sum.Lost += lost
	}
	n := int(upto) * r.f.PayloadSize
	if err := r.w.MarkFilled(n); err != nil {
		return err
	}
	r.st.Blocks.Add(1)
	r.sum.Blocks++
	r.sum.Bytes += uint64(n)
	r.updateFull()
	return nil
}

func popcount(b []uint64, upto uint64) int {
	n := 0
	for i, w := range b {
		if uint64(i*64) >= upto {
			break
		}
		if rem := upto - uint64(i*64); rem < 64 {
			w &= 1<<rem - 1
		}
		n += bits.OnesCount64(w)
	}
	return n
}

// advance completes the oldest open block and opens the next one.
func (r *udpRecv) advance() error {
	if err := r.complete(r.ppb); err != nil {
		return err
	}
	first := r.win[0]
	copy(r.win, r.win[1:])
	r.win[len(r.win)-1] = first
	r.winStart++
	return r.open(len(r.win) - 1)
}

// finish ends the transfer after the last packet (or the packet limit).
func (r *udpRecv) finish() error {
	if !r.started {
		return nil
	}
	r.sum.Elapsed = r.last.Sub(r.t0)
	end := r.next // packet indices [0, end) make the transfer
	if r.cfg.Packets > 0 && r.limitHit {
		end = r.cfg.Packets
	} else if r.cfg.Packets > end {
		// idle before the count: the missing tail is lost, not zero-filled
		r.st.Lost.Add(r.cfg.Packets - end)
		r.sum.Lost += r.cfg.Packets - end
	}
	for end > (r.winStart+1)*r.ppb {
		if err := r.advance(); err != nil {
			return err
		}
	}
	upto := end - r.winStart*r.ppb
	if err := r.complete(upto); err != nil {
		return err
	}
	if upto == r.ppb {
		// ended on a block boundary: an empty block marks the end of data
		if len(r.win) == 1 {
			if err := r.open(0); err != nil {
				return err
			}
		}
		if err := r.w.MarkFilled(0); err != nil {
			return err
		}
	}
	r.sum.Offload = r.gro
	if r.cfg.Logger != nil {
		r.cfg.Logger.Info("pipeline: observation ended", "bytes", r.sum.Bytes, "lost", r.sum.Lost)
	}
	return nil
}

// updateFull records how many blocks wait for the slowest reader.
func (r *udpRecv) updateFull() { r.st.Full.Store(fullBlocks(r.ring)) }

func fullBlocks(ring *dada.Ring) int64 { return int64(ring.MaxFull()) }

// UDPSendConfig controls SendUDP.
type UDPSendConfig struct {
	Format PacketFormat
	// Rate is the payload rate in bytes per second (0: as fast as possible).
	Rate float64
	// Packets is the number of packets (sequence numbers) to generate.
	Packets uint64
	// StartSeq is the first sequence number.
	StartSeq uint64
	// Batch is the number of datagrams per sendmmsg (default 64).
	Batch int
	// Loss is the probability of leaving a packet out (for tests).
	Loss float64
	// Reorder is the probability of swapping a packet with the next one.
	Reorder float64
	// Seed seeds the loss and reorder decisions.
	Seed uint64
	// NoGSO turns UDP segmentation offload off. With GSO (Linux, used when
	// the kernel has it) one system call buffer carries up to 64 datagrams
	// that the kernel cuts apart; the datagrams on the wire are the same.
	NoGSO bool
	// Stats receives the live counters (may be nil).
	Stats *Stats
}

// SendUDP sends cfg.Packets packets of the test pattern (see FillPattern;
// packet index i carries stream bytes from (StartSeq/SeqStep + i) ×
// PayloadSize) on the connected socket conn.
func SendUDP(ctx context.Context, conn *net.UDPConn, cfg UDPSendConfig) error {
	s, err := newUDPSender(conn, cfg)
	if err != nil {
		return err
	}
	defer s.stopTimer()
	for i := uint64(0); i < s.cfg.Packets; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.pace(ctx); err != nil {
			return err
		}
		n := int(min(uint64(s.cfg.Batch), s.cfg.Packets-i))
		s.generate(i, n)
		if err := s.send(); err != nil {
			return err
		}
		s.st.Packets.Add(uint64(len(s.order)))
		s.st.Bytes.Add(uint64(len(s.order) * s.f.PayloadSize))
		s.sent += uint64(n * s.f.PayloadSize)
		i += uint64(n)
	}
	s.st.Transfers.Add(1)
	return nil
}

// udpSender is the state of one SendUDP.
type udpSender struct {
	cfg   UDPSendConfig
	f     PacketFormat
	st    *Stats
	bc    *udp.BatchConn
	k     int // datagrams per message: more with UDP GSO
	rng   *rand.Rand
	hdrs  []byte
	pays  []byte
	order []int // the batch's packets to send, in sending order
	start time.Time
	sent  uint64 // payload bytes generated (sent or skipped), for pacing
	timer *time.Timer
}

// newUDPSender applies the defaults, probes GSO and allocates the buffers
// of one batch.
func newUDPSender(conn *net.UDPConn, cfg UDPSendConfig) (*udpSender, error) {
	f, err := cfg.Format.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	s := &udpSender{cfg: cfg, f: f, st: cfg.Stats, k: 1}
	if s.st == nil {
		s.st = new(Stats)
	}
	if !cfg.NoGSO && udp.GSOSupported(conn) {
		s.k = max(1, min(64, 65507/f.PacketLen()))
		s.cfg.Batch = max(s.k, cfg.Batch/s.k*s.k)
	}
	B := s.cfg.Batch
	if s.bc, err = udp.NewBatchConn(conn, B, 2*s.k); err != nil {
		return nil, err
	}
	s.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	s.hdrs = make([]byte, B*f.HeaderLen)
	s.pays = make([]byte, B*f.PayloadSize)
	s.order = make([]int, 0, B)
	s.start = time.Now()
	return s, nil
}

func (s *udpSender) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
	}
}

// pace waits until the bytes generated so far are due at cfg.Rate.
func (s *udpSender) pace(ctx context.Context) error {
	if s.cfg.Rate <= 0 {
		return nil
	}
	ahead := float64(s.sent)/s.cfg.Rate - time.Since(s.start).Seconds()
	if ahead <= 0 {
		return nil
	}
	d := time.Duration(ahead * float64(time.Second))
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.timer.C:
		return nil
	}
}

// generate fills the batch with packets i to i+n-1 and chooses which to
// send in which order (test loss and reordering).
func (s *udpSender) generate(i uint64, n int) {
	f, cfg := s.f, &s.cfg
	s.order = s.order[:0]
	for j := 0; j < n; j++ {
		seq := cfg.StartSeq + (i+uint64(j))*f.SeqStep
		f.PutSeq(s.hdrs[j*f.HeaderLen:(j+1)*f.HeaderLen], seq)
		FillPattern(s.pays[j*f.PayloadSize:(j+1)*f.PayloadSize], (seq/f.SeqStep)*uint64(f.PayloadSize))
		if cfg.Loss > 0 && s.rng.Float64() < cfg.Loss {
			s.st.Skipped.Add(1)
			continue
		}
		s.order = append(s.order, j)
	}
	if cfg.Reorder > 0 {
		for q := 0; q+1 < len(s.order); q++ {
			if s.rng.Float64() < cfg.Reorder {
				s.order[q], s.order[q+1] = s.order[q+1], s.order[q]
				q++
			}
		}
	}
}

// send sends the batch's chosen packets, k datagrams per GSO message; if
// the kernel or the route refuses GSO, it sends them again one by one and
// keeps doing so.
func (s *udpSender) send() error {
	for len(s.order) > 0 {
		err := s.bc.Send(s.gather())
		if err != nil && s.k > 1 && udp.GSOFailed(err) {
			s.k = 1
			continue
		}
		if err != nil {
			return fmt.Errorf("pipeline: sending: %w", err)
		}
		break
	}
	return nil
}

// gather points the messages at the chosen packets, k per message, and
// returns the number of messages.
func (s *udpSender) gather() int {
	f := s.f
	msgs := 0
	for m := 0; m < len(s.order); m += s.k {
		grp := s.order[m:min(m+s.k, len(s.order))]
		for q, j := range grp {
			s.bc.Add(msgs, 2*q, s.hdrs[j*f.HeaderLen:(j+1)*f.HeaderLen])
			s.bc.Add(msgs, 2*q+1, s.pays[j*f.PayloadSize:(j+1)*f.PayloadSize])
		}
		s.bc.SetLen(msgs, 2*len(grp))
		if len(grp) > 1 {
			s.bc.SetGSO(msgs, f.PacketLen())
		} else {
			s.bc.SetGSO(msgs, 0)
		}
		msgs++
	}
	return msgs
}
