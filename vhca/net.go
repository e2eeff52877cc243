package vhca

import (
	"encoding/binary"

	"github.com/softib/softib/vhca/wire"
)

// The device's side of the link, without I/O: Receive takes a frame in,
// Transmit builds the next frame to send into the caller's buffer (a TAP
// write buffer, an AF_XDP frame, a cable datagram), and Deadline and
// Advance drive the timers. The link pulls: a link that cannot send (no
// credits, a full ring) simply does not call Transmit, and the back
// pressure reaches the requesters.

// Receive processes one frame that arrived on port. Malformed frames and
// frames for no QP are counted and dropped.
func (d *Device) Receive(now Time, port uint8, frame []byte) { d.receive(now, port, frame, nil) }

func (d *Device) receive(now Time, port uint8, frame, segment []byte) {
	pt := d.Port(port)
	if pt == nil {
		return
	}
	p := &d.rx
	var err error
	switch {
	case segment != nil && pt.InProcess:
		err = wire.ParseEthernetSegment(frame, segment, p)
	case segment != nil:
		err = wire.ErrBadLength // segments never come from outside the process
	case pt.LinkLayer == LinkLayerInfiniBand:
		err = wire.ParseIB(frame, p)
	case pt.InProcess:
		err = wire.ParseEthernetUnsealed(frame, p)
	default:
		err = wire.ParseEthernet(frame, p)
	}
	if err != nil {
		if e, ok := err.(wire.ParseError); ok && e < wire.NumParseErrors {
			pt.Counters.RcvMalformed[e]++
		}
		return
	}
	d.accept(now, pt, p, segment)
}

// ReceiveOwn is ReceiveSegment for the frame the last TransmitSegment
// returned when it is addressed to this device itself (loopback, as an
// HCA turns such a frame around in hardware), taken from the view the
// device built it with: a frame this device just built needs no parse.
// The caller must not have changed the frame, and must turn around every
// frame to the same address: an ACK to it goes without a frame
// (ownack.go).
func (d *Device) ReceiveOwn(now Time, port uint8) {
	pt := d.Port(port)
	if pt == nil {
		return
	}
	d.rx = d.tx
	var segment []byte
	if d.rx.Segment() {
		segment = d.rx.Payload()
	}
	if e := d.rx.Ethernet(); e != nil {
		d.own = ownDelivery{on: true, dst: e.Dst()}
	}
	d.accept(now, pt, &d.rx, segment)
	d.own.on = false
}

// accept takes a parsed packet that arrived on port pt (the payload of a
// segment in segment, else nil) to its QP.
func (d *Device) accept(now Time, pt *Port, p *wire.Packet, segment []byte) {
	pt.Counters.RcvPackets++
	pt.Counters.RcvBytes += uint64(p.Len())
	if l := p.LRH(); l != nil && isMulticastLID(l.DLID()) {
		d.onMulticast(now, pt, p, l.DLID())
		return
	}
	qp := d.lookupQP(p.BTH().DestQP())
	if qp == nil || qp.port != pt {
		pt.Counters.RcvNoQP++
		return
	}
	if segment != nil {
		// A segment counts as the packets it stands for, each with
		// the headers it came with (net.go, segmentPackets).
		k := segmentPackets(len(segment), qp.mtu)
		pt.Counters.RcvPackets += k - 1
		pt.Counters.RcvBytes += (k - 1) * uint64(len(p.Frame)+wire.ICRCLen)
	}
	d.deliver(now, pt, qp, p)
}

// segmentPackets is how many packets of the path MTU a segment of n
// payload bytes stands for. The port counters count those, as a wire
// would carry them: the bytes of each are counted as its share of the
// payload, a copy of the segment's headers (the first packet's, which
// may hold a RETH the others would not) and an ICRC.
func segmentPackets(n, mtu int) uint64 {
	return uint64(packetsFor(uint32(n), uint32(mtu)))
}

