#!/usr/bin/env bash
# The issue-4 latency figures in one run: softib perf send_lat (8 bytes,
# RC, busy polling, through a verbsd of its own) beside the one-way
# cache-line ping-pong between two processes (verbsd/abi's benchmark),
# measured in turns, ROUNDS times: the cache line's time on this VM moves
# with where its vCPUs land (30 ns or 160 ns), so each latency is set
# against the yardstick measured just before and just after it.
#   loopback: both sides in one `softib perf --loopback` (one thread on a
#             host with fewer than 4 cores; verbsd's engine keeps a core)
#   two-proc: a server and a client process (three busy threads on two
#             cores take turns by sched_yield)
# verbsd's engine runs on CPU 0 (verbsd -cpus) and the clients on the
# other CPUs, the poll-mode layout (LATENCY_PIN=0: the scheduler's).
# Usage: scripts/latency.sh [iterations] ; ROUNDS=N (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-100000}
rounds=${ROUNDS:-3}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
go build -o "$dir/" ./cmd/verbsd ./cmd/softib
go test -c -o "$dir/abi.test" ./verbsd/abi
sock=$dir/verbsd.sock
cpus=$(nproc) engine=() pin=()
if [ "${LATENCY_PIN:-1}" = 1 ] && [ "$cpus" -ge 2 ]; then
	engine=(-cpus 0) pin=(taskset -c "1-$((cpus - 1))")
	echo "layout: verbsd's engine on CPU 0, the clients on CPUs 1-$((cpus - 1))"
fi
"$dir/verbsd" "${engine[@]}" -socket "$sock" -device vhca0,addr=10.0.0.1,pipe=vhca1 -device vhca1,addr=10.0.0.2 2>"$dir/verbsd.log" &
pids+=($!)
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done

typical() { sed 's/.*"t_typical_us":\([0-9.]*\).*/\1/'; }
cacheline() {
	"$dir/abi.test" -test.run '^$' -test.bench CacheLinePingPong -test.benchtime 1000000x |
		awk '{for (i=1;i<=NF;i++) if ($i=="ns/oneway") print $(i-1)}'
}
ratio() { awk -v t="$1" -v o="$2" 'BEGIN { printf "%.1f", t*1000/o }'; }
median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
all_lb="" all_tp=""

# A round counts where the cache line measured before and after its run
# agree (within 1.5x): the VM's vCPUs may move between the two states in
# the middle of a run, and its latency then belongs to neither.
steady() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < 1.5*b && b < 1.5*a) }'; }
mean() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (a+b)/2 }'; }
report() { # name latency before after
	if steady "$3" "$4"; then
		local o
		o=$(mean "$3" "$4")
		echo "round $r: cache line one way $o ns ($3, $4); send_lat 8 B $1 t_typical $2 us = $(ratio "$2" "$o")x"
		[ "$1" = loopback ] && all_lb+=" $(ratio "$2" "$o")" || all_tp+=" $(ratio "$2" "$o")"
	else
		echo "round $r: send_lat 8 B $1 t_typical $2 us: not counted, the cache line moved from $3 to $4 ns"
	fi
}
for r in $(seq "$rounds"); do
	c1=$(cacheline)
	lb=$("${pin[@]}" "$dir/softib" -socket "$sock" perf send_lat -d vhca0 -x 1 -s 8 -n "$iters" --loopback --json | tail -1 | typical)
	c2=$(cacheline)
	port=$((20000 + RANDOM % 20000))
	"${pin[@]}" "$dir/softib" -socket "$sock" perf send_lat -d vhca0 -x 1 -s 8 -n "$iters" -p "$port" >/dev/null &
	srv=$!
	sleep 0.5
	tp=$("${pin[@]}" "$dir/softib" -socket "$sock" perf send_lat -d vhca1 -x 1 -s 8 -n "$iters" -p "$port" --json 127.0.0.1 | tail -1 | typical)
	wait "$srv"
	c3=$(cacheline)
	report loopback "$lb" "$c1" "$c2"
	report two-proc "$tp" "$c2" "$c3"
done
n_lb=$(wc -w <<<"$all_lb") n_tp=$(wc -w <<<"$all_tp")
echo "medians of the rounds counted: loopback $( [ "$n_lb" -gt 0 ] && median <<<"${all_lb# }" || echo -)x ($n_lb of $rounds), two processes $( [ "$n_tp" -gt 0 ] && median <<<"${all_tp# }" || echo -)x ($n_tp of $rounds) the cache line"
