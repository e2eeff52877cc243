package vswitch

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// Destinations that are not output ports.
const (
	toDrop  = -1 // no route: PortRcvSwitchRelayErrors
	toMgmt  = -2 // the management port
	toMcast = -3
)

// Input takes a packet (LRH through VCRC) that arrived on port in and
// copies it into the queue of its VL. It returns an error only for a bad
// port number; bad, unroutable or excess packets are counted and dropped.
// pkt is not kept nor modified.
func (s *Switch) Input(now time.Duration, in int, pkt []byte) error {
	if !s.validPort(in) {
		return fmt.Errorf("%w: %d", ErrPort, in)
	}
	ps := &s.ports[in]
	n := len(pkt)
	if n < wire.LRHLen+wire.VCRCLen || n > MaxPacketLen {
		ps.c.PortRcvErrors++
		if n >= 1 {
			s.release(in, pkt[0]>>4, n)
		}
		return nil
	}
	lrh := wire.LRH(pkt)
	vl := lrh.VL()
	qi := s.queueIndex(in, vl)
	if qi < 0 || lrh.LVer() != wire.LinkVersion || int(lrh.PktLen())*4+wire.VCRCLen != n ||
		wire.VCRC(pkt[:n-wire.VCRCLen]) != binary.LittleEndian.Uint16(pkt[n-wire.VCRCLen:]) {
		ps.c.PortRcvErrors++
		s.release(in, vl, n)
		return nil
	}
	dlid := lrh.DLID()
	ps.c.PortRcvPkts++
	ps.rcvBytes += uint64(n)
	if dlid >= firstMLID && dlid <= lastMLID {
		ps.c.PortMulticastRcvPkts++
	} else {
		ps.c.PortUnicastRcvPkts++
	}

	var out int
	var rt route
	if s.cfg.Router {
		out, rt = s.routeGlobal(in, pkt)
	} else {
		out = s.forward(in, dlid)
	}
	switch out {
	case toDrop:
		ps.c.PortRcvSwitchRelayErrors++
		s.release(in, vl, n)
		return nil
	case toMgmt:
		s.stats.ToManagement++
		s.release(in, vl, n)
		return nil
	}
	if out == toMcast {
		out = -1
	}
	q := &s.qs[qi]
	sl, ok := q.push(pkt, now, out)
	if !ok {
		if vl == 15 {
			ps.c.VL15Dropped++
		} else {
			ps.c.ExcessiveBufferOverrunErrors++
			s.addFreed(qi, blocksOf(n))
		}
		return nil
	}
	if s.cfg.Router {
		// Rewrite the copy for the next subnet: LRH and hop limit, the
		// first 16 bytes.
		b := q.bytes(sl)
		var old [wire.LRHLen + 8]byte
		copy(old[:], b)
		l := wire.LRH(b)
		l.SetDLID(rt.nextHop)
		l.SetSLID(s.routerLID[out])
		g := wire.GRH(b[wire.LRHLen:])
		g.SetHopLmt(g.HopLmt() - 1)
		vcrcPatch(b, old[:])
	}
	if q.n == 1 {
		s.newHead(now, int32(qi))
	}
	return nil
}

// release accounts the blocks of a packet dropped at Input as freed at
// once, so that the owner's credits stay exact.
func (s *Switch) release(in int, vl uint8, n int) {
	if int(vl) < s.cfg.VLs {
		s.addFreed(in*s.qpp+int(vl), blocksOf(n))
	}
}

func (s *Switch) addFreed(qi int, blocks int) {
	q := &s.qs[qi]
	if q.vl == 15 {
		return
	}
	if q.freed == 0 {
		s.freedList = append(s.freedList, int32(qi))
	}
	q.freed += blocks
}

// forward is the switch's routing decision for a DLID arriving on port in.
func (s *Switch) forward(in int, dlid uint16) int {
	switch {
	case dlid == wire.PermissiveLID:
		return toMgmt
	case dlid >= firstMLID:
		if s.mftIdx[dlid-firstMLID] == 0 {
			return toDrop
		}
		return toMcast
	case dlid == 0:
		return toDrop
	}
	if s.cfg.LID != 0 {
		mask := uint16(1)<<s.cfg.LMC - 1
		if dlid&^mask == s.cfg.LID&^mask {
			return toMgmt
		}
	}
	switch p := int(s.lft[dlid]); {
	case p == 0:
		return toMgmt
	case p == NoRoute || p == in:
		return toDrop
	default:
		return p
	}
}

