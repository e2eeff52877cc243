// Package perftest speaks the out-of-band setup protocol and prints the
// reports of the linux-rdma perftest suite (ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat,
// ib_atomic_lat), so that a softib benchmark can run against a real perftest
// binary on the other side, in either role, and its output can be compared
// line by line with perftest's.
//
// Everything here mirrors perftest 6.29 (configure.ac AC_INIT), the
// version that introduced nothing new on the wire over 6.28 except a field
// that fills former padding. Only the TCP exchange is covered (perftest run
// without -R / --rdma_cm); the rdma_cm variant carries the same payloads in
// SEND messages instead.
//
// # The TCP exchange
//
// The server listens on DefaultPort (18515) and accepts one connection; the
// client connects once, without retry. Every exchange step then has the same
// shape (ctx_xchg_data_ethernet, ctx_hand_shake): the client writes its
// message and then reads the server's, the server reads first and writes
// second. Both messages have the same fixed size, known in advance, so there
// is no framing. The steps, in order:
//
//  1. Versions (exchange_versions): 16 bytes each way, the version string
//     ("6.29") NUL-padded. A peer older than 5.70 is refused
//     (check_version_compatibility).
//  2. System data (check_sys_data), if the remote version is >= 5.32: the
//     cycle buffer (page size) as a 4-byte big-endian int, then the cache
//     line size likewise, as two separate exchanges; each side keeps the
//     larger value.
//  3. MTU (check_mtu), unless RawEth: 2 bytes, the ibv_mtu enum value in
//     decimal ASCII and a NUL ("5\0" for 4096); each side uses the smaller.
//  4. Parameter negotiation (negotiate_params), if both versions are >= 6.28:
//     a binary struct perftest_parameters_negotiate, see Params.
//  5. Destinations, one ctx_hand_shake per QP: the text of struct
//     pingpong_dest, see Dest. The whole per-QP loop runs twice, once before
//     the QPs are moved to RTR/RTS and once after, and there are extra
//     single-destination barriers around it that differ by test; see
//     Session for the exact order of every test.
//  6. Barriers during and after the run: a barrier (HandShake) is a
//     ctx_hand_shake of QP 0's destination, ignored on receipt.
//  7. Bandwidth reports (xchg_bw_reports): size, iterations and three
//     doubles, big-endian, each field a separate exchange; see BWReport.
//  8. Close (ctx_close_connection): a last barrier, then the socket closes.
//
// # Reports
//
// FormatTestInfo, FormatDest, FormatBWHeader, FormatBWRow, FormatLatHeader
// and FormatLatRow print what perftest prints with the same printf formats;
// ComputeBW and ComputeLat compute the numbers exactly as print_report_bw
// and print_report_lat do, with one nanosecond standing in for one CPU
// cycle. WriteBWJSON and WriteLatJSON write the same results as one JSON
// object per line for softib's own tooling.
package perftest
