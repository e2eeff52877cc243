#!/usr/bin/env bash
# The issue-5 figures in one run, on make demo's lab (scripts/demo.lab:
# two namespaces on one bridge, MTU 9000, the TAP path), ROUNDS times:
# softib RC write_bw at 64 KiB beside the kernel's UDP blaster (8972-byte
# datagrams, one a system call, and batched ×64 for reference), and
# softib send_lat at 8 bytes beside the kernel's UDP ping-pong at 8
# bytes (half a round trip), sleeping in recv as usual and busy polling
# as send_lat does (on this VM a thread that slept takes tens of
# microseconds to wake when the cores go idle). send_lat moves between
# runs with where the scheduler puts its three busy threads (two
# clients and verbsd's engine on two cores): about 9.5 us when the
# engine has a core to itself, 13-20 us when it shares one with a
# client; the last line gives the medians of the rounds. Root only.
# Usage: ROUNDS=N scripts/tapbench.sh (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
lab=scripts/demo.lab name=demo host=10.11.0.101
. scripts/labbench.sh
field() { sed "s/.*\"$1\":\([0-9.]*\).*/\1/"; }
median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
all_bw="" all_lat="" all_busy=""
for r in $(seq "${ROUNDS:-3}"); do
	bw=$(perf write_bw -s 65536 -n 20000 --report_gbits | field bw_avg_gbps)
	u1=$(udp udp_bw -s 8972 -n 200000 -b 1 | grep -o 'arrived.* [0-9.]* Gb/s' | grep -o '[0-9.]* Gb/s' | cut -d' ' -f1)
	u64=$(udp udp_bw -s 8972 -n 200000 -b 64 | grep -o 'arrived.* [0-9.]* Gb/s' | grep -o '[0-9.]* Gb/s' | cut -d' ' -f1)
	lat=$(perf send_lat -s 8 -n 20000 | field t_typical_us)
	ul=$(udp udp_lat -s 8 -n 20000 | grep typical | sed "s/.*typical \([0-9.]*\) us.*/\1/")
	ub=$(udp udp_lat -busy -s 8 -n 20000 | grep typical | sed "s/.*typical \([0-9.]*\) us.*/\1/")
	echo "round $r: write_bw 64 KiB $bw Gb/s; UDP blaster 8972 B $u1 Gb/s (x64: $u64)" \
		"-> $(awk -v a="$bw" -v b="$u1" 'BEGIN { printf "%.2f", a/b }') ($(awk -v a="$bw" -v b="$u64" 'BEGIN { printf "%.2f", a/b }'))"
	echo "round $r: send_lat 8 B t_typical $lat us; UDP ping-pong half round trip typical $ul us -> $(awk -v a="$lat" -v b="$ul" 'BEGIN { printf "%.2f", a/b }');" \
		"busy-polling UDP ping-pong $ub us -> $(awk -v a="$lat" -v b="$ub" 'BEGIN { printf "%.2f", a/b }')"
	all_bw+=" $(awk -v a="$bw" -v b="$u1" 'BEGIN { printf "%.2f", a/b }')"
	all_lat+=" $(awk -v a="$lat" -v b="$ul" 'BEGIN { printf "%.2f", a/b }')"
	all_busy+=" $(awk -v a="$lat" -v b="$ub" 'BEGIN { printf "%.2f", a/b }')"
done
echo "medians of ${ROUNDS:-3} rounds: goodput / UDP blaster $(median <<<"${all_bw# }");" \
	"send_lat / UDP ping-pong $(median <<<"${all_lat# }"), / busy-polling UDP ping-pong $(median <<<"${all_busy# }")"
