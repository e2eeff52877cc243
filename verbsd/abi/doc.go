// Package abi is what verbsd and its clients share: the messages of the
// control socket, the layout of the rings in shared memory through which
// work requests and completions pass, and the layout of their entries.
// It is written so that a client in another language can follow it; this
// comment, with the structs of msg.go and the offsets of wqe.go, is the
// reference.
//
// # The control socket
//
// verbsd listens on a unix socket of type SOCK_SEQPACKET (default
// /run/softib/verbsd.sock). One connection is one device context
// (ibv_context): everything made through it belongs to it and is
// destroyed when it closes, whether the client closed it or died. verbsd
// admits a connection by its SO_PEERCRED credentials: root, verbsd's own
// user, and one group (softib by default).
//
// Each message is one packet: a 16-byte header, then a body. All integers
// are in the host's byte order.
//
//	offset  size  header field
//	0       2     ABI version (Version, 3)
//	2       2     operation (Op)
//	4       4     sequence number, chosen by the client, echoed in the reply
//	8       4     status: 0 in requests; in replies 0 or an errno value
//	12      4     zero
//
// A reply with a non-zero status has as its body a UTF-8 text saying what
// was wrong; otherwise the body is the operation's reply struct (msg.go).
// Bodies are the structs of msg.go written field by field in order with
// no padding (each struct is laid out so that C's natural alignment adds
// none either). A request whose body has the wrong length is refused
// with EINVAL. File descriptors travel as SCM_RIGHTS ancillary data.
//
// The first request must be Hello (no body). A client of another ABI
// version gets EPROTO with a text naming both versions, and the
// connection is closed. The reply (HelloReply) carries one descriptor:
// the doorbell, an eventfd. Then:
//
//	ListDevices         → array of DeviceEntry
//	OpenDevice          OpenDevice → OpenDeviceReply; once per connection,
//	                    before any of the following
//	QueryDevice         → DeviceAttr
//	QueryPort           PortQuery{port} → PortAttr
//	QueryGID            PortQuery{port, index} → GIDEntry
//	QueryPKey           PortQuery{port, index} → PKey
//	QueryCounters       PortQuery{port} → Counters
//	AllocPD             → Handle
//	DeallocPD           Handle →
//	RegMR               RegMR + memfd → RegMRReply
//	DeregMR             Handle →
//	CreateCompChannel   eventfd → Handle
//	DestroyCompChannel  Handle →
//	CreateCQ            CreateCQ → CreateCQReply + memfd of the CQ ring
//	DestroyCQ           Handle →
//	CreateSRQ           CreateSRQ → CreateSRQReply + memfd of the SRQ ring
//	ModifySRQ           ModifySRQ →
//	QuerySRQ            Handle → CreateSRQ (MaxWR, MaxSGE, Limit)
//	DestroySRQ          Handle →
//	CreateQP            CreateQP → CreateQPReply + memfd of its SQ and RQ rings
//	ModifyQP            ModifyQP →
//	QueryQP             Handle → QueryQPReply
//	DestroyQP           Handle →
//	CreateAH            CreateAH → Handle
//	DestroyAH           Handle →
//	AddAddr             Addr → Handle (the new GID's index)
//	DelAddr             Addr →
//	SetPath             SetPath → (a port with a TAP and the fast path:
//	                    which of the two its RoCEv2 takes; PortAttr's
//	                    Paths and Path tell what it has and uses)
//	AttachMcast         Mcast → (a UD QP joins the multicast group MGID,
//	                    MLID: ibv_attach_mcast; joining again is no error;
//	                    EINVAL for another QP type, a GID not ff00::/8 or
//	                    a LID not 0xC000..0xFFFE; EOPNOTSUPP on a RoCE port)
//	DetachMcast         Mcast → (ibv_detach_mcast; EINVAL if the QP is not
//	                    attached to that group and MLID)
//
// DestroyQP of a QP still attached to a multicast group is refused with
// EBUSY, as the kernel refuses it; closing the connection detaches its
// QPs before destroying them.
//
// Handles name the connection's objects; they are not valid on another
// connection. verbsd also sends, unasked, Event messages (sequence number
// 0): asynchronous events (ibv_async_event), of which DEVICE_FATAL (8)
// says verbsd is shutting down and the connection will close.
//
// Memory a client registers is a memfd it made with MFD_ALLOW_SEALING and
// sealed with F_SEAL_SHRINK (so that verbsd's mapping can never fault),
// sent with RegMR together with the offset and length of the region and
// the address the client's work requests will use for its first byte
// (IOVA). verbsd maps that range; its DMA is a copy into or out of it.
// Anything else is refused with EINVAL.
//
// Per-client limits (QPs, CQs, MRs, SRQs, AHs, PDs, registered bytes) give
// ENOMEM with a text naming the limit.
//
// # Work requests and completions
//
// Send queue entries (SendWQESize bytes: 64 + 16 × max(max_send_sge,
// ⌈max_inline_data/16⌉)):
//
//	0   u64  wr_id
//	8   u8   opcode (ibv_wr_opcode)
//	9   u8   number of SGEs
//	10  u16  send flags (ibv_send_flags: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8)
//	12  u32  immediate data (as the application gives it) or R_Key to invalidate
//	16  u64  remote address (RDMA, atomics)
//	24  u32  R_Key
//	28  u32  inline data length
//	32  u64  compare (CmpSwap) or add (FetchAdd) value
//	40  u64  swap value
//	48  u32  address handle (UD: a Handle from CreateAH)
//	52  u32  remote QPN (UD)
//	56  u32  remote Q_Key (UD)
//	60  u32  sequence word (see Rings)
//	64  ...  SGEs, or the inline data when the INLINE flag is set
//
// An SGE is 16 bytes: u64 address, u32 length, u32 L_Key. Receive queue
// and SRQ entries (RecvWQESize: 16 + 16 × max_recv_sge): u64 wr_id, u32
// number of SGEs, u32 sequence word, then the SGEs.
//
// Completion queue entries (64 bytes, the fields of ibv_wc):
//
//	0   u64  wr_id
//	8   u8   status (ibv_wc_status)
//	9   u8   opcode (ibv_wc_opcode)
//	10  u8   SL
//	11  u8   DLID path bits
//	12  u32  vendor error
//	16  u32  byte length
//	20  u32  immediate data or invalidated R_Key
//	24  u32  QP number
//	28  u32  source QP
//	32  u32  wc_flags (ibv_wc_flags)
//	36  u16  P_Key index
//	38  u16  SLID
//	40  ...  zero, up to
//	60  u32  sequence word
//
// verbsd checks every entry it reads: counts against the entry size and
// the queue's capabilities, the opcode against the QP type, the address
// handle against the connection's own; L_Keys, lengths and addresses are
// checked when the work request is carried out, against the client's own
// regions only. An entry that fails completes with LOC_QP_OP_ERR (2) and
// moves its QP to the error state (which flushes what follows); a bad SRQ
// entry raises SRQ_ERR.
//
// Arming a CQ (ibv_req_notify_cq) writes the CQ ring's arm word, at
// offset 196 of the ring header, written by the client only: add 2 to
// it, and set bit 0 for solicited completions only. verbsd raises one
// completion event per arm: it increments the event count at offset 68
// (written by verbsd only) and then writes 1 to the completion channel's
// eventfd. A client waiting on a channel reads the eventfd, then looks
// for the CQs of the channel whose event count moved. Store the arm word
// sequentially consistently and poll the CQ once more before waiting
// (as with ibv_req_notify_cq): verbsd looks at the arm words before it
// sleeps, and a completion it published before it looked is seen by that
// poll.
//
// # Rings
//
// Every send queue, receive queue, shared receive queue and completion
// queue is a single-producer single-consumer ring in a memfd that verbsd
// creates and both sides map. verbsd decides the ring's size and entry size
// and writes the header; it never reads them back, since the client can
// write anywhere in the mapping.
//
//	offset  size  field
//	0       4     magic 0x52494E47 ("RING" read as a big-endian word)
//	4       2     layout version, 2
//	6       2     kind: 1 send queue, 2 receive queue, 3 SRQ, 4 CQ
//	8       4     entry size in bytes, a multiple of 8
//	12      4     number of entries, a power of two
//	16      48    reserved, zero
//	64      4     producer index
//	68      4     CQ rings: completion events raised (by the producer)
//	128     4     consumer index
//	192     4     flags: bit 0, the consumer is asleep
//	196     4     CQ rings: arm word (by the consumer)
//	256     ...   the entries: entry at index i starts at
//	              256 + (i mod entries) × entry size
//
// All integers are in the host's byte order: both sides run on one host.
// The producer and consumer indices are free-running 32-bit counters (they
// wrap at 2^32, which the power-of-two size keeps consistent), each on its
// own cache line and each written by one side only: the producer index by
// the producer, the consumer index by the consumer. producer − consumer
// (mod 2^32) entries are published and not yet consumed; it is never more
// than the number of entries.
//
// Each entry also carries a sequence word (offset 60 of a send queue
// entry and of a CQE, 12 of a receive queue entry): the entry at index i
// is published when its sequence word is i + 1 (mod 2^32). A consumer
// finds what was published by reading the sequence words of the entries
// from its index on, in the cache lines it copies next: a trip between
// cores per message, where reading the producer index first made two,
// one after the other. A ring's memory starts zeroed (verbsd makes each
// in a new memfd).
//
// Producing: write entries at the producer index onwards, then the
// sequence word of each with release ordering, after the rest of it (C11
// memory_order_release; a plain MOV on x86-64, but one the compiler must
// not move before the entry's stores), then store the new producer index
// once for the whole batch, sequentially consistently for an SQ, RQ or
// SRQ (below). Then read the flags: if the
// consumer is asleep, signal its doorbell (an eventfd, handed over on the
// control socket). A producer need not load the consumer index before
// each batch: the room its last reading left is still there (verbsd reads
// a CQ's consumer index again only when that room runs short, so a
// corrupt one is noticed then).
//
// Send completions count consumed SQ entries: verbsd stores an SQ's
// consumer index past an entry before it writes any completion of that
// entry's work request into a CQ ring (a success, an error, a flush), and
// every send completion is of one entry. So a client that has polled n
// send completions of a QP knows that at least its first n SQ entries
// are consumed, and need not load the consumer index for that room.
// A program that posts again as soon as it sees its send complete, with
// a one-entry SQ (perftest's latency tests), would otherwise load it at
// every post: a trip between cores, on the message's path.
//
// Consuming: load the sequence word of the entry at the consumer's index
// with acquire ordering; while it is published, copy the entry out of
// shared memory before looking at it (the other side may still write to
// it) and go on to the next. Then store the new consumer index with
// release ordering. On x86-64 a release store is a plain MOV; a
// sequentially consistent one (XCHG) waits for the cache lines of every
// earlier store, which costs a trip between cores on each message. Only
// the stores of the sleeping protocol below need to be sequentially
// consistent: the producer index of an SQ, RQ or SRQ, whose consumer
// (verbsd) sleeps, and the flags. No consumer reads the producer index;
// it is the producer's fence, and a record for whoever inspects a ring.
//
// Sleeping: a consumer that finds the ring empty sets the asleep flag,
// loads the sequence word at its index again, and only then blocks on its
// doorbell if the entry is still not published (clearing the flag when
// it wakes). Each side needs a full fence between its store and its
// load: the consumer's store of the flag and the producer's store of the
// producer index, both sequentially consistent (what Go's sync/atomic
// gives; an XCHG on x86-64), are those fences; in C11, where a
// sequentially consistent store is not a fence for other locations,
// follow each with atomic_thread_fence(memory_order_seq_cst). Then either
// the producer sees the flag and rings, or the consumer sees the new
// sequence word: no wake-up is lost.
//
// verbsd treats every value it reads from a client's ring as hostile: it
// takes what the sequence words say, never more than the ring holds, and
// checks each entry as above; a consumer index that claims more was
// consumed than was produced is an error of that client (its CQ goes to
// the error state), never a crash.
package abi
