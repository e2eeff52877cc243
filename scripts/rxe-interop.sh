#!/usr/bin/env bash
# Proves interoperability between softib and the kernel's Soft-RoCE
# (rdma_rxe) with Debian's unmodified rdma-core tools and perftest:
#
#   scripts/rxe-interop.sh        (root)
#
# This machine's kernel may have no RDMA stack, so rxe runs in a VM:
# Debian 12's 6.1 kernel (the newest linux-image-6.1.0-*-amd64 .deb in
# /var/cache/softib/kernels, where scripts/verifier-kernels.sh keeps it;
# else the one linux-image-amd64 depends on, downloaded there) boots under qemu with an initramfs holding
# ib_core, ib_uverbs, rdma_rxe and their dependencies, rdma-core's and
# perftest's programs with their libraries (apt-get download, cached in
# /var/cache/softib/rxe-userspace) and scripts/rxe-interop-init as
# /init. The init gives eth0 10.99.0.2/24 (MTU 1500), runs `rdma link
# add rxe0 type rxe netdev eth0` and then runs the commands this script
# sends to its TCP port 7000.
#
# Everything on the host side lives in one network namespace the script
# makes (rxeinterop): a bridge br0 with the kernel address 10.99.0.101/24
# (for the TCP setup exchanges), qemu's TAP and the TAP of verbsd's
# vHCA vhca0 (10.99.0.1: the vHCA's own address, behind its TAP). qemu
# runs inside the namespace; verbsd puts its TAP there (netns=). The
# machine's own interfaces are never touched. On exit, whatever
# happened, qemu, verbsd and the capture are stopped and the namespace
# deleted.
#
# The tests, each with one server and one client, softib on one side
# and rxe on the other (NAME: rxe serves; NAME_rev: softib serves):
# ibv_rc_pingpong, ib_write_bw, ib_send_lat, ib_read_bw, ib_send_bw,
# ib_atomic_bw, ib_write_lat, ib_read_lat, ibv_uc_pingpong and
# ibv_ud_pingpong, each both ways, and 64-byte ib_write_bw and
# ib_read_bw from rxe (perftest's address walk through a page). br0 is
# captured by dumpcap and the capture is checked by
# ../shared/tools/check_pcap.py (every RoCE packet's ICRC, both sides').
# Each test prints PASS or FAIL with both sides' output; the script
# exits non-zero if one failed.
#
# Environment: RXE_INTEROP_DIR (logs, capture; /tmp/softib-rxe-interop),
# RXE_INTEROP_TESTS (the tests to run, by name; all), RXE_INTEROP_TIMEOUT
# (seconds per test side; 120), RXE_INTEROP_SMP (the VM's CPUs; 2), GO.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
	echo "$0: run as root (network namespaces, TAPs, qemu)" >&2
	exit 1
fi
cd "$(dirname "$0")/.."
start=$SECONDS
GO=${GO:-go}
NS=rxeinterop
VMIP=10.99.0.2
HOSTIP=10.99.0.101 # the namespace kernel's address, for TCP exchanges
VHCAIP=10.99.0.1   # the vHCA's address (its GID), behind its TAP
CTL=7000           # the VM init's control port
TMO=${RXE_INTEROP_TIMEOUT:-120}
SMP=${RXE_INTEROP_SMP:-2}
OUT=${RXE_INTEROP_DIR:-/tmp/softib-rxe-interop}
KCACHE=${XDG_CACHE_HOME:-/var/cache}/softib/kernels
UCACHE=${XDG_CACHE_HOME:-/var/cache}/softib/rxe-userspace
CHECKER=../shared/tools/check_pcap.py
mkdir -p "$OUT" "$KCACHE" "$UCACHE"
tmp=$(mktemp -d /tmp/softib-rxe-interop.XXXXXX)
SOCK=$tmp/verbsd.sock
say() { echo "rxe-interop: $*"; }