// deliver hands a packet that arrived on port pt to qp, after the checks
// of the QP's transport, path, P_Key and state.
func (d *Device) deliver(now Time, pt *Port, qp *QP, p *wire.Packet) {
	if p.Opcode.Transport() != transportOf(qp.Type) {
		pt.Counters.RcvBadOpcode++
		return
	}
	if qp.Type != QPTypeUD && !pathMatches(qp, p) {
		// A connected QP hears only its peer, at the addresses of its
		// path (as rxe's check_addr): a third host that guesses the QPN
		// and the PSN cannot inject into the connection.
		pt.Counters.RcvAddrDrops++
		return
	}
	if !pkeyMatch(p.BTH().PKey(), pt.PKeys[qp.attr.PKeyIndex]) {
		// A P_Key mismatch leaves no trace but this counter (IBA 1.4
		// §9.6: the packet is silently dropped).
		pt.Counters.RcvPKeyDrops++
		return
	}
	switch {
	case p.Info.Response:
		if qp.Type == QPTypeRC && (qp.state == QPStateRTS || qp.state == QPStateSQD) {
			d.onResponse(now, qp, p)
		} else {
			pt.Counters.RcvNoQP++
		}
	case qp.state == QPStateRTR || qp.state == QPStateRTS || qp.state == QPStateSQD || qp.state == QPStateSQE:
		d.onRequest(now, qp, p)
	default:
		pt.Counters.RcvNoQP++
	}
}

// pathMatches reports whether a packet for a connected QP comes from the
// QP's peer and is addressed to the QP's own port address.
func pathMatches(qp *QP, p *wire.Packet) bool {
	switch p.Encap {
	case wire.EncapRoCEv2IPv4:
		ip := p.IPv4()
		return ipv4PathMatches(qp, ip.Src(), ip.Dst())
	case wire.EncapRoCEv2IPv6:
		ip := p.IPv6()
		return gidPathMatches(qp, ip.Src(), ip.Dst())
	case wire.EncapRoCEv1:
		g := p.GRH()
		return gidPathMatches(qp, g.SGID(), g.DGID())
	case wire.EncapIB:
		av, pt := &qp.attr.AV, qp.port
		l := p.LRH()
		lmc := uint16(1)<<pt.LMC - 1
		if l.SLID() != av.DLID || l.DLID()&^lmc != pt.LID&^lmc {
			return false
		}
		if g := p.GRH(); g != nil {
			return gidPathMatches(qp, g.SGID(), g.DGID())
		}
		return true
	}
	return false
}

// ipv4PathMatches is pathMatches for a RoCEv2 packet over IPv4 from src
// to dst.
func ipv4PathMatches(qp *QP, src, dst [4]byte) bool {
	return ipv4MappedIs(&qp.attr.AV.GRH.DGID, src) && ipv4MappedIs(ownGID(qp), dst)
}

// ipv4MappedIs reports whether g is the IPv4-mapped GID (::ffff:a.b.c.d)
// of a: GID.IsIPv4Mapped, as two 8-byte comparisons, on every packet's
// path twice (and every ACK's without a frame).
func ipv4MappedIs(g *wire.GID, a [4]byte) bool {
	return binary.LittleEndian.Uint64(g[:8]) == 0 &&
		binary.LittleEndian.Uint64(g[8:]) == 0xFFFF0000|uint64(binary.LittleEndian.Uint32(a[:]))<<32
}

// gidPathMatches is pathMatches for a packet from GID src to GID dst.
func gidPathMatches(qp *QP, src, dst wire.GID) bool {
	return src == qp.attr.AV.GRH.DGID && dst == *ownGID(qp)
}

// ownGID is the GID a connected QP sends from: its port's GID at the
// path's SGID index (zero if there is none). A pointer into the table,
// not a copy: this is on every packet's path.
func ownGID(qp *QP) *wire.GID {
	if i := int(qp.attr.AV.GRH.SGIDIndex); i < len(qp.port.GIDs) {
		return &qp.port.GIDs[i].GID
	}
	return &noGID
}

var noGID wire.GID

// pkeyMatch is the partition check (IBA 1.4 §10.9.3): the low 15 bits
// equal and at least one of the two a full member.
func pkeyMatch(a, b uint16) bool {
	return a&0x7FFF == b&0x7FFF && (a|b)&0x8000 != 0 && a&0x7FFF != 0
}

