package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// pcap link types (tcpdump.org/linktypes.html) and the ERF record type.
const (
	LinkTypeEthernet   = 1   // RoCEv1 and RoCEv2 frames
	LinkTypeERF        = 197 // Endace ERF records
	LinkTypeInfiniBand = 247 // raw IB frames from the LRH; Wireshark 4.0 cannot open it
	ERFTypeInfiniBand  = 21  // ERF record type for an IB frame, LRH through VCRC

	pcapMagicMicro  = 0xA1B2C3D4
	pcapMagicNano   = 0xA1B23C4D
	pcapSnapLen     = 262144
	pcapHeaderLen   = 24
	pcapRecordLen   = 16
	erfHeaderLen    = 16
	erfFlagVarLen   = 0x04 // varying-length record: no padding to 8 bytes
	erfTypeExtFlag  = 0x80 // an 8-byte extension header follows
	erfExtHeaderLen = 8
)

// PcapWriter writes a classic pcap file. Native IB frames are written as
// ERF InfiniBand records (link type 197): the Wireshark Debian 12 ships
// (4.0) opens those and dissects them as InfiniBand, while it rejects link
// type 247 ("network type 247 unknown or unsupported").
type PcapWriter struct {
	w        io.Writer
	linkType uint32
	hdr      [pcapRecordLen + erfHeaderLen]byte
}

// NewPcapWriter writes the file header for frames of the given
// encapsulation family: Ethernet for RoCE, ERF InfiniBand for native IB.
func NewPcapWriter(w io.Writer, ib bool) (*PcapWriter, error) {
	pw := &PcapWriter{w: w, linkType: LinkTypeEthernet}
	if ib {
		pw.linkType = LinkTypeERF
	}
	var h [pcapHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagicMicro)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], pcapSnapLen)
	binary.LittleEndian.PutUint32(h[20:], pw.linkType)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return pw, nil
}

// WritePacket appends one frame captured at t.
func (pw *PcapWriter) WritePacket(t time.Time, frame []byte) error {
	if len(frame) > pcapSnapLen-erfHeaderLen {
		return fmt.Errorf("wire: pcap: %d-byte frame exceeds the snap length", len(frame))
	}
	h := pw.hdr[:pcapRecordLen]
	n := len(frame)
	if pw.linkType == LinkTypeERF {
		n += erfHeaderLen
		e := pw.hdr[pcapRecordLen:]
		// ERF timestamp: little-endian 32.32 fixed point seconds.
		sec, frac := uint64(t.Unix()), uint64(t.Nanosecond())<<32/1e9
		binary.LittleEndian.PutUint64(e[0:], sec<<32|frac)
		e[8] = ERFTypeInfiniBand
		e[9] = erfFlagVarLen
		binary.BigEndian.PutUint16(e[10:], uint16(n))          // rlen
		binary.BigEndian.PutUint16(e[12:], 0)                  // lctr: no loss
		binary.BigEndian.PutUint16(e[14:], uint16(len(frame))) // wlen: LRH..VCRC
		h = pw.hdr[:]
	}
	binary.LittleEndian.PutUint32(h[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(t.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(h[8:], uint32(n))
	binary.LittleEndian.PutUint32(h[12:], uint32(n))
	if _, err := pw.w.Write(h); err != nil {
		return err
	}
	_, err := pw.w.Write(frame)
	return err
}

// PcapRecord is one frame read from a pcap file. LinkType is the frame's
// own: an ERF InfiniBand record comes out as LinkTypeInfiniBand with the
// ERF header removed.
type PcapRecord struct {
	Time     time.Time
	LinkType uint32
	Data     []byte
}

// PcapReader reads a classic pcap file of either byte order and
// resolution.
type PcapReader struct {
	r        io.Reader
	order    binary.ByteOrder
	nano     bool
	linkType uint32
	hdr      [pcapRecordLen]byte
	buf      []byte
}

var errPcapFormat = errors.New("wire: pcap: not a classic pcap file")

func NewPcapReader(r io.Reader) (*PcapReader, error) {
	var h [pcapHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	pr := &PcapReader{r: r}
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		switch o.Uint32(h[0:]) {
		case pcapMagicMicro:
			pr.order = o
		case pcapMagicNano:
			pr.order, pr.nano = o, true
		}
	}
	if pr.order == nil {
		return nil, errPcapFormat
	}
	pr.linkType = pr.order.Uint32(h[20:]) & 0x0FFFFFFF
	return pr, nil
}

// LinkType is the file's link type.
func (pr *PcapReader) LinkType() uint32 { return pr.linkType }

// Next returns the next record, or io.EOF. Data is valid until the next
// call.
func (pr *PcapReader) Next() (PcapRecord, error) {
	if _, err := io.ReadFull(pr.r, pr.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("wire: pcap: truncated record header")
		}
		return PcapRecord{}, err
	}
	sec := pr.order.Uint32(pr.hdr[0:])
	frac := pr.order.Uint32(pr.hdr[4:])
	incl := pr.order.Uint32(pr.hdr[8:])
	if incl > pcapSnapLen*4 {
		return PcapRecord{}, fmt.Errorf("wire: pcap: implausible record length %d", incl)
	}
	if cap(pr.buf) < int(incl) {
		pr.buf = make([]byte, incl)
	}
	data := pr.buf[:incl]
	if _, err := io.ReadFull(pr.r, data); err != nil {
		return PcapRecord{}, fmt.Errorf("wire: pcap: truncated record: %w", err)
	}
	nsec := int64(frac) * 1000
	if pr.nano {
		nsec = int64(frac)
	}
	rec := PcapRecord{Time: time.Unix(int64(sec), nsec), LinkType: pr.linkType, Data: data}
	if pr.linkType == LinkTypeERF {
		ib, ok := erfInfiniBand(data)
		if !ok {
			return PcapRecord{}, fmt.Errorf("wire: pcap: ERF record is not InfiniBand")
		}
		rec.LinkType, rec.Data = LinkTypeInfiniBand, ib
	}
	return rec, nil
}

// erfInfiniBand returns the IB frame of an ERF record of type InfiniBand,
// skipping any extension headers; wlen bounds the frame.
func erfInfiniBand(rec []byte) ([]byte, bool) {
	if len(rec) < erfHeaderLen {
		return nil, false
	}
	typ := rec[8]
	wlen := int(binary.BigEndian.Uint16(rec[14:]))
	off := erfHeaderLen
	for t := typ; t&erfTypeExtFlag != 0; {
		if len(rec) < off+erfExtHeaderLen {
			return nil, false
		}
		t = rec[off]
		off += erfExtHeaderLen
	}
	if typ&^erfTypeExtFlag != ERFTypeInfiniBand || len(rec) < off+wlen {
		return nil, false
	}
	return rec[off : off+wlen], true
}
