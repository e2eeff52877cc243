package vhca

import "github.com/softib/softib/vhca/wire"

// Segments (wire/segment.go) carry a message between two vHCAs of one
// process with one copy: the requester hands over a slice of the source
// region instead of copying it into frames, and the responder copies it
// straight into the target. A segment stands for the packets a wire
// would carry: it carries up to 64 KiB of whole path MTUs and takes their
// PSNs (⌈length/PMTU⌉ of them), every segment but a message's last is a
// whole number of MTUs, and so PSNs, acknowledgements, sequence checks,
// key checks, completions and errors are those of the packets it stands
// for: QueryQP shows the same PSNs either way. Only in-process ports use
// them, only for RC and UC SEND and RDMA WRITE and for READ responses,
// and never when going back: a retransmission is sent as packets, so a
// responder never meets a segment that straddles its expected PSN.

// maxSegmentBytes bounds a segment: its headers count its length in the
// 16 bits of IP and UDP length fields, headers included.
const maxSegmentBytes = 0xFFFF - 256

// segmentCap is the most a segment carries at path MTU mtu: whole MTUs.
func segmentCap(mtu uint32) uint32 { return maxSegmentBytes / mtu * mtu }

// TransmitSegment is Transmit for a link that carries segments: it may
// build a segment's headers into buf and return its payload, which the
// link must hand to the peer's ReceiveSegment before the caller next
// calls a verb that could deregister the source region (verbsd delivers
// within one round of its engine). A nil payload: buf holds a whole frame.
func (d *Device) TransmitSegment(now Time, buf []byte) (int, []byte, uint8) {
	d.seg = true
	n, port := d.Transmit(now, buf)
	d.seg = false
	payload := d.txSeg
	d.txSeg = nil
	return n, payload, port
}

// ReceiveSegment is Receive for what TransmitSegment sent: a segment when
// payload is not nil, else a whole frame. Segments are accepted on
// in-process ports only.
func (d *Device) ReceiveSegment(now Time, port uint8, frame, payload []byte) {
	d.receive(now, port, frame, payload)
}

// resending reports whether the requester is going back over PSNs it
// sent before (see rewind), and forgets it once past them.
func (d *Device) resending(qp *QP) bool {
	r := &qp.req
	if r.resending && psnDiff(r.psn, r.resendUntil) >= 0 {
		r.resending = false
	}
	return r.resending
}

// segmentSource returns the payload of the next segment of w from byte
// off: as much of the message as lies in one piece of registered memory
// (or the inline data), up to the PSN window, whole MTUs unless it ends
// the message; nil if that is not at least one MTU (then a packet is
// built as usual, and its gather reports any bad L_Key).
func (d *Device) segmentSource(qp *QP, w *sendWQE, off, mtu uint32) []byte {
	r := &qp.req
	most := segmentCap(mtu)
	if qp.Type == QPTypeRC {
		most = min(most, uint32(maxUnackedPSNs-psnDiff(r.psn, r.unacked))*mtu)
	}
	if qp.rate.kbps != 0 {
		most = min(most, qp.rate.segmentBytes()) // no more than the bucket holds
	}
	rest := w.length - off
	n := uint64(min(rest, most))
	var src []byte
	if w.wr.Flags&SendInline != 0 {
		src = w.inline[off : uint64(off)+n]
	} else {
		o := uint64(off)
		for _, s := range w.sgl {
			if o >= uint64(s.Length) {
				o -= uint64(s.Length)
				continue
			}
			n = min(n, uint64(s.Length)-o)
			mr := d.lookupMR(s.LKey)
			if mr == nil || mr.PD != qp.PD {
				return nil
			}
			var ok bool
			if src, ok = mr.span(s.Addr+o, n); !ok {
				return nil
			}
			break
		}
	}
	if n < uint64(rest) {
		n -= n % uint64(mtu)
	}
	if n < uint64(mtu) || src == nil {
		return nil
	}
	return src[:n]
}

// psnsOf is how many PSNs a received packet takes: one, or a segment's
// ⌈length/PMTU⌉.
func psnsOf(qp *QP, p *wire.Packet) uint32 {
	if !p.Segment() {
		return 1
	}
	return packetsFor(uint32(p.PayloadLen), uint32(qp.mtu))
}

// lengthFits is the length rule of a request or READ response packet:
// first and middle packets carry exactly the path MTU, last and only
// packets at most that (IBA 1.4 §9.7.4.1.2); a segment carries whole
// MTUs unless it ends its message, and at least one byte.
func lengthFits(qp *QP, p *wire.Packet) bool {
	n, mtu := p.PayloadLen, qp.mtu
	whole := p.Info.Position == wire.First || p.Info.Position == wire.Middle
	if p.Segment() {
		return n > 0 && (!whole || n%mtu == 0)
	}
	return n <= mtu && (!whole || n == mtu)
}