# --- clean-up: only what this script started --------------------------------
qpid= vpid= cpid= ns_made=
bg=() # background test sides
cleanup() {
	local rc=$?
	set +e
	for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done
	[ -n "$qpid" ] && kill "$qpid" 2>/dev/null && wait "$qpid" 2>/dev/null
	[ -n "$cpid" ] && kill -INT "$cpid" 2>/dev/null && wait "$cpid" 2>/dev/null
	[ -n "$vpid" ] && kill "$vpid" 2>/dev/null && wait "$vpid" 2>/dev/null
	[ -n "$ns_made" ] && ip netns del "$NS" 2>/dev/null
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- what the script needs -------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v dumpcap >/dev/null 2>&1 || need+=(wireshark-common)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
if [ ${#need[@]} -gt 0 ]; then
	say "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# fetch DIR PACKAGE prints the path of PACKAGE's .deb in DIR, downloading
# it there if it is not.
fetch() {
	local dir=$1 pkg=$2 deb
	deb=$(ls "$dir/${pkg}"_*.deb 2>/dev/null | sort -V | tail -n1 || true)
	if [ -z "$deb" ]; then
		(cd "$dir" && apt-get -o APT::Sandbox::User=root download -q "$pkg" >&2) || return 1
		deb=$(ls "$dir/${pkg}"_*.deb | sort -V | tail -n1) || return 1
	fi
	echo "$deb"
}

# --- the kernel: bookworm's 6.1 ----------------------------------------------
kdeb=$(ls "$KCACHE"/linux-image-6.1.0-*-amd64_*.deb 2>/dev/null | sort -V | tail -n1 || true)
if [ -z "$kdeb" ]; then
	kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-6\.1\.0-[0-9]*-amd64\)$/\1/p' | head -n1)
	[ -n "$kpkg" ] || kpkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
		awk '{print $1}' | sort -V | tail -n1)
	if [ -z "$kpkg" ]; then
		say "no linux-image-6.1.0-*-amd64 in the apt sources (scripts/verifier-kernels.sh can fetch bookworm's into $KCACHE)" >&2
		exit 1
	fi
	kdeb=$(fetch "$KCACHE" "$kpkg")
fi
say "kernel: $kdeb"

# --- the initramfs -----------------------------------------------------------
root=$tmp/root x=$tmp/x
mkdir -p "$root"/{dev,proc,sys,run,tmp,modules,etc/libibverbs.d,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,lib64} "$x"
for d in bin sbin lib; do ln -s "usr/$d" "$root/$d"; done
mknod -m 600 "$root/dev/console" c 5 1
say "building the VM's init, verbsd and softib"
CGO_ENABLED=0 "$GO" build -trimpath -o "$root/init" ./scripts/rxe-interop-init
"$GO" build -o "$tmp/bin/" ./cmd/verbsd ./cmd/softib
softib=$tmp/bin/softib

# Userspace: Debian's rdma-core 44 and perftest, unmodified.
upkgs=(libibverbs1 ibverbs-providers ibverbs-utils perftest librdmacm1 libibumad3 libnl-3-200 libnl-route-3-200 libpci3 iproute2)
for p in "${upkgs[@]}"; do
	deb=$(fetch "$UCACHE" "$p") || { say "cannot download $p" >&2; exit 1; }
	dpkg-deb -x "$deb" "$x/u"
done
say "userspace: $(for p in "${upkgs[@]}"; do printf '%s ' "$p=$(dpkg-deb -f "$(fetch "$UCACHE" "$p")" Version)"; done)"
ulib=$x/u/usr/lib/x86_64-linux-gnu:$x/u/lib/x86_64-linux-gnu
# pack FILE DEST: FILE at DEST in the initramfs, with the libraries it
# needs (those of the extracted packages first, else the machine's),
# all in /usr/lib/x86_64-linux-gnu, the loader in /lib64.
pack() {
	local f=$1 dest=$2 lib libs
	install -D -m 755 "$f" "$root$dest"
	libs=$(LD_LIBRARY_PATH=$ulib ldd "$f")
	if grep -q 'not found' <<<"$libs"; then
		say "$f needs a library no package here has:" >&2
		grep 'not found' <<<"$libs" >&2
		exit 1
	fi
	for lib in $(grep -o '/[^ ]*' <<<"$libs" || true); do
		case $lib in
		*/ld-linux*) [ -e "$root/lib64/${lib##*/}" ] || cp -L "$lib" "$root/lib64/" ;;
		*) [ -e "$root/usr/lib/x86_64-linux-gnu/${lib##*/}" ] || cp -L "$lib" "$root/usr/lib/x86_64-linux-gnu/" ;;
		esac
	done
}
for b in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_uc_pingpong ib_write_bw ib_send_lat ib_send_bw ib_read_bw ib_atomic_bw ib_write_lat ib_read_lat rdma; do
	pack "$x/u/usr/bin/$b" "/usr/bin/$b"