// Transmit builds the next frame the device has to send into buf and
// returns its length and port, or 0 if nothing is ready now. QPs take
// turns, a packet each; a QP's responses go before its requests. With
// LoopsOwn, a request to a QP of this device may go without a frame: it
// returns 0 and the port then (and 0, 0 only when nothing is ready).
func (d *Device) Transmit(now Time, buf []byte) (int, uint8) {
	for d.ready.n > 0 {
		qp := d.ready.pop()
		qp.ready = false
		n := d.nextResponse(now, qp, buf)
		if n == 0 {
			if qp.rate.kbps != 0 && !d.paced(now, qp) {
				continue // over its rate limit: off the ring until its bucket allows
			}
			if d.requestOwn(now, qp) {
				return 0, qp.port.Num
			}
			n = d.nextRequest(now, qp, buf)
			if n != 0 && qp.rate.kbps != 0 {
				qp.rate.take(n + len(d.txSeg))
			}
		}
		if n == 0 {
			continue
		}
		d.schedule(qp) // more may follow; checked on its next turn
		d.loopMulticast(now, qp, buf[:n])
		pt := qp.port
		pt.Counters.XmitPackets++
		pt.Counters.XmitBytes += uint64(n + len(d.txSeg))
		if d.txSeg != nil {
			// The frame ends where the payload begins: its pad and
			// ICRC, then the other packets it stands for.
			k := segmentPackets(len(d.txSeg), qp.mtu)
			pt.Counters.XmitPackets += k - 1
			pt.Counters.XmitBytes += uint64(-len(d.txSeg)&3+wire.ICRCLen) + (k-1)*uint64(n+wire.ICRCLen)
		}
		return n, pt.Num
	}
	return 0, 0
}

// Ready reports whether a QP may have a packet to send: Transmit has
// nothing to do without one.
func (d *Device) Ready() bool { return d.ready.n > 0 }

// Deadline is the earliest time at which Advance has work: a
// retransmission timeout, the end of an RNR wait, or the time a rate
// limited QP's bucket lets its next request go. Zero: none. Only the QPs
// with a timer armed are looked at, so idle QPs cost nothing.
func (d *Device) Deadline() Time {
	var t Time
	for _, qp := range d.timed {
		t = earliest(earliest(earliest(t, qp.req.timer), qp.req.rnrWait), qp.req.rateWait)
	}
	return t
}