// routeGlobal is the router's decision for a packet arriving on port in.
func (s *Switch) routeGlobal(in int, pkt []byte) (int, route) {
	l := wire.LRH(pkt)
	if l.LNH() != wire.LNHGlobal {
		dlid := l.DLID()
		if dlid == wire.PermissiveLID || (dlid != 0 && dlid == s.routerLID[in]) {
			return toMgmt, route{}
		}
		if s.cfg.LID != 0 {
			mask := uint16(1)<<s.cfg.LMC - 1
			if dlid&^mask == s.cfg.LID&^mask {
				return toMgmt, route{}
			}
		}
		return toDrop, route{}
	}
	if len(pkt) < wire.LRHLen+wire.GRHLen+wire.VCRCLen {
		return toDrop, route{}
	}
	g := wire.GRH(pkt[wire.LRHLen:])
	if g.IPVer() != wire.GRHIPVer {
		return toDrop, route{}
	}
	if g.HopLmt() <= 1 {
		s.stats.HopLimitDiscards++
		return toDrop, route{}
	}
	prefix := binary.BigEndian.Uint64(pkt[wire.LRHLen+24:])
	if prefix>>56 == 0xFF {
		return toDrop, route{} // multicast DGID
	}
	r, ok := s.hosts[[16]byte(pkt[wire.LRHLen+24:wire.LRHLen+40])]
	if !ok {
		r, ok = s.routes[prefix]
	}
	if !ok || r.port == in {
		return toDrop, route{}
	}
	return r.port, r
}

// newHead makes the head packet of queue qi wait for its output port(s):
// it decides the output VL(s) and links the queue into their lists. Head
// packets that cannot be sent anywhere are dropped on the way.
func (s *Switch) newHead(now time.Duration, qi int32) {
	q := &s.qs[qi]
	for q.n > 0 {
		q.since = now
		sl := q.headSlot()
		pkt := q.bytes(sl)
		if sl.out >= 0 {
			out := int(sl.out)
			vl, ok := s.outVL(q, out, pkt)
			if ok {
				s.link(out, qi, vl)
				q.pending.add(out)
				q.npend = 1
				return
			}
			s.ports[q.in].c.PortRcvSwitchRelayErrors++
			s.drop(qi)
			continue
		}
		dlid := wire.LRH(pkt).DLID()
		if idx := s.mftIdx[dlid-firstMLID]; idx != 0 {
			set := s.mft[idx-1]
			for w, word := range set {
				for word != 0 {
					b := bits.TrailingZeros64(word)
					word &= word - 1
					out := w<<6 | b
					switch {
					case out == q.in:
					case out == 0:
						s.stats.ToManagement++
					default:
						if vl, ok := s.outVL(q, out, pkt); ok {
							s.link(out, qi, vl)
							q.pending.add(out)
							q.npend++
						} else {
							s.ports[q.in].c.PortRcvSwitchRelayErrors++
						}
					}
				}
			}
		} else {
			s.ports[q.in].c.PortRcvSwitchRelayErrors++ // the MFT entry went away
		}
		if q.npend > 0 {
			return
		}
		s.drop(qi)
	}
}

// drop removes the head packet of queue qi, which waits for no port.
func (s *Switch) drop(qi int32) {
	q := &s.qs[qi]
	s.addFreed(int(qi), q.pop())
}

// outVL is the VL a packet of queue q leaves port out on.
func (s *Switch) outVL(q *queue, out int, pkt []byte) (uint8, bool) {
	if q.vl == 15 {
		return 15, true
	}
	vl := s.sl2vl[q.in*s.np+out][pkt[1]>>4]
	return vl, int(vl) < s.cfg.VLs
}

func (s *Switch) link(out int, qi int32, vl uint8) {
	op := &s.outs[out]
	nd := &s.nodes[out*len(s.qs)+int(qi)]
	l := &op.lists[vl]
	nd.vl, nd.prev, nd.next = int8(vl), l.tail, -1
	if l.tail < 0 {
		l.head = qi
		op.ready |= 1 << vl
	} else {
		s.nodes[out*len(s.qs)+int(l.tail)].next = qi
	}
	l.tail = qi
}

func (s *Switch) unlink(out int, qi int32) {
	op := &s.outs[out]
	base := out * len(s.qs)
	nd := &s.nodes[base+int(qi)]
	vl := nd.vl
	l := &op.lists[vl]
	if nd.prev < 0 {
		l.head = nd.next
	} else {
		s.nodes[base+int(nd.prev)].next = nd.next
	}
	if nd.next < 0 {
		l.tail = nd.prev
	} else {
		s.nodes[base+int(nd.next)].prev = nd.prev
	}
	if l.head < 0 {
		op.ready &^= 1 << vl
	}
	nd.vl = -1
}