done
pack "$x/u/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so" /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
cp "$x/u/etc/libibverbs.d/rxe.driver" "$root/etc/libibverbs.d/"
for t in ip sh cat; do
	p=$(command -v "$t") && pack "$(readlink -f "$p")" "/usr/bin/$t"
done

. scripts/initramfs-modules.sh # modules DIR NAME...
dpkg-deb -x "$kdeb" "$x/k"
vmlinuz=$(ls "$x"/k/boot/vmlinuz-* | head -n1)
rel=${vmlinuz##*/vmlinuz-}
# crc32_generic: rxe asks the crypto API for "crc32", which has no
# modprobe to load it here.
modules "$x/k/lib/modules/$rel" virtio_pci virtio_net crc32_generic ib_core ib_uverbs rdma_rxe
cp "$vmlinuz" "$tmp/vmlinuz"
rm -rf "$x"
(cd "$root" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -1 >"$tmp/initrd.gz"
say "initramfs: $(du -h "$tmp/initrd.gz" | cut -f1), modules: $(tr '\n' ' ' <"$root/modules/order")"

# --- the namespace: br0, qemu's TAP, the vHCA's TAP ---------------------------
if ip netns list | grep -qw "^$NS"; then
	if [ -n "$(ip netns pids "$NS" 2>/dev/null)" ]; then
		say "namespace $NS exists with processes in it (another run?): not touching it" >&2
		exit 1
	fi
	ip netns del "$NS"
fi
ip netns add "$NS"
ns_made=1
rm -f "$OUT"/*.host "$OUT"/*.vm "$OUT"/serial.log "$OUT"/rxe.pcap "$OUT"/verbsd.log
nsx() { ip netns exec "$NS" "$@"; }
nsx ip link set lo up
nsx ip link add br0 type bridge
nsx ip link set br0 type bridge forward_delay 0 stp_state 0
nsx ip link set br0 mtu 1500
nsx ip addr add "$HOSTIP/24" dev br0
nsx ip tuntap add dev qtap0 mode tap
nsx ip link set qtap0 mtu 1500 master br0 up
nsx ip link set br0 up

"$tmp/bin/verbsd" -socket "$SOCK" -device "vhca0,tap,addr=$VHCAIP,mtu=1500,netns=/var/run/netns/$NS" >"$OUT/verbsd.log" 2>&1 &
vpid=$!
for _ in $(seq 100); do
	nsx ip link show vhca0 >/dev/null 2>&1 && [ -S "$SOCK" ] && break
	kill -0 "$vpid" 2>/dev/null || { say "verbsd ended:"; cat "$OUT/verbsd.log"; exit 1; }
	sleep 0.1
done
nsx ip link set vhca0 master br0
nsx ip link set vhca0 up
hsb() { nsx "$softib" -socket "$SOCK" "$@"; } # softib in the namespace
hsb gids vhca0 | sed 's/^/    /'
HG=$(hsb gids vhca0 | awk -v a="$VHCAIP" '$5 == a && $6 == "v2" {print $3; exit}')
[ -n "$HG" ] || { say "vhca0 has no RoCEv2 GID for $VHCAIP"; exit 1; }
say "vhca0: GID index $HG (::ffff:$VHCAIP)"

pcap=$OUT/rxe.pcap
# (Background processes are started as simple commands, not through a
# function, so that $! is the process itself, not a subshell.)
ip netns exec "$NS" dumpcap -q -P -i br0 -w "$pcap" 2>"$tmp/dumpcap.err" &
cpid=$!
for _ in $(seq 50); do [ -s "$pcap" ] && break; sleep 0.1; done

# --- the VM ------------------------------------------------------------------
log=$OUT/serial.log
: >"$log"
vmlimit=${RXE_INTEROP_VM_LIMIT:-1500} # seconds: the VM powers itself off then, whatever happens
say "booting $rel under qemu (TCG, $SMP CPUs; serial log: $log)"
ip netns exec "$NS" timeout -k 10 "$vmlimit" qemu-system-x86_64 -accel tcg -smp "$SMP" -m 1024 -no-reboot \
	-kernel "$tmp/vmlinuz" -initrd "$tmp/initrd.gz" \
	-append "console=ttyS0 panic=-1 quiet rxeinterop.addr=$VMIP/24 rxeinterop.mtu=1500 rxeinterop.port=$CTL rxeinterop.limit=$vmlimit" \
	-display none -monitor none -serial "file:$log" \
	-netdev tap,id=n0,ifname=qtap0,script=no,downscript=no \
	-device virtio-net-pci,netdev=n0,mac=52:54:00:99:00:02 </dev/null >"$tmp/qemu.out" 2>&1 &
qpid=$!
t0=$SECONDS
until grep -q '^INIT READY' "$log" 2>/dev/null; do
	if ! kill -0 "$qpid" 2>/dev/null || grep -qE '^(NET|RXE|INIT) FAIL|Kernel panic' "$log" || [ $((SECONDS - t0)) -gt 600 ]; then
		say "the VM did not get ready:"
		cat "$tmp/qemu.out"
		sed 's/\r$//' "$log" | tail -n 80 | sed 's/^/    /'
		exit 1
	fi
	sleep 1
done
say "VM ready in $((SECONDS - t0))s:"
sed 's/\r$//' "$log" | grep -E '^(KERNEL|MODULE|NET|GID|\[rdma\]|\[ibv_devices\])' | sed 's/^/    /'
sed 's/\r$//' "$log" | grep -E '^\[ibv_devinfo\]' | grep -E 'hca_id|transport|fw_ver|node_guid|phys_port_cnt|state:|max_mtu|active_mtu|link_layer|GID\[' | sed 's/^/    /'
G=$(sed 's/\r$//' "$log" | sed -n 's/^GID INDEX \([0-9]*\) .*/\1/p' | head -n1)
say "rxe0: GID index $G (::ffff:$VMIP)"

# vm TAG TIMEOUT WAITPORT ARGV...: runs ARGV in the VM, its output
# (then "EXIT rc=N") on standard output.
vmsh='exec 3<>"/dev/tcp/$1/$2" || exit 1; shift 2; echo "$*" >&3; cat <&3'
vm() {
	ip netns exec "$NS" timeout -k 5 $(($2 + 30)) bash -c "$vmsh" _ "$VMIP" "$CTL" "$@"
}

# --- the tests ---------------------------------------------------------------
results=()
failed=0
# show NAME: both sides' output, indented.
show() {
	echo "  -- rxe (VM): ${vmcmd[*]}"
	sed 's/^/    /' "$OUT/$1.vm"
	echo "  -- softib (host): softib ${hostcmd[*]}"
	sed 's/^/    /' "$OUT/$1.host"
}
# verdict NAME HOSTRC CHECK...: PASS if the VM side exited 0, the host
# side too and each CHECK (NAME.vm:REGEX or NAME.host:REGEX) matches.
verdict() {
	local name=$1 hrc=$2 ok=1 why=() c f re
	shift 2
	grep -q '^EXIT rc=0$' "$OUT/$name.vm" || { ok=0; why+=("rxe side: $(grep '^EXIT' "$OUT/$name.vm" || echo 'no exit status')"); }
	[ "$hrc" -eq 0 ] || { ok=0; why+=("softib side: exit status $hrc"); }
	for c in "$@"; do
		f=${c%%:*} re=${c#*:}
		grep -Eq -- "$re" "$OUT/$name.$f" || { ok=0; why+=("no /$re/ in the $f side's output"); }
	done
	if [ $ok -eq 1 ]; then
		echo "PASS $name"
		results+=("PASS $name")
	else
		echo "FAIL $name: ${why[*]}"
		results+=("FAIL $name")
		failed=1
	fi
}
# vm_server NAME PORT VMARGV... -- HOSTARGV...: the server in the VM,
# the client softib on the host; host_server NAME PORT HOSTARGV... --
# VMARGV...: the server softib on the host, the client in the VM.
vm_server() { pair vm "$@"; }
host_server() { pair host "$@"; }
pair() {
	local kind=$1 name=$2 port=$3 try
	shift 3
	vmcmd=() hostcmd=()
	echo
	if [ "$kind" = vm ]; then
		while [ "$1" != -- ]; do vmcmd+=("$1"); shift; done
		shift
		hostcmd=("$@")
		echo "== $name: server rxe (VM), client softib (host)"
	else
		while [ "$1" != -- ]; do hostcmd+=("$1"); shift; done
		shift
		vmcmd=("$@")
		echo "== $name: server softib (host), client rxe (VM)"
	fi
	for try in 1 2; do
		hrc=0
		if [ "$kind" = vm ]; then vm_first "$name" "$port"; else host_first "$name" "$port"; fi
		# perftest calibrates the CPU clock (get_cpu_mhz) and gives up
		# with "Can't produce a report" when its samples are too noisy
		# (r^2 < 0.9), as they can be under TCG: not an interop matter.
		if [ $try -eq 1 ] && grep -q "Can't produce a report" "$OUT/$name.vm"; then
			echo "  (perftest in the VM could not calibrate its clock under TCG: once more)"
			sleep 1
			continue
		fi
		break
	done
	show "$name"
	verdict "$name" "$hrc" "${checks[@]}"
}
# vm_first and host_first run one attempt; the softib side's status in hrc.
vm_first() {
	local name=$1 port=$2 vp t=$SECONDS
	: >"$OUT/$name.vm"
	ip netns exec "$NS" timeout -k 5 $((TMO + 30)) bash -c "$vmsh" _ "$VMIP" "$CTL" \
		"$name" "$TMO" "$port" "${vmcmd[@]}" >"$OUT/$name.vm" 2>&1 &
	vp=$!
	bg+=("$vp")
	until grep -qE '^(LISTENING|EXIT)' "$OUT/$name.vm"; do
		kill -0 "$vp" 2>/dev/null || break
		[ $((SECONDS - t)) -lt 60 ] || break
		sleep 0.2
	done
	if grep -q '^LISTENING' "$OUT/$name.vm"; then
		timeout -k 5 "$TMO" ip netns exec "$NS" "$softib" -socket "$SOCK" "${hostcmd[@]}" >"$OUT/$name.host" 2>&1 || hrc=$?
	else
		echo "(the server did not listen)" >"$OUT/$name.host"
		hrc=1
	fi
	wait "$vp" || true
	bg=()
}
host_first() {
	local name=$1 port=$2 hp t=$SECONDS
	timeout -k 5 "$TMO" ip netns exec "$NS" "$softib" -socket "$SOCK" "${hostcmd[@]}" >"$OUT/$name.host" 2>&1 &
	hp=$!
	bg+=("$hp")
	until nsx ss -Hltn "sport = :$port" | grep -q .; do
		kill -0 "$hp" 2>/dev/null || break
		[ $((SECONDS - t)) -lt 30 ] || break
		sleep 0.1
	done
	vm "$name" "$TMO" 0 "${vmcmd[@]}" >"$OUT/$name.vm" 2>&1 || true
	wait "$hp" || hrc=$?
	bg=()
}

want() { [ -z "${RXE_INTEROP_TESTS:-}" ] || [[ " $RXE_INTEROP_TESTS " == *" $1 "* ]]; }
pp='[0-9]+ bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec'
it='[0-9]+ iters in [0-9.]+ seconds = [0-9.]+ usec/iter'
P=18515 # the TCP port of rdma-core's pingpongs and of perftest

checks=("vm:$pp" "vm:$it" "host:$pp" "host:$it")
want rc_pingpong && vm_server rc_pingpong $P \
	ibv_rc_pingpong -d rxe0 -g "$G" -n 100 -- \
	pingpong -d vhca0 -g "$HG" -n 100 "$VMIP"
want rc_pingpong_rev && host_server rc_pingpong_rev $P \
	pingpong -d vhca0 -g "$HG" -n 100 -- \
	ibv_rc_pingpong -d rxe0 -g "$G" -n 100 "$HOSTIP"

checks=("host:^ *65536 +200 +[0-9.]+ +[0-9.]+")
want write_bw && vm_server write_bw $P \
	ib_write_bw -d rxe0 -x "$G" -s 65536 -n 200 -- \
	perf write_bw -d vhca0 -x "$HG" -s 65536 -n 200 "$VMIP"
checks=("vm:^ *65536 +200 +[0-9.]+ +[0-9.]+")
want write_bw_rev && host_server write_bw_rev $P \
	perf write_bw -d vhca0 -x "$HG" -s 65536 -n 200 -- \
	ib_write_bw -d rxe0 -x "$G" -s 65536 -n 200 "$HOSTIP"

checks=("vm:^ *2 +200 +[0-9.]+" "host:^ *2 +200 +[0-9.]+")
want send_lat && vm_server send_lat $P \
	ib_send_lat -d rxe0 -x "$G" -n 200 -- \
	perf send_lat -d vhca0 -x "$HG" -n 200 "$VMIP"
want send_lat_rev && host_server send_lat_rev $P \
	perf send_lat -d vhca0 -x "$HG" -n 200 -- \
	ib_send_lat -d rxe0 -x "$G" -n 200 "$HOSTIP"

# More of perftest: RDMA READ (read responses, their AETHs), SEND
# bandwidth, atomics, the other latency tests.
checks=("host:^ *65536 +200 +[0-9.]+ +[0-9.]+")
want read_bw && vm_server read_bw $P \
	ib_read_bw -d rxe0 -x "$G" -s 65536 -n 200 -- \
	perf read_bw -d vhca0 -x "$HG" -s 65536 -n 200 "$VMIP"
checks=("vm:^ *65536 +200 +[0-9.]+ +[0-9.]+")
want read_bw_rev && host_server read_bw_rev $P \
	perf read_bw -d vhca0 -x "$HG" -s 65536 -n 200 -- \
	ib_read_bw -d rxe0 -x "$G" -s 65536 -n 200 "$HOSTIP"
# Small messages: perftest's client then steps its remote address
# through a whole cycle buffer (a page), 64 bytes at a time.
checks=("vm:^ *64 +200 +[0-9.]+ +[0-9.]+")
want write_bw_small_rev && host_server write_bw_small_rev $P \
	perf write_bw -d vhca0 -x "$HG" -s 64 -n 200 -- \
	ib_write_bw -d rxe0 -x "$G" -s 64 -n 200 "$HOSTIP"
want read_bw_small_rev && host_server read_bw_small_rev $P \
	perf read_bw -d vhca0 -x "$HG" -s 64 -n 200 -- \
	ib_read_bw -d rxe0 -x "$G" -s 64 -n 200 "$HOSTIP"
checks=("host:^ *65536 +200 +[0-9.]+ +[0-9.]+")
want send_bw && vm_server send_bw $P \
	ib_send_bw -d rxe0 -x "$G" -s 65536 -n 200 -- \
	perf send_bw -d vhca0 -x "$HG" -s 65536 -n 200 "$VMIP"
checks=("vm:^ *65536 +200 +[0-9.]+ +[0-9.]+")
want send_bw_rev && host_server send_bw_rev $P \
	perf send_bw -d vhca0 -x "$HG" -s 65536 -n 200 -- \
	ib_send_bw -d rxe0 -x "$G" -s 65536 -n 200 "$HOSTIP"
checks=("host:^ *8 +200 +[0-9.]+ +[0-9.]+")
want atomic_bw && vm_server atomic_bw $P \
	ib_atomic_bw -d rxe0 -x "$G" -n 200 -- \
	perf atomic_bw -d vhca0 -x "$HG" -n 200 "$VMIP"
checks=("vm:^ *8 +200 +[0-9.]+ +[0-9.]+")
want atomic_bw_rev && host_server atomic_bw_rev $P \
	perf atomic_bw -d vhca0 -x "$HG" -n 200 -- \
	ib_atomic_bw -d rxe0 -x "$G" -n 200 "$HOSTIP"
checks=("vm:^ *2 +200 +[0-9.]+" "host:^ *2 +200 +[0-9.]+")
want write_lat && vm_server write_lat $P \
	ib_write_lat -d rxe0 -x "$G" -n 200 -- \
	perf write_lat -d vhca0 -x "$HG" -n 200 "$VMIP"
want write_lat_rev && host_server write_lat_rev $P \
	perf write_lat -d vhca0 -x "$HG" -n 200 -- \
	ib_write_lat -d rxe0 -x "$G" -n 200 "$HOSTIP"
checks=("host:^ *2 +200 +[0-9.]+")
want read_lat && vm_server read_lat $P \
	ib_read_lat -d rxe0 -x "$G" -n 200 -- \
	perf read_lat -d vhca0 -x "$HG" -n 200 "$VMIP"
checks=("vm:^ *2 +200 +[0-9.]+")
want read_lat_rev && host_server read_lat_rev $P \
	perf read_lat -d vhca0 -x "$HG" -n 200 -- \
	ib_read_lat -d rxe0 -x "$G" -n 200 "$HOSTIP"

# The other transports of rdma-core's pingpongs.
checks=("vm:$pp" "vm:$it" "host:$pp" "host:$it")
want uc_pingpong && vm_server uc_pingpong $P \
	ibv_uc_pingpong -d rxe0 -g "$G" -n 100 -- \
	pingpong -T uc -d vhca0 -g "$HG" -n 100 "$VMIP"
want uc_pingpong_rev && host_server uc_pingpong_rev $P \
	pingpong -T uc -d vhca0 -g "$HG" -n 100 -- \
	ibv_uc_pingpong -d rxe0 -g "$G" -n 100 "$HOSTIP"
want ud_pingpong && vm_server ud_pingpong $P \
	ibv_ud_pingpong -d rxe0 -g "$G" -s 512 -n 100 -- \
	pingpong -T ud -d vhca0 -g "$HG" -s 512 -n 100 "$VMIP"
want ud_pingpong_rev && host_server ud_pingpong_rev $P \
	pingpong -T ud -d vhca0 -g "$HG" -s 512 -n 100 -- \
	ibv_ud_pingpong -d rxe0 -g "$G" -s 512 -n 100 "$HOSTIP"

# --- the end: the VM's counters, power-off, the capture's check ---------------
echo
vm counters 30 0 sh 'for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "${f##*/} $(cat $f)"; done' >"$OUT/counters.vm" 2>&1 || true
say "rxe0's counters in the VM (non-zero):"
awk '$2 != 0 && $1 != "EXIT"' "$OUT/counters.vm" | sed 's/^/    /'
vm poweroff 10 0 poweroff >/dev/null 2>&1 || true
for _ in $(seq 60); do kill -0 "$qpid" 2>/dev/null || break; sleep 0.5; done
kill "$qpid" 2>/dev/null || true
wait "$qpid" 2>/dev/null || true
qpid=
sed -i 's/\r$//' "$log"
kmsg=$(grep -E '^\[ *[0-9]+\.[0-9]+\] ' "$log" | grep -Ei 'rxe|infiniband|ib_|BUG|WARNING|Oops|Call Trace' | head -n 30 || true)
if [ -n "$kmsg" ]; then
	say "the VM kernel's messages about rxe (or trouble):"
	echo "$kmsg" | sed 's/^/    /'
fi
sleep 0.3
kill -INT "$cpid" 2>/dev/null || true
wait "$cpid" 2>/dev/null || true
cpid=
echo
say "capture of br0: $pcap ($(du -h "$pcap" | cut -f1))"
pc=0
if [ -f "$CHECKER" ]; then
	python3 "$CHECKER" -q --require-roce "$pcap" >"$OUT/check_pcap.txt" 2>&1 || pc=$?
	# Wireshark's heuristic dissectors take some 2-byte payloads (the
	# write_lat messages: 00 NN) for CRTP or an ethertype and call them
	# malformed, rxe's as well as softib's: such a finding alone, with
	# every ICRC right, is Wireshark's, not a wire-format problem.
	flagged=$(grep -c 'tshark=FLAGGED' "$OUT/check_pcap.txt" || true)
	heuristic=
	if [ $pc -eq 1 ] &&
		grep -Eq 'bad ICRC 0, bad VCRC 0, undecodable 0, scapy mismatch 0, tshark-flagged [0-9]+$' "$OUT/check_pcap.txt" &&
		! grep '!!' "$OUT/check_pcap.txt" | grep -Evq 'tshark: (malformed \((crtp|ethertype)\)|expert: Malformed Packet \(Exception occurred\))' &&
		! grep 'tshark=FLAGGED' "$OUT/check_pcap.txt" | grep -Evq ' len=[0-4] '; then
		heuristic="check_pcap: every ICRC right; tshark's heuristics mis-dissect $flagged tiny payloads
    (from rxe: $(grep 'tshark=FLAGGED' "$OUT/check_pcap.txt" | grep -c " $VMIP:[0-9]* > " || true), from softib: $(grep 'tshark=FLAGGED' "$OUT/check_pcap.txt" | grep -c " $VHCAIP:[0-9]* > " || true)): Wireshark's, not a wire-format problem"
	fi
	# Its summary; on real trouble the first packets it points out (all
	# of them in check_pcap.txt).
	if [ $pc -eq 0 ] || [ -n "$heuristic" ]; then
		grep -E '^(==|   (OK|FAIL|opcodes))' "$OUT/check_pcap.txt" | sed 's/^/    /'
		[ -z "$heuristic" ] || say "$heuristic"
	else
		head -n 24 "$OUT/check_pcap.txt" | sed 's/^/    /'
		echo "    ..."
		tail -n 3 "$OUT/check_pcap.txt" | sed 's/^/    /'
	fi
	if [ $pc -eq 0 ]; then
		results+=("PASS capture (check_pcap.py: every RoCE packet's ICRC, tshark agrees)")
	elif [ -n "$heuristic" ]; then
		results+=("PASS capture (check_pcap.py: every RoCE packet's ICRC; $flagged tiny payloads mis-dissected by tshark's heuristics, rxe's too)")
	else
		results+=("FAIL capture (check_pcap.py exit $pc; $OUT/check_pcap.txt)")
		failed=1
	fi
else
	say "no $CHECKER: the capture is not checked"
fi

echo
say "summary (logs and capture in $OUT):"
for r in "${results[@]}"; do echo "    $r"; done
say "done in $((SECONDS - start))s"
exit $failed
