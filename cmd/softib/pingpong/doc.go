// Package pingpong is the non-verbs half of a Go port of rdma-core's
// libibverbs examples ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong
// (libibverbs/examples/{rc,uc,ud}_pingpong.c and pingpong.c): the TCP
// address exchange, the command line and the text the programs print, all
// byte-compatible with the C programs, so that a Go peer and a C peer can
// run against each other and their output can be compared line by line.
// The verbs half (device, PD, MR, CQ, QP) is left to the caller; this file
// describes everything that caller needs to know.
//
// # Roles
//
// A program run without an operand is the server; with one operand (a host
// name or address) it is the client. Both sides run the same ping-pong; the
// client starts it.
//
// # Order of events (identical in rc, uc and ud)
//
// Both sides, before any TCP traffic:
//  1. create the QP (max_send_wr 1, max_recv_wr rx-depth, one SGE each)
//     and a single CQ of rx-depth+1 entries used for both send and receive,
//     and move the QP to INIT;
//  2. pre-post rx-depth receives (all with wr_id RecvWRID; failing to post
//     them all is fatal: "Couldn't post receive (%d)");
//  3. choose a random 24-bit PSN (RandomPSN; lrand48() & 0xffffff in C),
//     take the LID from the port and the GID from index -g (all zero when
//     -g is not given), and print the local-address line (LocalAddressLine).
//     rc and uc give up with "Couldn't get local LID" if the LID is 0 on a
//     port whose link layer is not Ethernet; ud does not check.
//
// Then the TCP exchange (pp_server_exch_dest / pp_client_exch_dest), on
// port -p (default 18515):
//
//	server                                client
//	listen on the wildcard address,
//	accept one connection, then
//	close the listening socket
//	                                      connect to <host>:<port>
//	                              <------ 52-byte message: client's Dest
//	read 52 bytes, parse
//	connect the QP (RTR, RTS; ud: also
//	create the AH) using the client's Dest
//	52-byte message: server's Dest ------>
//	                                      read 52 bytes
//	                              <------ "done\x00" (5 bytes), close
//	read exactly 5 bytes, close           parse the server's Dest
//
// The server connects its QP before it sends its own address: the client
// sends its first message as soon as it has that address, so the server's
// QP must already be in RTR with its receives posted by then. ServerExchange
// and Serve take a callback for exactly this step. The "done" message
// belongs to the exchange, not to the end of the run: the C server blocks in
// it before it starts polling its CQ, so a Go client must call Session.Done
// right after ClientExchange returns (before its first post_send), or a C
// server never answers. The Go server may call Session.Done whenever it
// likes, but the natural place is the same: right after ServerExchange.
//
// Both sides then print the remote-address line (RemoteAddressLine); the
// client connects its QP with the server's Dest; the client posts the first
// send; both run the ping-pong loop (Loop) and print the two result lines
// (ResultLines).
//
// # The address message
//
// One message, the same in all three programs (ud does not send its QKey:
// both sides use the constant UDQKey):
//
//	printf("%04x:%06x:%06x:%s", lid, qpn, psn, wire_gid) then a NUL
//
// that is 4 + 1 + 6 + 1 + 6 + 1 + 32 = 51 characters, lower-case hex, and a
// terminating NUL, MsgSize = 52 bytes in all (the C buffer is sizeof
// "0000:000000:000000:00000000000000000000000000000000"). The whole buffer,
// NUL included, is written with one write and read with one read of 52
// bytes. The wire GID is gid_to_wire_gid's output: the GID viewed as four
// 32-bit words, each converted with htobe32 and printed with %08x. Since the
// word is first copied out of memory in host order and then put back into
// big-endian order, the result on every host is simply the 16 GID bytes in
// memory (network) order as 32 hex digits: fe80::1 is
// "fe800000000000000000000000000001" and ::ffff:10.0.0.1 is
// "00000000000000000000ffff0a000001". wire_gid_to_gid inverts this, again
// independently of the host. Dest.Wire and ParseDest implement the format.
//
// # What is done with the remote Dest
//
// The GRH is used only if the remote GID's interface ID (its low 8 bytes)
// is non-zero (Dest.IsGlobal), with the local GID index -g as sgid_index and
// hop limit Transport.HopLimit: 1 for rc and uc, 64 for ud (since rdma-core
// commit 41817007b, 2025; before that 1). Otherwise the AH is LID-routed to
// the remote LID, with SL -l and the local port -i.
//
//   - rc: INIT has qp_access_flags 0. RTR: path_mtu from -m, dest_qp_num
//     and rq_psn from the remote Dest, max_dest_rd_atomic 1, min_rnr_timer
//     12. RTS: sq_psn the local PSN, timeout 14, retry_cnt 7, rnr_retry 7,
//     max_rd_atomic 1.
//   - uc: the same without the rc-only attributes: RTR sets path_mtu,
//     dest_qp_num, rq_psn and the AV; RTS sets only sq_psn.
//   - ud: INIT sets qkey 0x11111111 (UDQKey). RTR sets nothing but the
//     state; RTS sets sq_psn. Then an AH is created for the remote side, and
//     every send carries that AH, the remote QPN and remote_qkey UDQKey. The
//     remote PSN is not used at all. ud has no -m: it fails with "Requested
//     size larger than port MTU (%d)" if -s exceeds the port's active MTU.
//
// # Buffers
//
// One buffer serves both directions, filled with 0x7b (BufFill) at start,
// registered with IBV_ACCESS_LOCAL_WRITE. Sends are IBV_WR_SEND, signaled,
// and inline when the QP's max_inline_data reaches -s (rc: not with -j).
// In rc and uc both sends and receives use the whole buffer (-s bytes). In
// ud the buffer is -s + 40 bytes: receives use all of it because the first
// GRHSize (40) bytes of every UD receive hold the GRH, present or not; sends
// start 40 bytes in and carry -s bytes.
//
// With -c the client writes 0 at the first byte of every page of its
// payload (C's "i / page_size % sizeof(char)", which is always 0) before its
// first send, and after the run the server checks those bytes and prints
// "invalid data in page %d" (InvalidPageLine) for each mismatch; in ud the
// payload starts at offset 40.
//
// # The loop
//
// Receives carry wr_id RecvWRID (1), sends SendWRID (2); the two values are
// also the bits of a "pending" mask. The server starts with pending =
// RecvWRID; the client posts the first send before starting the clock and
// starts with pending = RecvWRID|SendWRID. The CQ is polled two entries at a
// time (or after a CQ event with -e). For every successful completion:
//
//   - send: scnt++;
//   - receive: outstanding receives minus one; if one or none is left,
//     re-post rx-depth minus the outstanding count; then rcnt++;
//   - clear the completion's bit in pending; if pending is now empty and
//     scnt < iters, post a send and set pending to both bits.
//
// The loop ends when rcnt and scnt both reach -n. A send is therefore posted
// only after the previous send has completed and a message has arrived, so
// each side sends and receives exactly -n messages. Loop implements this.
//
// # Output
//
// The elapsed time covers the loop only (gettimeofday, microseconds). Both
// sides print (ResultLines):
//
//	%lld bytes in %.2f seconds = %.2f Mbit/sec
//	%d iters in %.2f seconds = %.2f usec/iter
//
// with bytes = size * iters * 2 and the microsecond count held in a C float,
// so its precision and the single-precision usec/iter division are
// reproduced here. rc with -t adds three timestamp lines (TimestampLines).
package pingpong
