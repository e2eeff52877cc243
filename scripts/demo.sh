#!/usr/bin/env bash
# make demo: a two-node RoCEv2 lab (scripts/demo.lab) on this machine, as
# root: two network namespaces, a vHCA behind a TAP in each, one Ethernet
# segment; softib perf write_bw and send_lat across it (perftest's output);
# a capture of the segment checked by ../shared/tools/check_pcap.py when
# it is there; then everything is torn down.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "make demo needs root (network namespaces, TAPs)" >&2; exit 1; }
bin=$(mktemp -d)
out=${SOFTIB_DEMO_DIR:-/tmp/softib-demo}
mkdir -p "$out"
go build -o "$bin/" ./cmd/verbsd ./cmd/softib
softib=$bin/softib
lab=scripts/demo.lab
cap_pid=
cleanup() {
	[ -n "$cap_pid" ] && kill -INT "$cap_pid" 2>/dev/null && wait "$cap_pid" 2>/dev/null || true
	"$softib" lab down "$lab" || true
	rm -rf "$bin"
}
trap cleanup EXIT
"$softib" lab up "$lab"
sock=/run/softib/demo.sock
pcap=$out/demo.pcap
rm -f "$pcap"
if command -v dumpcap >/dev/null; then
	ip netns exec demo dumpcap -q -P -i br0 -w "$pcap" 2>/dev/null &
	cap_pid=$!
	for _ in $(seq 50); do [ -s "$pcap" ] && break; sleep 0.1; done
fi
run() { # TEST: server in node a, client in node b
	echo
	echo "== softib perf $1 (server: demo-a, client: demo-b) =="
	ip netns exec demo-a "$softib" -socket "$sock" perf "$@" -d vhca-a -x 1 >/dev/null &
	local srv=$!
	sleep 0.5
	ip netns exec demo-b "$softib" -socket "$sock" perf "$@" -d vhca-b -x 1 10.11.0.101
	wait "$srv"
}
run write_bw --report_gbits -n 2000
run send_lat -n 2000
udp() { # the kernel's own UDP between the same two namespaces, for scale
	ip netns exec demo-a "$softib" perf "$@" &
	local srv=$!
	sleep 0.3
	ip netns exec demo-b "$softib" perf "$@" 10.11.0.101
	wait "$srv"
}
echo
echo "== the kernel's UDP across the same segment, for scale =="
udp udp_bw -s 8972 -n 100000
udp udp_lat -s 8 -n 2000
if [ -n "$cap_pid" ]; then
	sleep 0.3
	kill -INT "$cap_pid"; wait "$cap_pid" 2>/dev/null || true; cap_pid=
	echo
	echo "capture of the segment: $pcap (open it in Wireshark)"
	checker=../shared/tools/check_pcap.py
	if [ -f "$checker" ] && command -v python3 >/dev/null; then
		python3 "$checker" -q --no-scapy --require-roce "$pcap" || echo "check_pcap found problems (above)"
	fi
fi
