#!/usr/bin/env bash
# make fastpath: the RoCEv2 fast path (XDP steering into AF_XDP) against
# the TAP path, on one two-node lab (scripts/fastpath.lab: each node's
# vHCA has a TAP on its bridge and the fast path on its veth), measured
# by the same tool in one run (softib perf --path tap|xdp), beside the
# kernel's best batched UDP (sendmmsg/recvmmsg, 64 per call) between the
# same namespaces over the same veths. Root only.
set -euo pipefail
cd "$(dirname "$0")/.."
lab=scripts/fastpath.lab name=fp host=10.15.0.101
. scripts/labbench.sh
rounds=${FASTPATH_ROUNDS:-1}
for r in $(seq "$rounds"); do
	for path in tap xdp; do
		echo "== round $r, path $path =="
		perf write_bw --path "$path" -s 64 -n 200000 --report_gbits
		perf write_bw --path "$path" -s 1024 -n 100000 --report_gbits
		perf write_bw --path "$path" -s 65536 -n 5000 --report_gbits
	done
	echo "== round $r, kernel UDP, sendmmsg/recvmmsg 64 per call =="
	udp udp_bw -b 64 -s 64 -n 1000000 | grep arrived
	udp udp_bw -b 64 -s 1024 -n 500000 | grep arrived
done
# The kernel's UDP once more with no XDP program on the veths (the same
# lab with TAP-only nodes): what the steering program costs it.
"$softib" lab down "$lab"
lab=$bin/plain.lab
sed 's/ path=xdp//' scripts/fastpath.lab >"$lab"
"$softib" lab up "$lab" >/dev/null
echo "== kernel UDP, no XDP program on the veths =="
udp udp_bw -b 64 -s 64 -n 1000000 | grep arrived
udp udp_bw -b 64 -s 1024 -n 500000 | grep arrived
