package rsocket

import (
	"syscall"

	"github.com/softroce/softroce/verbs"
)

// IOMap opens buf to the peer's IOWrite at offset (riomap with PROT_WRITE;
// offset -1: buf's address). The peer learns of it before the next data
// this side sends. It fails with ENOMEM when the peer's iomap table (its
// Config.IOMapSize) is full.
func (c *Conn) IOMap(buf []byte, offset int64) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state&stConnected == 0 {
		return -1, &Error{Op: "riomap", Reason: "not connected", Errno: syscall.EINVAL}
	}
	idx := -1
	for i, m := range c.iomaps {
		if m == nil {
			idx = i
			break
		}
	}
	if idx < 0 {
		return -1, &Error{Op: "riomap", Reason: "the peer's iomap table is full (its RDMA_IOMAPSIZE)", Errno: syscall.ENOMEM}
	}
	mr, err := c.cc.PD.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return -1, err
	}
	if offset == -1 {
		offset = int64(mr.Addr())
	}
	m := &ioMapping{buf: buf, mr: mr, offset: uint64(offset), index: idx}
	c.iomaps[idx] = m
	c.iomapQ = append(c.iomapQ, m)
	return offset, nil
}

// IOUnmap closes a mapping IOMap made of buf (riounmap).
func (c *Conn) IOUnmap(buf []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.iomaps {
		if m != nil && len(m.buf) == len(buf) && (len(buf) == 0 || &m.buf[0] == &buf[0]) {
			if m.mr != nil {
				m.mr.Deregister()
				m.mr = nil
			}
			c.iomaps[i] = nil
			for j, q := range c.iomapQ {
				if q == m {
					c.iomapQ = append(c.iomapQ[:j], c.iomapQ[j+1:]...)
					break
				}
			}
			return nil
		}
	}
	return &Error{Op: "riounmap", Reason: "no mapping of this buffer", Errno: syscall.EINVAL}
}

// sendIOMaps writes the queued iomap entries into the peer's target list
// (rs_send_iomaps), under c.mu.
func (c *Conn) sendIOMaps(flags int, ws *waitState) error {
	for len(c.iomapQ) > 0 {
		if err := c.waitSend(flags, ws); err != nil {
			return err
		}
		m := c.iomapQ[0]
		c.iomapQ = c.iomapQ[1:]
		putIOMap(c.ctrlBuf[:], ioMap{Offset: m.offset, SGE: SGE{Addr: m.mr.Addr(), Key: m.mr.RKey(), Length: uint32(len(m.buf))}}, c.peerOrder)
		c.sseqNo++
		c.sqeAvail--
		c.sbufAvail -= IOMapLen
		msg := MakeMsg(OpIOMapSGL, uint32(m.index))
		c.swr[0] = verbs.SendWR{WRID: uint64(msg), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled | verbs.SendInline,
			ImmData: uint32(msg), RemoteAddr: c.remoteIOMap.Addr + uint64(m.index)*IOMapLen, RKey: c.remoteIOMap.Key,
			Inline: c.ctrlBuf[:]}
		c.post()
	}
	return nil
}

// findIOMap returns the peer's mapping that covers offset.
func (c *Conn) findIOMap(offset uint64) *ioMap {
	for i := range c.targetIOMap {
		m := &c.targetIOMap[i]
		if offset >= m.Offset && offset < m.Offset+uint64(m.SGE.Length) {
			return m
		}
	}
	return nil
}

// IOWrite writes p straight into the peer's buffer that it mapped at
// offset with IOMap (riowrite): an RDMA WRITE, of which the peer hears
// nothing. It returns how much it wrote: less than len(p) when the
// peer's mappings end (0 if none covers offset yet).
func (c *Conn) IOWrite(p []byte, offset int64, flags int) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	var ws waitState
	if err := c.sendIOMaps(flags, &ws); err != nil {
		return 0, err
	}
	olen := olapStart
	off := 0
	var iom *ioMap
	for off < len(p) {
		o := uint64(offset) + uint64(off)
		if iom == nil || o >= iom.Offset+uint64(iom.SGE.Length) {
			if iom = c.findIOMap(o); iom == nil {
				c.progress() // the peer's iomap may have arrived
				if iom = c.findIOMap(o); iom == nil {
					break
				}
			}
		}
		if err := c.waitSend(flags, &ws); err != nil {
			if off > 0 {
				return off, nil
			}
			return 0, err
		}
		left := len(p) - off
		xfer := left
		if olen < left {
			xfer = olen
			if olen < maxTransfer {
				olen <<= 1
			}
		}
		xfer = min(xfer, c.sbufAvail, int(iom.Offset+uint64(iom.SGE.Length)-o))
		c.sqeAvail--
		c.sbufAvail -= xfer
		msg := MakeMsg(OpWrite, uint32(xfer))
		wr := &c.swr[0]
		*wr = verbs.SendWR{WRID: uint64(msg), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			RemoteAddr: iom.SGE.Addr + o - iom.Offset, RKey: iom.SGE.Key}
		if xfer <= c.cfg.Inline {
			wr.Flags |= verbs.SendInline
			wr.Inline = p[off : off+xfer]
		} else {
			wr.SGList = c.stage(p[off : off+xfer])
		}
		c.post()
		c.Stats.DirectWrites.Add(1)
		off += xfer
		if c.state&stError != 0 {
			break
		}
	}
	if off == 0 && c.state&stError != 0 && c.err != nil {
		return 0, c.err
	}
	return off, nil
}