// earliest is the earlier of two deadlines, 0 being none.
func earliest(a, b Time) Time {
	if b != 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// Advance fires the timers due at now.
func (d *Device) Advance(now Time) {
	for _, qp := range d.timed {
		if qp.req.timer != 0 && qp.req.timer <= now {
			d.onTimeout(now, qp)
		}
		if qp.req.rnrWait != 0 && qp.req.rnrWait <= now {
			d.schedule(qp)
		}
		if qp.req.rateWait != 0 && qp.req.rateWait <= now {
			qp.req.rateWait = 0
			d.schedule(qp)
		}
	}
	// Forget the QPs whose timers are all off (in order: timers fire in
	// the order they were first armed, which keeps runs repeatable).
	k := 0
	for _, qp := range d.timed {
		if qp.req.timer != 0 || qp.req.rnrWait != 0 || qp.req.rateWait != 0 {
			d.timed[k] = qp
			k++
		} else {
			qp.timed = false
		}
	}
	clear(d.timed[k:])
	d.timed = d.timed[:k]
}

// watch puts qp on the list of QPs with a timer armed.
func (d *Device) watch(qp *QP) {
	if !qp.timed {
		qp.timed = true
		d.timed = append(d.timed, qp)
	}
}

// buildHeaderTemplate fills the fields of qp.hdr that come from the QP and
// its path: encapsulation, addresses, P_Key, destination QP.
func (qp *QP) buildHeaderTemplate() {
	pt := qp.port
	if pt == nil {
		return
	}
	h := &qp.hdr
	h.Unsealed = pt.InProcess
	h.PKey = pt.PKeys[qp.attr.PKeyIndex]
	h.DestQP = qp.attr.DestQPN
	h.SrcQP = qp.Num
	h.QKey = qp.attr.QKey
	if qp.Type != QPTypeUD {
		setPath(h, pt, &qp.attr.AV, flowLabel(qp.Num, qp.attr.DestQPN, qp.attr.AV.GRH.FlowLabel))
	}
}

// setPath fills h's link and network fields for the path av describes.
func setPath(h *wire.Headers, pt *Port, av *AV, flow uint32) {
	if pt.LinkLayer == LinkLayerInfiniBand {
		h.Encap = wire.EncapIB
		h.DLID, h.SLID = av.DLID, pt.LID|uint16(av.SrcPathBits)
		h.SL, h.VL = av.SL, pt.SL2VL[av.SL&15]
		h.GRH = av.IsGlobal
	} else {
		h.SrcMAC, h.DstMAC = pt.MAC, av.DMAC
		h.Encap = wire.EncapRoCEv2IPv6
		if int(av.GRH.SGIDIndex) < len(pt.GIDs) {
			e := pt.GIDs[av.GRH.SGIDIndex]
			switch {
			case e.Type == GIDTypeRoCEv1:
				h.Encap = wire.EncapRoCEv1
			case isIPv4Mapped(e.GID):
				h.Encap = wire.EncapRoCEv2IPv4
			}
		}
		h.DontFragment = true
		h.UDPSrcPort = udpSourcePort(flow)
	}
	if int(av.GRH.SGIDIndex) < len(pt.GIDs) {
		h.SGID = pt.GIDs[av.GRH.SGIDIndex].GID
	}
	h.DGID = av.GRH.DGID
	h.TClass, h.FlowLabel, h.HopLimit = av.GRH.TrafficClass, flow, av.GRH.HopLimit
	if h.HopLimit == 0 {
		h.HopLimit = 64
	}
}

func isIPv4Mapped(g wire.GID) bool {
	return binary.BigEndian.Uint64(g[0:]) == 0 && binary.BigEndian.Uint32(g[8:]) == 0xFFFF
}

// flowLabel is the flow label of a connected QP's packets: the AV's if it
// has one, else the one rdma_calc_flow_label derives from the two QPNs,
// symmetric so that both directions of a connection hash alike, as Linux
// does for QPs connected without RDMA CM.
func flowLabel(lqpn, rqpn, given uint32) uint32 {
	if given != 0 {
		return given & wire.MaxFlowLabel
	}
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v) & wire.MaxFlowLabel
}

// udpSourcePort folds a flow label into the RoCEv2 UDP source port range
// 0xC000-0xFFFF (rdma_flow_label_to_udp_sport).
func udpSourcePort(fl uint32) uint16 {
	low, high := fl&0x3FFF, fl&0xFC000
	low ^= high >> 14
	return uint16(low | 0xC000)
}

// udUDPSourcePort is a UD QP's source port: Linux hashes the QPN
// (0xC000 + hash_32(qpn, 14)) since a datagram QP has no peer.
func udUDPSourcePort(qpn uint32) uint16 {
	return 0xC000 + uint16((qpn*0x61C88647)>>(32-14))
}

// setUDDestination fills the per-datagram fields of a UD send: the AH's
// path, the destination QP and the Q_Key (a Q_Key with its high bit set
// means "use the QP's own", the controlled Q_Key rule of IBA 1.4 §10.2.5).
func (d *Device) setUDDestination(qp *QP, w *sendWQE, h *wire.Headers) {
	av := &w.wr.AH.AV
	setPath(h, qp.port, av, av.GRH.FlowLabel)
	if qp.port.LinkLayer == LinkLayerEthernet && av.GRH.FlowLabel == 0 {
		h.UDPSrcPort = udUDPSourcePort(qp.Num)
	}
	h.DestQP = w.wr.RemoteQPN
	h.QKey = w.wr.RemoteQKey
	if h.QKey&0x80000000 != 0 {
		h.QKey = qp.attr.QKey
	}
}
