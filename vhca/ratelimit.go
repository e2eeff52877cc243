package vhca

// Injection rate limiting (IBA 1.4 static rate control; rdma-core's
// IBV_QP_RATE_LIMIT, ibv_qp_attr.rate_limit in kbit/s): a token bucket
// per QP on what its requester injects. A rate of 0 is no limit.
//
// What is counted is the bytes of each request frame as the device builds
// it: what Transmit returns plus, for a segment, its payload, the bytes
// the port's XmitBytes counts. That is every header from the link
// layer's (Ethernet or LRH) to the ICRC, and none of a real wire's
// preamble, FCS or inter-frame gap.
//
// What is limited is requests, first transmissions and retransmissions
// alike: both are traffic the QP injects. Responses (ACKs, NAKs, READ
// responses, atomic ACKs) are not: the responder owes them to its peer,
// whose own limit paces the requests they answer.
//
// The bucket fills continuously, at the rate, on the clock the owner
// passes in (Time), and holds at most depth = max(one MTU packet,
// rate × rateWindow), so that the bursts a QP may send after a pause are
// small. The size of the next packet is known only once it is built
// (segments, header lengths per opcode) and building it moves the
// requester on, so the bucket may go into deficit: a request goes when
// the bucket is not in deficit, its frame's length is then taken, which
// may leave the level below zero, and the QP waits until the refill has
// made up the deficit. Over any interval a QP thus injects at most
// rate × interval + depth + one frame, and a QP that always has something
// to send injects at the rate.
//
// A QP that waits leaves the transmit ring, so the other QPs go on, and
// its wait is a timer like an RNR wait (requester.rateWait): Deadline
// includes it and Advance puts the QP back on the ring.

const (
	// rateWindow is how much of its rate a QP may send in one burst: as
	// long as an owner may oversleep a deadline without the QP losing
	// rate (a ppoll on a busy host wakes tens to hundreds of µs late).
	rateWindow Time = 500_000 // 500 µs
	// rateHeaderBytes bounds the headers of a request frame, for the
	// depth of one MTU packet: the most is an atomic over RoCEv2/IPv6's
	// 106 (Ethernet 14, IPv6 40, UDP 8, BTH 12, AtomicETH 28, ICRC 4); a
	// WRITE with immediate there takes 98, on native IB with a GRH 86.
	rateHeaderBytes = 128
	// microbitsPerByte: the bucket counts microbits, so that a rate of
	// R kbit/s adds exactly R of them every nanosecond and the arithmetic
	// is exact integers.
	microbitsPerByte = 8_000_000
)

// rateBucket is a QP's token bucket (ratelimit.go).
type rateBucket struct {
	kbps   uint32 // the limit, kbit/s = µbit/ns; 0: none
	level  int64  // tokens in µbit; below zero: a deficit
	last   Time   // when level was brought up to date
	primed bool   // last is valid: the bucket has been used since it was set
}

// set changes the limit. A limit starts with a full bucket; a change of
// limit keeps the level (within the new depth), and the time since the
// bucket was last brought up to date is credited at the new rate (ModifyQP
// does not know the time). 0 takes the limit away.
func (b *rateBucket) set(kbps uint32, mtu int) {
	switch {
	case kbps == 0:
		*b = rateBucket{}
	case b.kbps == 0:
		*b = rateBucket{kbps: kbps}
		b.level = b.depth(mtu)
	default:
		b.kbps = kbps
		b.level = min(b.level, b.depth(mtu))
	}
}

// depth is the most the bucket holds, in µbit: one packet of the path MTU
// or rateWindow of the rate, whichever is more.
func (b *rateBucket) depth(mtu int) int64 {
	return max(int64(mtu+rateHeaderBytes)*microbitsPerByte, int64(b.kbps)*int64(rateWindow))
}

// refill brings the level up to date at now.
func (b *rateBucket) refill(now Time, mtu int) {
	if !b.primed {
		b.last, b.primed = now, true
		return
	}
	dt := int64(now - b.last)
	if dt <= 0 {
		return
	}
	b.last = now
	full := b.depth(mtu)
	room, rate := full-b.level, int64(b.kbps)
	if room <= 0 || dt > room/rate {
		b.level = full // also where the depth shrank (a smaller MTU)
		return
	}
	b.level += dt * rate // dt ≤ room/rate: no overflow
}

// wait is how long from now until the bucket lets a request go: 0 if it
// is not in deficit.
func (b *rateBucket) wait(now Time, mtu int) Time {
	b.refill(now, mtu)
	if b.level >= 0 {
		return 0
	}
	rate := int64(b.kbps)
	return Time((-b.level + rate - 1) / rate)
}

// take charges a frame of n bytes.
func (b *rateBucket) take(n int) { b.level -= int64(n) * microbitsPerByte }

// short reports whether the bucket may not cover a request of payload
// bytes: the requester then asks for an ACK (req.go). A limited QP pauses
// after such a packet, and what it sent before the pause must not wait
// for the acknowledgement of what it sends after: at a low rate that
// could outlast the ACK timeout.
func (b *rateBucket) short(payload uint32) bool {
	return b.kbps != 0 && b.level < (int64(payload)+rateHeaderBytes)*microbitsPerByte
}

// segmentBytes is the most a segment of a limited QP carries: what the
// bucket holds (segment.go rounds it down to whole MTUs, and sends a
// packet when that is not one).
func (b *rateBucket) segmentBytes() uint32 {
	return uint32(min(max(b.level, 0)/microbitsPerByte, maxSegmentBytes))
}

// paced reports whether qp's bucket lets its next request go at now. If
// not, the QP leaves the transmit ring until the bucket has made up its
// deficit: its wait is a timer (Deadline, Advance).
func (d *Device) paced(now Time, qp *QP) bool {
	if qp.sqNext == qp.sqTail {
		return true // nothing to send: no wait to arm
	}
	wait := qp.rate.wait(now, qp.mtu)
	if wait == 0 {
		return true
	}
	qp.req.rateWait = now + wait
	d.watch(qp)
	return false
}

// setRateLimit applies ModifyQP's QPAttrRateLimit. A QP that waits for
// its bucket under the old limit is put back on the transmit ring, so that
// its wait is worked out again under the new one.
func (d *Device) setRateLimit(qp *QP, kbps uint32) {
	qp.rate.set(kbps, qp.mtu)
	if qp.req.rateWait != 0 {
		qp.req.rateWait = 0
		d.schedule(qp)
	}
}
