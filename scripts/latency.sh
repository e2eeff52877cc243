#!/usr/bin/env bash
# The issue-4 latency figure in one run: softib perf send_lat (8 bytes,
# RC, two processes through a verbsd of its own) beside the one-way
# cache-line ping-pong between two processes (verbsd/abi's benchmark).
# Usage: scripts/latency.sh [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-20000}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
go build -o "$dir/" ./cmd/verbsd ./cmd/softib
sock=$dir/verbsd.sock
"$dir/verbsd" -socket "$sock" -device vhca0,addr=10.0.0.1,pipe=vhca1 -device vhca1,addr=10.0.0.2 2>"$dir/verbsd.log" &
pids+=($!)
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
port=$((20000 + RANDOM % 20000))
"$dir/softib" -socket "$sock" perf send_lat -d vhca0 -x 1 -s 8 -n "$iters" -p "$port" >/dev/null &
pids+=($!)
sleep 0.5
lat=$("$dir/softib" -socket "$sock" perf send_lat -d vhca1 -x 1 -s 8 -n "$iters" -p "$port" --json 127.0.0.1 | tail -1)
line=$(go test -run '^$' -bench CacheLinePingPong -benchtime 1000000x ./verbsd/abi | grep oneway)
oneway=$(echo "$line" | awk '{for (i=1;i<=NF;i++) if ($i=="ns/oneway") print $(i-1)}')
typ=$(echo "$lat" | sed 's/.*"t_typical_us":\([0-9.]*\).*/\1/')
echo "send_lat 8 B: $lat"
echo "cache line one way: $oneway ns"
awk -v t="$typ" -v o="$oneway" 'BEGIN { printf "send_lat t_typical / cache-line one way = %.1f\n", t*1000/o }'
