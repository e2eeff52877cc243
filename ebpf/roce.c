//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The RoCEv2 fast path's steering program (XDP). It runs on an uplink
// netdev before the kernel's stack: a RoCEv2 frame (UDP destination 4791)
// whose destination MAC and IP a vHCA owns goes to that vHCA's AF_XDP
// socket on the RX queue it arrived on; everything else (ARP, neighbour
// discovery, ping, the host's own traffic, RoCE for other hosts) is
// passed to the kernel untouched.
//
// No libbpf: the few declarations it needs are below, so that
// `make generate` needs clang and the kernel's UAPI headers only.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name
#define bpf_htons(x) __builtin_bswap16(x)

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;

// RoCEv2's UDP destination port (IBA 1.4 Annex A17.2.1).
#define ROCEV2_PORT 4791

// vhca_key is what a vHCA owns: its MAC and one of its IP addresses,
// IPv4 as ::ffff:a.b.c.d (its RoCEv2 GID's form).
struct vhca_key {
	__u8 mac[6];
	__u16 pad;
	__u8 ip[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct vhca_key);
	__type(value, __u32); // the vHCA's number, for userspace
} vhca_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);   // RX queue
	__type(value, __u32); // AF_XDP socket
} xsks SEC(".maps");

enum counter {
	COUNTER_STEERED, // RoCEv2 frames redirected to a vHCA's socket
	COUNTER_PASSED,  // frames left to the kernel
	COUNTER_DROPPED, // RoCEv2 frames for a vHCA with no socket on their queue
	COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(__u32 c, int action)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &c);
	if (n)
		*n += 1;
	return action;
}

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

SEC("xdp")
int steer_rocev2(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct vhca_key key = {};
	struct ethhdr *eth = data;
	struct udphdr *udp;
	void *l3;
	__u16 proto;

	if ((void *)(eth + 1) > end)
		return count(COUNTER_PASSED, XDP_PASS);
	proto = eth->h_proto;
	l3 = eth + 1;
	// One VLAN tag (802.1Q or 802.1ad outer).
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vlan = l3;
		if ((void *)(vlan + 1) > end)
			return count(COUNTER_PASSED, XDP_PASS);
		proto = vlan->proto;
		l3 = vlan + 1;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP)
			return count(COUNTER_PASSED, XDP_PASS);
		// A fragment is the kernel's to reassemble (RoCEv2 sets DF).
		if (ip->frag_off & bpf_htons(0x3FFF))
			return count(COUNTER_PASSED, XDP_PASS);
		udp = l3 + ip->ihl * 4;
		key.ip[10] = 0xFF;
		key.ip[11] = 0xFF;
		__builtin_memcpy(&key.ip[12], &ip->daddr, 4);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		// RoCEv2 carries no extension headers: UDP follows directly.
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			return count(COUNTER_PASSED, XDP_PASS);
		udp = (void *)(ip6 + 1);
		__builtin_memcpy(key.ip, &ip6->daddr, 16);
	} else {
		return count(COUNTER_PASSED, XDP_PASS);
	}
	if ((void *)(udp + 1) > end || udp->dest != bpf_htons(ROCEV2_PORT))
		return count(COUNTER_PASSED, XDP_PASS);
	__builtin_memcpy(key.mac, eth->h_dest, 6);
	if (!bpf_map_lookup_elem(&vhca_addrs, &key))
		return count(COUNTER_PASSED, XDP_PASS);
	// The frame is a vHCA's: the kernel has no use for it (no listener on
	// 4791 here; it would answer with an ICMP port unreachable).
	if (bpf_redirect_map(&xsks, ctx->rx_queue_index, 0) == XDP_REDIRECT)
		return count(COUNTER_STEERED, XDP_REDIRECT);
	return count(COUNTER_DROPPED, XDP_DROP);
}

char _license[] SEC("license") = "Dual BSD/GPL";
