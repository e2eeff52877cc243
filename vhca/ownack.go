package vhca

import "github.com/softib/softib/vhca/wire"

// An ACK between two QPs of one device that the link turns around goes
// without a frame. The request it acknowledges came back to this device
// (ReceiveOwn: the link turned around a frame to the device's own MAC),
// and an ACK to the same MAC comes back the same way. Building that frame,
// turning it around and reading it again is a quarter of such a message's
// work in the engine, and on its path: the requester's next WQE waits
// for it. So the ACK is queued as any response, in PSN order, and when
// its turn to be sent comes, ackOwn does what the frame would have done:
// the same port counters, the checks of the receive path (accept,
// deliver), and the completer's handling of an ACK (onResponse). Only
// the turns of other frames may differ, one frame fewer taking one: an
// order the links allow as well (an unfenced READ's data may be read
// before or after the requests behind it land). It is taken at that
// turn, as the frame would be built, and not at once: the
// completions of the request go out first, as they do when the ACK is a
// frame, and the receiver, who waits for its completion, is not made to
// wait for the sender's too. NAKs keep their frames, and so do READ
// responses and atomic ACKs (unless their requests go without frames,
// which takes them with the request: rdAtomicOwn) and every ACK of a
// request that did not come back by ReceiveOwn.

// ownDelivery describes the ReceiveOwn in progress.
type ownDelivery struct {
	on  bool
	dst wire.MAC // the destination of the frame turned around
}

// ackComesBack reports whether an ACK qp sends now would come back to
// this device as the request being delivered did.
func (d *Device) ackComesBack(qp *QP) bool {
	return d.own.on && qp.hdr.Encap.Ethernet() && qp.hdr.DstMAC == d.own.dst
}

// ackOwn is the ACK of qp's requests up to psn, taken without a frame:
// sent, turned around and received.
func (d *Device) ackOwn(now Time, qp *QP, psn uint32) {
	h := &qp.hdr
	h.Opcode = wire.RCAcknowledge
	n := uint64(h.Len(0))
	pt := qp.port
	pt.Counters.XmitPackets++
	pt.Counters.XmitBytes += n
	// What accept and deliver check of the frame, in their order.
	pt.Counters.RcvPackets++
	pt.Counters.RcvBytes += n
	t := d.lookupQP(h.DestQP)
	switch {
	case t == nil || t.port != pt:
		pt.Counters.RcvNoQP++
	case t.Type != QPTypeRC:
		pt.Counters.RcvBadOpcode++
	case !ownPathMatches(t, h):
		pt.Counters.RcvAddrDrops++
	case !pkeyMatch(h.PKey, pt.PKeys[t.attr.PKeyIndex]):
		pt.Counters.RcvPKeyDrops++
	case t.state != QPStateRTS && t.state != QPStateSQD:
		pt.Counters.RcvNoQP++
	case responsePSNValid(t, psn):
		// onResponse's ACK.
		d.ackBefore(now, t, psnAdd(psn, 1))
		d.scheduleWork(t)
	}
}

// ownPathMatches is pathMatches for a frame built with h.
func ownPathMatches(qp *QP, h *wire.Headers) bool {
	if h.Encap == wire.EncapRoCEv2IPv4 {
		return ipv4PathMatches(qp, [4]byte(h.SGID[12:]), [4]byte(h.DGID[12:]))
	}
	return gidPathMatches(qp, h.SGID, h.DGID)
}
