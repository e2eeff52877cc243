package wire

// Segments are how two vHCAs in one process pass a message without
// copying it twice: a segment is a packet whose headers are built as for
// a packet carrying the payload (every length field counts it, its pad and
// its ICRC), while the payload itself stays in the sender's memory and
// travels beside the frame as a slice. The frame ends where the payload
// would begin. Segments are unsealed: they never leave the process. They
// may carry more than a path MTU; what that means for PSNs is the
// transport's business (vhca), not the format's.

// EncodeSegment writes the headers of a packet carrying payload into buf
// and sets p to describe the segment; p.Payload() is payload.
func (h *Headers) EncodeSegment(buf, payload []byte, p *Packet) error {
	if err := h.encode(buf, len(payload), true, p); err != nil {
		return err
	}
	p.seg = payload
	return nil
}

// ParseEthernetSegment parses a segment EncodeSegment made: the frame
// holds the headers, payload the data. The checks are ParseEthernetUnsealed's,
// on the packet the headers describe, and the headers must end exactly
// where the frame does. Only for segments made in this process: the frame
// must hold every header its own fields announce.
func ParseEthernetSegment(frame, payload []byte, p *Packet) error {
	p.unsealed, p.seg = true, payload
	p.flen = len(frame) + len(payload) + (-len(payload) & 3) + ICRCLen
	if err := p.parseEthernet(frame); err != nil {
		return err
	}
	if p.payload != len(frame) || p.PayloadLen != len(payload) {
		return ErrBadLength
	}
	return nil
}
