# Sourced by the lab benchmarks (fastpath.sh, tapbench.sh), from the
# repository's root, with lab (the lab file), name (its lab name) and
# host (node a's kernel address) set. Builds verbsd and softib, brings
# the lab up, takes it down on exit however the script ends, and runs
# server/client pairs: the server in node a, the client in node b.
[ "$(id -u)" -eq 0 ] || { echo "$0 needs root (network namespaces, XDP)" >&2; exit 1; }
bin=$(mktemp -d)
go build -o "$bin/" ./cmd/verbsd ./cmd/softib
softib=$bin/softib
cleanup() {
	"$softib" lab down "$lab" || true
	rm -rf "$bin"
}
trap cleanup EXIT
# lab_flags (lab up's) and client_cpus (taskset -c's list for the perf
# clients) may place the work on the host's CPUs.
"$softib" lab up ${lab_flags:-} "$lab" >/dev/null
sock=/run/softib/$name.sock
pin=()
[ -n "${client_cpus:-}" ] && pin=(taskset -c "$client_cpus")

# perf TEST ARGS...: softib perf through the lab's verbsd; the client's
# JSON line.
perf() {
	ip netns exec "$name-a" "${pin[@]}" "$softib" -socket "$sock" perf "$@" -d vhca-a -x 1 >/dev/null &
	local srv=$!
	sleep 0.5
	ip netns exec "$name-b" "${pin[@]}" "$softib" -socket "$sock" perf "$@" -d vhca-b -x 1 --json "$host"
	wait "$srv"
}

# udp TEST ARGS...: the kernel's UDP between the nodes' own addresses
# (softib perf udp_bw or udp_lat); the server's report, then the
# client's. udp_rx_cpu and udp_tx_cpu may place the server and the
# client.
udp() {
	ip netns exec "$name-a" ${udp_rx_cpu:+taskset -c "$udp_rx_cpu"} "$softib" perf "$@" >"$bin/udp" &
	local srv=$!
	sleep 0.3
	ip netns exec "$name-b" ${udp_tx_cpu:+taskset -c "$udp_tx_cpu"} "$softib" perf "$@" "$host" >"$bin/udpc"
	wait "$srv"
	cat "$bin/udp" "$bin/udpc"
}
