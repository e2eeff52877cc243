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
# The poll-mode layout, as AF_XDP and DPDK deployments give a poller:
# verbsd's engine alone on CPU 0, the veths' NAPI threads and the perf
# clients on the others, the same for both paths. On two cores, left to
# the scheduler, a NAPI thread woken by the engine's sendto runs on the
# engine's core and preempts it in the middle of its batch, while the
# other core runs a client that waits. FASTPATH_PIN=0: no placement.
# The kernel's UDP gets its own best: its receiver on CPU 0 and its
# sender on CPU 1 (a fifth to a third more than the scheduler's
# placement here), the NAPI threads unbound.
cpus=$(nproc)
if [ "$cpus" -ge 2 ]; then
	udp_rx_cpu=0 udp_tx_cpu=1
fi
if [ "${FASTPATH_PIN:-1}" = 1 ] && [ "$cpus" -ge 2 ]; then
	client_cpus=1
	[ "$cpus" -gt 2 ] && client_cpus="1-$((cpus - 1))"
	lab_flags="-engine-cpus 0 -napi-cpus $client_cpus"
	echo "layout: verbsd's engine on CPU 0; NAPI threads and perf clients on CPUs $client_cpus"
fi
. scripts/labbench.sh
# The lab's NAPI threads (lab up bound them to the clients' CPUs): the
# kernel's UDP runs with them unbound, as the kernel places them.
napi=()
if [ -n "${client_cpus:-}" ]; then
	for st in /proc/[0-9]*/status; do
		if grep -q '^Name:.napi/' "$st" 2>/dev/null && grep -q "^Cpus_allowed_list:.$client_cpus\$" "$st" 2>/dev/null; then
			p=${st#/proc/} napi+=("${p%/status}")
		fi
	done
fi
napi_cpus() { for p in "${napi[@]}"; do taskset -pc "$1" "$p" >/dev/null; done; }
echo "the lab's NAPI threads: ${napi[*]:-none bound}"
rounds=${FASTPATH_ROUNDS:-1}
field() { sed "s/.*\"$1\":\([0-9.]*\).*/\1/"; }
udpgbps() { grep -o '[0-9.]* Gb/s' | cut -d' ' -f1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a/b }'; }
f3() { awk -v a="$1" 'BEGIN { printf "%.3f", a }'; }
median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
all_rate="" all_deep="" all_64k="" all_g64="" all_g1k=""
for r in $(seq "$rounds"); do
	declare -A rate deep gb1k gb64k gb64
	for path in tap xdp; do
		out=$(perf write_bw --path "$path" -s 64 -n 200000 --report_gbits)
		rate[$path]=$(field msg_rate_mpps <<<"$out") gb64[$path]=$(field bw_avg_gbps <<<"$out")
		# perftest's window (-t 128, a completion every 100) leaves 28
		# messages in flight while a completion makes its way back: on
		# two cores shared by the engine, the client and the veths'
		# NAPI threads that is less than the fast path's loaded round
		# trip. A deeper window measures the rate itself, on both paths.
		deep[$path]=$(perf write_bw --path "$path" -s 64 -n 400000 -t 1024 --report_gbits | field msg_rate_mpps)
		gb1k[$path]=$(perf write_bw --path "$path" -s 1024 -n 100000 --report_gbits | field bw_avg_gbps)
		gb64k[$path]=$(perf write_bw --path "$path" -s 65536 -n 5000 --report_gbits | field bw_avg_gbps)
	done
	napi_cpus "0-$(($(nproc) - 1))"
	u64=$(udp udp_bw -b 64 -s 64 -n 1000000 | grep arrived | udpgbps)
	u1k=$(udp udp_bw -b 64 -s 1024 -n 500000 | grep arrived | udpgbps)
	if [ -n "${client_cpus:-}" ]; then napi_cpus "$client_cpus"; fi
	r1=$(ratio "${rate[xdp]}" "${rate[tap]}") r2=$(ratio "${deep[xdp]}" "${deep[tap]}") r3=$(ratio "${gb64k[xdp]}" "${gb64k[tap]}")
	r4=$(ratio "${gb64[xdp]}" "$u64") r5=$(ratio "${gb1k[xdp]}" "$u1k")
	all_rate+=" $r1" all_deep+=" $r2" all_64k+=" $r3" all_g64+=" $r4" all_g1k+=" $r5"
	echo "round $r: 64 B RC WRITE rate xdp $(f3 "${rate[xdp]}") / tap $(f3 "${rate[tap]}") Mpps = ${r1}x;" \
		"with -t 1024 xdp $(f3 "${deep[xdp]}") / tap $(f3 "${deep[tap]}") = ${r2}x"
	echo "round $r: 64 KiB write_bw xdp $(f3 "${gb64k[xdp]}") / tap $(f3 "${gb64k[tap]}") Gb/s = ${r3}x"
	echo "round $r: fast-path goodput / kernel UDP (sendmmsg/recvmmsg x64): 64 B $(f3 "${gb64[xdp]}") / $u64 Gb/s = $r4;" \
		"1024 B $(f3 "${gb1k[xdp]}") / $u1k Gb/s = $r5"
done
echo "medians of $rounds rounds: rate xdp/tap $(median <<<"${all_rate# }")x (-t 1024: $(median <<<"${all_deep# }")x);" \
	"64 KiB $(median <<<"${all_64k# }")x; goodput / UDP 64 B $(median <<<"${all_g64# }"), 1024 B $(median <<<"${all_g1k# }")"
# The kernel's UDP once more with no XDP program on the veths (the same
# lab with TAP-only nodes): what the steering program costs it.
"$softib" lab down "$lab"
lab=$bin/plain.lab
sed 's/ path=xdp//' scripts/fastpath.lab >"$lab"
"$softib" lab up "$lab" >/dev/null
echo "== kernel UDP, no XDP program on the veths =="
udp udp_bw -b 64 -s 64 -n 1000000 | grep arrived
udp udp_bw -b 64 -s 1024 -n 500000 | grep arrived
