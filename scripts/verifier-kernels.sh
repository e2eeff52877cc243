#!/usr/bin/env bash
# Boots an older kernel under qemu and loads + attaches the XDP steering
# program there: the proof that it "passes the verifier on the oldest
# kernel the README names" (Debian 12's 6.1 LTS).
#
#   scripts/verifier-kernels.sh [PACKAGE|FILE.deb ...]    (root)
#
# With no argument the kernel is Debian bookworm's: the package
# linux-image-amd64 depends on, if that is a 6.1.0-*-amd64, else the
# newest linux-image-6.1.0-*-amd64 apt knows. Where the configured apt
# sources have no 6.1 kernel (a trixie machine), bookworm's are used
# through a temporary sources list and state directory: nothing is added
# to the machine's apt configuration.
#
# For each kernel: the package is fetched with apt-get download into
# ${XDG_CACHE_HOME:-/var/cache}/softib/kernels, its vmlinuz and the
# modules the checks need (veth, from the package) are extracted; an
# initramfs is packed with scripts/verifier-init as /init, the test
# binaries of ./ebpf and ./ebpf/xsk (go test -c, static) and the tools
# they run (ip, ping, sh, with their libraries); qemu boots it with KVM
# where /dev/kvm is there and the kernel reaches the init with it within
# VERIFIER_PROGRESS seconds (30), else with TCG (nested KVM can hang an
# early boot). The serial log is kept beside the package
# (<package>.log). The kernel passes if the log has the lines
# "VERIFIER OK kernel=..." and "ATTACH generic OK"; every step's line is
# printed, and failures beyond those two are pointed out.
#
# Environment: VERIFIER_TIMEOUT (seconds per boot; 300 with KVM, 1200
# without), VERIFIER_ACCEL ("kvm", "tcg" or "kvm tcg": what to try),
# VERIFIER_MODULES (modules to load; "veth"; their dependencies come
# along), VERIFIER_TESTS (packages whose tests run inside; "./ebpf
# ./ebpf/xsk", "" for none), VERIFIER_MIRROR (for the temporary bookworm
# sources; http://deb.debian.org), GO.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
	echo "$0: run as root (it installs qemu, and the VM's init needs a device node)" >&2
	exit 1