// Output sends up to OutputBatch packets out of port out and returns how
// many it sent. VL15 packets go first, without credits; then the VL
// arbiter picks each packet's VL and credit(vl, blocks) must accept it
// (the owner then owes the packet to the link). send gets the packet, LRH
// through VCRC, with the output VL set and the VCRC updated; it is valid
// only during the call. Neither callback may call the Switch.
func (s *Switch) Output(now time.Duration, out int, credit func(vl uint8, blocks int) bool, send func(pkt []byte)) int {
	return s.OutputN(now, out, OutputBatch, credit, send)
}

// OutputN is Output of at most max packets: an owner that paces a port
// (its link's rate) lets the arbiter choose one packet at a time, when the
// link can take one, without its refusals standing for a VL's credit.
func (s *Switch) OutputN(now time.Duration, out, max int, credit func(vl uint8, blocks int) bool, send func(pkt []byte)) int {
	if out < 1 || out >= s.np {
		return 0
	}
	op := &s.outs[out]
	sent := 0
	for sent < max && op.lists[15].head >= 0 {
		s.transmit(now, out, op.lists[15].head, 15, send)
		sent++
	}
	var refused uint16
	for sent < max {
		ready := op.ready &^ refused &^ (1 << 15)
		hi := op.high.vls&ready != 0
		lo := op.low.vls&ready != 0
		var t *arbTable
		switch {
		case hi && (!lo || op.highLimit == 255 || op.highSent == 0 || op.highSent < int(op.highLimit)*4096):
			t = &op.high
		case lo:
			t = &op.low
		default:
			if refused != 0 {
				s.ports[out].c.PortXmitWait++
			}
			return sent
		}
		i := t.pick(ready)
		vl := t.e[i].vl
		qi := op.lists[vl].head
		q := &s.qs[qi]
		sl := q.headSlot()
		if !credit(vl, int(sl.blocks)) {
			refused |= 1 << vl
			continue
		}
		n := s.transmit(now, out, qi, vl, send)
		t.charge(i, n)
		switch {
		case t == &op.low:
			op.highSent = 0
		case lo:
			op.highSent += n
		default:
			op.highSent = 0 // the low table had nothing to send: it lost no turn
		}
		sent++
	}
	if refused != 0 {
		s.ports[out].c.PortXmitWait++
	}
	return sent
}

// transmit sends the head packet of queue qi out of port out on VL vl and
// returns its length.
func (s *Switch) transmit(now time.Duration, out int, qi int32, vl uint8, send func([]byte)) int {
	q := &s.qs[qi]
	sl := q.headSlot()
	pkt := q.bytes(sl)
	if old := pkt[0]; old>>4 != vl {
		wire.LRH(pkt).SetVL(vl)
		vcrcPatchByte0(pkt, old)
	}
	send(pkt)
	ps := &s.ports[out]
	ps.c.PortXmitPkts++
	ps.xmitBytes += uint64(len(pkt))
	if sl.out < 0 {
		ps.c.PortMulticastXmitPkts++
	} else {
		ps.c.PortUnicastXmitPkts++
	}
	s.unlink(out, qi)
	q.pending.del(out)
	q.npend--
	if q.npend == 0 {
		s.drop(qi)
		s.newHead(now, qi)
	}
	return len(pkt)
}

// Expire discards the packets that have been at the head of their queue
// for HOQLife or in the switch for SwitchLife, counting PortXmitDiscards on
// every output port they still waited for.
func (s *Switch) Expire(now time.Duration) {
	hoq, life := s.cfg.HOQLife, s.cfg.SwitchLife
	if hoq == 0 && life == 0 {
		return
	}
	for i := range s.qs {
		q := &s.qs[i]
		for q.n > 0 {
			sl := q.headSlot()
			if !(hoq > 0 && now-q.since >= hoq) && !(life > 0 && now-sl.arrival >= life) {
				break
			}
			qi := int32(i)
			for w, word := range q.pending {
				for word != 0 {
					b := bits.TrailingZeros64(word)
					word &= word - 1
					out := w<<6 | b
					s.unlink(out, qi)
					s.ports[out].c.PortXmitDiscards++
				}
			}
			q.pending, q.npend = portSet{}, 0
			s.drop(qi)
			s.newHead(now, qi)
		}
	}
}

// Freed calls fn with the blocks freed since its last call, per input
// port and data VL: what the owner returns to the upstream as credits.
func (s *Switch) Freed(fn func(in int, vl uint8, blocks int)) {
	for _, qi := range s.freedList {
		q := &s.qs[qi]
		b := q.freed
		q.freed = 0
		fn(q.in, q.vl, b)
	}
	s.freedList = s.freedList[:0]
}

// Pending reports whether some packet waits to go out of port out.
func (s *Switch) Pending(out int) bool {
	return out >= 1 && out < s.np && s.outs[out].ready != 0
}
