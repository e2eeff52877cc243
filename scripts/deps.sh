#!/usr/bin/env bash
# Installs what the tests need that a fresh Debian/Ubuntu machine lacks.
# Idempotent: it installs only what is missing, and touches apt only then.
set -euo pipefail

need=()
command -v tshark   >/dev/null 2>&1 || need+=(tshark)            # dissects our captures
command -v mergecap >/dev/null 2>&1 || need+=(wireshark-common)  # check_pcap.py batches with it
command -v python3  >/dev/null 2>&1 || need+=(python3)           # runs ../shared/tools/check_pcap.py
command -v dumpcap  >/dev/null 2>&1 || need+=(wireshark-common)  # captures the TAP lab's bridge
command -v ip       >/dev/null 2>&1 || need+=(iproute2)          # namespaces and bridges of the TAP tests
command -v ping     >/dev/null 2>&1 || need+=(iputils-ping)      # ARP and ICMP still answered beside the XDP fast path

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "scripts/deps.sh: missing ${need[*]}; run as root (or install them) and retry" >&2
	exit 1
fi
echo "scripts/deps.sh: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture: answer no, without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