fi
cd "$(dirname "$0")/.."
GO=${GO:-go}
MODULES=${VERIFIER_MODULES-veth}
TESTS=${VERIFIER_TESTS-./ebpf ./ebpf/xsk}
MIRROR=${VERIFIER_MIRROR:-http://deb.debian.org}
CACHE=${XDG_CACHE_HOME:-/var/cache}/softib/kernels
mkdir -p "$CACHE"
tmp=$(mktemp -d /tmp/softib-verifier.XXXXXX)
qpid= # the running qemu's timeout(1): stopped if the script ends first
trap '[ -z "$qpid" ] || kill "$qpid" 2>/dev/null; rm -rf "$tmp"' EXIT
start=$SECONDS

# --- what the script needs -------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v gzip >/dev/null 2>&1 || need+=(gzip)
if [ ${#need[@]} -gt 0 ]; then
	echo "verifier-kernels: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# --- which kernel ------------------------------------------------------------
apt_opts=() # empty: the machine's sources; else a temporary bookworm
updated=

# bookworm_apt sets apt_opts to a temporary sources list and state of its
# own, holding bookworm and bookworm-security, and reads their lists.
bookworm_apt() {
	local d=$tmp/apt
	mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/etc/preferences.d"
	local key=/usr/share/keyrings/debian-archive-keyring.gpg
	cat >"$d/sources.list" <<EOF
deb [signed-by=$key] $MIRROR/debian bookworm main
deb [signed-by=$key] $MIRROR/debian-security bookworm-security main
EOF
	apt_opts=(-o "Dir::Etc::SourceList=$d/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
		-o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$d/etc/preferences.d"
		-o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o "Dir::State::status=/dev/null")
	echo "verifier-kernels: no 6.1 kernel in the configured apt sources; using bookworm's from $MIRROR through a temporary sources list ($d)"
	apt-get "${apt_opts[@]}" update -q >"$tmp/apt-update.log" 2>&1 || {
		cat "$tmp/apt-update.log" >&2
		return 1
	}
}

# pick6_1 prints the 6.1 kernel package the current apt_opts offer.
pick6_1() {
	local dep
	dep=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-6\.1\.0-[0-9]*-amd64\)$/\1/p' | head -n1)
	if [ -n "$dep" ]; then
		echo "$dep"
		return
	fi
	apt-cache "${apt_opts[@]}" search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
		awk '{print $1}' | sort -V | tail -n1
}

# default_kernel sets kernel to the package to boot when none is named.
default_kernel() {
	local p
	p=$(pick6_1)
	if [ -z "$p" ] && [ -z "$updated" ]; then
		apt-get update -q >/dev/null 2>&1 || true
		updated=1
		p=$(pick6_1)
	fi
	if [ -z "$p" ] || [ -n "${VERIFIER_APT_TMP:-}" ]; then
		echo "verifier-kernels: the newest kernels in the configured sources: $(apt-cache search --names-only '^linux-image-[0-9].*-amd64$' 2>/dev/null |
			awk '{print $1}' | grep -Ev -- '-(cloud|rt)-amd64$' | sort -V | tail -n 4 | tr '\n' ' ')" >&2
		bookworm_apt || exit 1
		p=$(pick6_1)
	fi
	if [ -z "$p" ]; then
		echo "verifier-kernels: no linux-image-6.1.0-*-amd64 reachable, even from $MIRROR's bookworm" >&2
		exit 1
	fi
	kernel=$p
}

# fetch PACKAGE prints the path of its .deb in the cache, downloading it
# if it is not there.
fetch() {
	local pkg=$1 deb
	deb=$(ls "$CACHE/${pkg}"_*.deb 2>/dev/null | sort -V | tail -n1 || true)
	if [ -z "$deb" ]; then
		(cd "$CACHE" && apt-get "${apt_opts[@]}" -o APT::Sandbox::User=root download -q "$pkg" >&2) || return 1
		deb=$(ls "$CACHE/${pkg}"_*.deb | sort -V | tail -n1) || return 1
	fi
	echo "$deb"
}

if [ $# -eq 0 ]; then
	default_kernel
	set -- "$kernel"
fi

# --- the initramfs's common part: init, tests, tools -------------------------
root=$tmp/root
mkdir -p "$root"/{dev,proc,sys,run,tmp,modules,tests,usr/bin,usr/sbin,usr/lib,usr/lib64,var}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
ln -s ../run "$root/var/run"
mknod -m 600 "$root/dev/console" c 5 1
echo "verifier-kernels: building the init and the test binaries"
CGO_ENABLED=0 "$GO" build -trimpath -o "$root/init" ./scripts/verifier-init
if [ -n "$TESTS" ]; then
	tools=()
	for t in ip ping sh; do
		p=$(command -v "$t" || true)
		[ -n "$p" ] && tools+=("$p") || echo "verifier-kernels: no $t here (scripts/deps.sh installs it): the tests will fail where they run it"
	done
	for p in "${tools[@]}"; do
		install -D -m 755 "$(readlink -f "$p")" "$root$p"
		for lib in $(ldd "$p" 2>/dev/null | grep -o '/[^ ]*' || true); do
			[ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"; }
		done
	done
	for pkg in $TESTS; do
		CGO_ENABLED=0 "$GO" test -c -o "$root/tests/$(basename "$pkg").test" "$pkg"
	done
fi

. scripts/initramfs-modules.sh # modules DIR NAME...

# --- each kernel -------------------------------------------------------------
# KVM where /dev/kvm is there, unless it makes no progress (nested
# virtualisation can hang an early boot): then TCG, slower but sure.
accels=(${VERIFIER_ACCEL:-$([ -w /dev/kvm ] && echo kvm) tcg})
PROGRESS=${VERIFIER_PROGRESS:-30} # seconds for KVM to reach the init

# boot ACCEL LOG boots the kernel and initramfs in $tmp, the serial
# console in LOG, and returns qemu's status (124: timed out; 125: KVM
# made no progress and was stopped).
boot() {
	local accel=$1 log=$2 limit pid waited=0 rc=0 opts
	case $accel in
	kvm) opts=(-enable-kvm -smp 2) limit=${VERIFIER_TIMEOUT:-300} ;;
	*) opts=(-accel tcg -smp 2) limit=${VERIFIER_TIMEOUT:-1200} ;;
	esac
	echo "verifier-kernels: booting $rel with $accel (at most ${limit}s; serial log: $log)"
	: >"$log"
	timeout -k 10 "$limit" qemu-system-x86_64 "${opts[@]}" -m 1024 -no-reboot \
		-kernel "$tmp/vmlinuz" -initrd "$tmp/initrd.gz" \
		-append "console=ttyS0 panic=-1 quiet" \
		-display none -monitor none -nic none -serial "file:$log" </dev/null &
	pid=$! qpid=$!
	if [ "$accel" = kvm ] && [ ${#accels[@]} -gt 1 ]; then
		while kill -0 "$pid" 2>/dev/null && ! grep -q '^KERNEL ' "$log" && [ $waited -lt "$PROGRESS" ]; do
			sleep 1
			waited=$((waited + 1))
		done
		if ! grep -q '^KERNEL ' "$log" && kill -0 "$pid" 2>/dev/null; then
			kill "$pid"
			wait "$pid" || true
			qpid=
			echo "verifier-kernels: KVM did not reach the init in ${PROGRESS}s (nested virtualisation?): stopped it"
			return 125
		fi
	fi
	wait "$pid" || rc=$?
	qpid=
	sed -i 's/\r$//' "$log"
	[ $rc -ne 124 ] || echo "verifier-kernels: $rel: the VM did not stop within ${limit}s"
	return $rc
}

failed=0
for k in "$@"; do
	t0=$SECONDS
	case $k in
	*.deb) deb=$(readlink -f "$k") ;;
	*) deb=$(fetch "$k") || {
		echo "verifier-kernels: $k: cannot download it"
		failed=1
		continue
	} ;;
	esac
	pkg=$(dpkg-deb -f "$deb" Package)
	echo "verifier-kernels: $pkg $(dpkg-deb -f "$deb" Version) ($deb)"
	x=$tmp/x
	rm -rf "$x" "$root/modules"/* && mkdir -p "$x"
	packed=()
	dpkg-deb -x "$deb" "$x"
	vmlinuz=$(ls "$x"/boot/vmlinuz-* | head -n1)
	rel=${vmlinuz##*/vmlinuz-}
	[ -n "$MODULES" ] && modules "$x/lib/modules/$rel" $MODULES
	cp "$vmlinuz" "$tmp/vmlinuz"
	rm -rf "$x"
	(cd "$root" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -1 >"$tmp/initrd.gz"

	log=$CACHE/$pkg.log
	for a in "${accels[@]}"; do
		rc=0
		boot "$a" "$log" || rc=$?
		[ $rc -eq 125 ] || break
	done
	grep -E '^(KERNEL|MOUNT|MODULE|LOAD|VERIFIER|ATTACH|OWN|XSK|SETSOCKET|STEER|COUNTERS|CLOSE|VETH|GOTEST|INIT|--- FAIL)' "$log" | sed 's/^/    /' || true
	if grep -q '^VERIFIER OK kernel=' "$log" && grep -q '^ATTACH generic OK' "$log"; then
		echo "verifier-kernels: $rel: PASS ($((SECONDS - t0))s)"
	else
		failed=1
		echo "verifier-kernels: $rel: FAIL ($((SECONDS - t0))s); the log's end:"
		tail -n 60 "$log" | sed 's/^/    /'
	fi
	if grep -qE '^(GOTEST .* FAIL|STEER .* FAIL|ATTACH native veth FAIL|XSK FAIL)' "$log"; then
		echo "verifier-kernels: $rel: some checks beyond the verifier failed (above; $log)"
	fi
done
echo "verifier-kernels: done in $((SECONDS - start))s"
exit $failed
