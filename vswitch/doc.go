// Package vswitch is the core of a userspace InfiniBand switch (IBA 1.4
// Vol 1 chapters 7 and 18) and router (chapter 19), without I/O: its owner
// hands it the packets its cables received (Input), asks it for the
// packets to send on a port (Output, with the cable's credit check and
// send as callbacks), tells it the time (every call takes now; Expire
// applies the lifetimes), and collects the buffer blocks it freed (Freed)
// to return credits upstream. Nothing here reads a clock, starts a
// goroutine or allocates per packet. A Switch is not safe for concurrent
// use, and the callbacks Output takes must not call the same Switch.
//
// # Buffers and credits
//
// The switch is input-queued: every input port has one queue per data VL
// (VL0..VLs-1) of exactly BufferBlocks 64-byte blocks, the unit of link
// credits (§7.9), and one small VL15 queue (VL15Blocks) that is not
// flow controlled. A packet of n bytes (LRH through VCRC, as Input gets
// it) holds ceil(n/64) blocks of its queue from Input until its last copy
// leaves or it is discarded. Freed then reports the blocks per (input port,
// VL). Every block of every data-VL packet Input is given is reported by
// Freed exactly once, whether the packet was queued and left later or was
// dropped at once (bad VCRC, no route, overrun, to the management port):
// so, for a queue, blocks given to Input minus blocks reported by Freed is
// Held, the blocks it holds, and an owner keeping
// free = BufferBlocks − given + freed never leaks credits. The storage of a
// queue is a ring of BufferBlocks×64 bytes plus the largest packet's
// length, so that a packet is always contiguous: the tail past the ring
// holds the part of a packet that wraps and is never counted as buffer.
//
// # Forwarding
//
// DLID 0xFFFF (permissive) and the switch's own LIDs (LID with LMC) go to
// the management port 0: for now they are counted (PortRcvPkts on the
// input, Stats.ToManagement) and dropped. DLIDs 0xC000..0xFFFE use the MFT;
// the others the LFT (an entry of 0 is port 0; 255, the default, is no
// route). Packets with no route, DLID 0, or a unicast route back out of
// their input port are dropped at Input and counted
// PortRcvSwitchRelayErrors on the input port, as are packets whose SL maps
// (SL2VL) to VL15 or to a VL the port does not run when they reach the
// head of their queue: §7.6.6 discards them, and PortRcvSwitchRelayErrors
// is the counter the spec names for "VL mapping" failures of the relay
// (§16.1). A unicast packet's output port is decided at Input (LFT changes
// apply to the packets that arrive after them), its output VL when it
// reaches the head of its input queue. A multicast packet's member ports
// are read from the MFT then too, its input port excluded (and port 0, if
// a member, counted as ToManagement); it stays at the head of its input
// queue until every member port has sent it or it expired. A multicast
// packet whose only member is its input port is dropped without a count.
//
// # Output
//
// Output serves one port. VL15 packets go first, without credit checks or
// arbitration. Data VLs are chosen by the port's VL arbiter (§7.6.9): the
// high-priority table is served while its bytes since the low table last
// had a turn stay below highLimit×4096 (255: no limit; 0: one packet), and
// then one packet of the low table goes (or at once whenever the high
// table has nothing ready). Within a table the entries are taken in order,
// an entry of weight w sending packets while its balance is positive; a
// turn adds w×64 bytes to the balance and each packet subtracts its
// length. The packet that crosses the balance is sent whole (a packet is
// never cut), and its overdraft is carried to the entry's next turn, so that
// over a long run the bytes of the entries are in the ratio of their
// weights whatever the packet sizes (an entry skipped because its VL has
// nothing ready or no credit gives up any surplus, never its debt). Among
// the input queues whose head waits for the chosen VL of this port, the
// one served is the one that has waited longest (round robin across inputs
// and their VL queues). A packet leaves only if credit(vl, blocks) says so;
// a VL refused credit is skipped for the rest of the call.
//
// PortXmitWait counts Output calls: it grows by one for each Output call on
// the port in which credit was refused for at least one packet.
//
// # Lifetimes
//
// Expire discards a queue's head packet once it has been at the head for
// HOQLife (§18.2.5.4) and any packet that has been in the switch for
// SwitchLife, counting PortXmitDiscards on each output port the packet
// still waited for (per replica for multicast), and frees its blocks.
//
// # Router mode
//
// With Config.Router the LFT and MFT are not used. A global packet (LNH
// 3) is routed by the subnet prefix of its GRH's DGID (SetRoute): its LRH
// gets the route's next-hop LID as DLID and the output port's router LID
// as SLID, its GRH hop limit is decremented (a packet arriving with a hop
// limit of 1 or less is dropped and counted PortRcvSwitchRelayErrors and
// Stats.HopLimitDiscards), and its VCRC is updated; the ICRC, which masks
// the LRH and the hop limit of global packets, stays valid.
//
// # VCRC
//
// Input verifies every packet's VCRC. The switch never recomputes one:
// when it changes header bytes (the VL on the way out, the router's LRH
// and hop limit) it patches the VCRC with the CRC of the change, which
// costs the same for any packet length (vcrc.go). A packet without a GRH never crosses a router: it is dropped and
// counted PortRcvSwitchRelayErrors, unless it is addressed to the router
// port's own LID (or the permissive LID), then it is management
// (Stats.ToManagement). Multicast DGIDs are not routed. The DLID of a
// global packet is not checked against the router port's LID: on a
// point-to-point link, whatever arrives was sent to the router.
//
// # Counters
//
// Counters returns PortCounters and PortCountersExtended fields as 64-bit
// values; Attribute gives them saturated at the widths of the PortCounters
// attribute (§16.1). PortXmitData and PortRcvData are in 4-byte words
// of whole packets, LRH through VCRC (bytes are summed and divided once,
// so no rounding accumulates). PortRcvPkts, PortRcvData and the
// unicast/multicast receive counters count every packet that passed the
// link checks (LRH sane, PktLen matching the length, VCRC), including the
// ones the relay then drops; packets failing those checks count only
// PortRcvErrors. The counters of the physical layer (symbol errors, link
// recovery, link downed, remote physical errors, local link integrity) and
// partition enforcement (constraint errors) are not produced by this core
// and stay zero.
package vswitch
