#!/usr/bin/env bash
# make fastpath: the RoCEv2 fast path (XDP steering into AF_XDP) against
# the TAP path, on one two-node lab (scripts/fastpath.lab: each node's
# vHCA has a TAP on its bridge and the fast path on its veth), measured
# by the same tool in one run (softib perf --path tap|xdp), beside the
# kernel's best batched UDP (sendmmsg/recvmmsg, 64 per call) between the
# same namespaces over the same veths. Root only.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "make fastpath needs root (network namespaces, XDP)" >&2; exit 1; }
bin=$(mktemp -d)
go build -o "$bin/" ./cmd/verbsd ./cmd/softib
softib=$bin/softib
lab=scripts/fastpath.lab
plain=
cleanup() {
	"$softib" lab down "$lab" || true
	rm -rf "$bin" "$plain"
}
trap cleanup EXIT
"$softib" lab up "$lab"
sock=/run/softib/fp.sock
perf() { # TEST ARGS...: server in node a, client in node b; the client's JSON line
	ip netns exec fp-a "$softib" -socket "$sock" perf "$@" -d vhca-a -x 1 >/dev/null &
	local srv=$!
	sleep 0.5
	ip netns exec fp-b "$softib" -socket "$sock" perf "$@" -d vhca-b -x 1 --json 10.15.0.101
	wait "$srv"
}
udp() { # the kernel's UDP between the nodes' own addresses, same veths
	ip netns exec fp-a "$softib" perf udp_bw "$@" >/tmp/fastpath-udp.$$ &
	local srv=$!
	sleep 0.3
	ip netns exec fp-b "$softib" perf udp_bw "$@" 10.15.0.101 >/dev/null
	wait "$srv"
	cat /tmp/fastpath-udp.$$
	rm -f /tmp/fastpath-udp.$$
}
rounds=${FASTPATH_ROUNDS:-1}
for r in $(seq "$rounds"); do
	for path in tap xdp; do
		echo "== round $r, path $path =="
		perf write_bw --path "$path" -s 64 -n 200000 --report_gbits
		perf write_bw --path "$path" -s 1024 -n 100000 --report_gbits
		perf write_bw --path "$path" -s 65536 -n 5000 --report_gbits
	done
	echo "== round $r, kernel UDP, sendmmsg/recvmmsg 64 per call =="
	udp -b 64 -s 64 -n 1000000
	udp -b 64 -s 1024 -n 500000
done
# The kernel's UDP once more with no XDP program on the veths (the same
# lab with TAP-only nodes): what the steering program costs it.
"$softib" lab down "$lab"
plain=$(mktemp)
sed 's/ path=xdp//' "$lab" >"$plain"
lab=$plain
"$softib" lab up "$lab" >/dev/null
echo "== kernel UDP, no XDP program on the veths =="
udp -b 64 -s 64 -n 1000000
udp -b 64 -s 1024 -n 500000
