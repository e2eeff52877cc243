#!/usr/bin/env bash
# The InfiniBand fabric's figures, in one run (root not needed: cables
# are UDP on loopback):
#   - the switch's forwarding rate per core against a plain UDP relay
#     (recvmmsg -> sendmmsg) on the same path, 64-byte payloads;
#   - RC write_bw (64 KiB) between two vHCAs cabled directly, and through
#     two switches.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
go build -o "$bin/" ./cmd/verbsd ./cmd/softib ./cmd/vswitch
softib=$bin/softib
labs=$(mktemp -d)
cleanup() {
	for f in "$labs"/*.lab; do "$softib" lab down "$f" >/dev/null 2>&1 || true; done
	rm -rf "$bin" "$labs"
}
trap cleanup EXIT

echo "== switch forwarding vs a UDP relay (64-byte payloads, packets/s) =="
go test -run '^$' -bench 'Forward' -benchtime "${IBBENCH_PACKETS:-300000}x" ./cmd/vswitch | grep -E '^Benchmark'

cat >"$labs/direct.lab" <<'LAB'
lab ibdirect
hca a buffer=1024
hca b buffer=1024
cable a b
LAB
cat >"$labs/two.lab" <<'LAB'
lab ibtwo
switch s1 buffer=1024
switch s2 buffer=1024
hca a buffer=1024
hca b buffer=1024
cable a s1
cable s1 s2
cable s2 b
LAB
for lab in direct two; do
	"$softib" lab up "$labs/$lab.lab" >/dev/null
	sock=/run/softib/ib$lab.sock
	"$softib" -socket "$sock" perf write_bw -d vhca-a -s 65536 -n 20000 -p 18750 --report_gbits >/dev/null &
	srv=$!
	sleep 0.3
	echo "== RC write_bw 64 KiB, $lab =="
	"$softib" -socket "$sock" perf write_bw -d vhca-b -s 65536 -n 20000 -p 18750 --report_gbits --json localhost
	wait "$srv"
	"$softib" lab down "$labs/$lab.lab" >/dev/null
done
