// Package wire holds the InfiniBand Architecture (IBA 1.4) packet formats
// and their Ethernet encapsulations, RoCEv2 (Annex A17) and RoCEv1 (Annex
// A16).
//
// Every header is a view over a byte slice with accessors (LRH, GRH, BTH and
// the extended transport headers of IBA 1.4 §9.3 and §9.4), in network byte
// order, without allocation. The opcode table (opcode.go) is data: which
// transport, operation and packet position an opcode stands for, which
// extended headers follow the BTH in which order, and whether it carries a
// payload. Lengths and offsets are derived from that table only.
//
// Parse turns a received frame into a Packet, a set of offsets into the
// frame, after checking it layer by layer and verifying its ICRC (and VCRC
// for native IB); it never panics whatever the input and reports what was
// wrong as a ParseError. Build is the inverse: it writes the headers a
// Headers value describes into a caller's buffer, copies the payload and
// seals the packet (lengths, IP/UDP checksums, ICRC, VCRC).
//
// The pcap files Writer produces open in Wireshark: RoCE frames as Ethernet,
// native IB frames as ERF InfiniBand records, which Wireshark 4.0 dissects
// without help (it does not know the InfiniBand pcap link type 247).
package wire
