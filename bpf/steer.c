//go:build ignore

// XDP steering program for ndkxdp: RoCEv2 frames go to the AF_XDP socket of
// the queue they arrived on, everything else goes to the kernel. See doc.go
// for the map contract and ../loader for the Go side.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Header offsets are spelled out instead of taken from linux/ip.h and friends:
// the program reads a handful of fields, and fixed offsets keep the object
// independent of the libc headers installed on the build host.
#define ETH_HLEN 14
#define VLAN_HLEN 4
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define IPV4_MIN_HLEN 20
#define IPV6_HLEN 40
#define IPPROTO_UDP 17
#define UDP_HLEN 8
#define BTH_LEN 12
// RoCEv2 UDP destination port, IBTA Annex A17.
#define ROCEV2_PORT 4791
// IPv4 fragment offset field (RFC 791): non-zero means no UDP header here.
#define IP_OFFSET_MASK 0x1FFF

// Why a frame got its verdict. Index into the counters map; the Go mirror is
// loader.Reason, generated from this enum, so append only and keep REASON_MAX
// last.
enum reason {
	// Passed to the kernel.
	REASON_PASS_NOT_IP = 0,   // ethertype is neither IPv4 nor IPv6 (ARP, LLDP, a second VLAN tag)
	REASON_PASS_NOT_UDP,      // IP, but not UDP (TCP, ICMP, IPv6 with extension headers)
	REASON_PASS_NOT_ROCE,     // UDP to a port other than 4791
	REASON_PASS_IP_FRAGMENT,  // non-first IPv4 fragment: there is no UDP header to read
	REASON_PASS_TRUNCATED_L2, // shorter than the Ethernet header (+ VLAN tag)
	REASON_PASS_TRUNCATED_L3, // shorter than the IP header, or IPv4 IHL < 5
	REASON_PASS_TRUNCATED_L4, // shorter than the UDP header
	// Dropped: RoCEv2 frames never reach the kernel, which would answer
	// them with ICMP port unreachable.
	REASON_DROP_TRUNCATED_BTH, // UDP 4791 without room for a whole BTH
	REASON_DROP_BAD_VERSION,   // BTH TVer != 0 (rxe_recv.c hdr_check drops these too)
	REASON_DROP_UNKNOWN_QP,    // destination QP not in qp_owner
	REASON_DROP_NO_SOCKET,     // known QP, but no socket in xsks for the arrival queue
	// Redirected to xsks[rx_queue_index].
	REASON_REDIRECT,               // the owning queue is the arrival queue
	REASON_REDIRECT_FOREIGN_QUEUE, // owned by another queue (RSS misplacement); the engine forwards it
	// Dropped: RoCEv2 frames addressed to another host, which a NIC in
	// promiscuous mode, a bridge or a forged header hands us.
	REASON_DROP_WRONG_DST_MAC, // destination MAC is not the adapter's (local_cfg)
	REASON_DROP_WRONG_DST_IP,  // destination IP is none of the adapter's (local_addrs)
	REASON_MAX,
};

// An AF_XDP socket is bound to one (device, queue), and the kernel refuses a
// redirect into a socket bound to another queue than the frame arrived on
// (net/xdp/xsk.c, xsk_rcv_check). So the key is the RX queue index.
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// Destination QPN (24 bits) -> owning queue index. QP1 (GSI, IB CM) maps to
// the management queue. The loader may resize it before loading.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} qp_owner SEC(".maps");

// The adapter's own unicast MAC. While check is 0 (a loader that set no
// addresses) no destination is checked.
struct local_cfg {
	__u8 mac[6];
	__u8 check;
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct local_cfg);
} local_cfg SEC(".maps");

// The adapter's IP addresses, IPv6 as they are, IPv4 as IPv4-mapped IPv6
// (::ffff:a.b.c.d), so one lookup serves both. The value says what the
// address is: one of the adapter's own (its frames come to the adapter's
// MAC), or a multicast group a QP joined (its frames come to the group's
// MAC, and go on to the QP lookup of MulticastQPN).
enum local_kind {
	LOCAL_UNICAST = 1,
	LOCAL_GROUP = 2,
};

struct local_addr {
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct local_addr);
	__type(value, __u8);
} local_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, REASON_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Emit the enum into BTF so bpf2go can generate its Go mirror.
const enum reason reason_unused __attribute__((unused));

static __always_inline int count(enum reason r, int action)
{
	__u32 key = r;
	__u64 *n = bpf_map_lookup_elem(&counters, &key);

	// Per-CPU slot: no other CPU writes it, so a plain increment is exact.
	if (n)
		*n += 1;
	return action;
}

// header returns len bytes at off: a pointer into the linear part when they
// are there (the normal case), else a copy in scratch. With xdp.frags a driver
// may put only a few bytes in the first buffer; bpf_xdp_load_bytes reads
// across fragments. NULL means the frame is shorter than off+len.
static __always_inline const __u8 *header(struct xdp_md *ctx, __u32 off, __u32 len, void *scratch)
{
	__u8 *data = (__u8 *)(long)ctx->data;
	__u8 *data_end = (__u8 *)(long)ctx->data_end;

	if (data + off + len <= data_end)
		return data + off;
	if (bpf_xdp_load_bytes(ctx, off, scratch, len) == 0)
		return scratch;
	return NULL;
}

static __always_inline __u16 be16_at(const __u8 *p)
{
	return ((__u16)p[0] << 8) | p[1];
}

// is_v4_mapped reports whether a is ::ffff:a.b.c.d.
static __always_inline int is_v4_mapped(const __u8 *a)
{
	return (a[0] | a[1] | a[2] | a[3] | a[4] | a[5] | a[6] | a[7] | a[8] | a[9]) == 0 &&
	       a[10] == 0xFF && a[11] == 0xFF;
}

// mac_equal compares two MACs byte by byte: BPF has no memcmp to call.
static __always_inline int mac_equal(const __u8 *a, const __u8 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) |
		(a[3] ^ b[3]) | (a[4] ^ b[4]) | (a[5] ^ b[5])) == 0;
}

SEC("xdp.frags")
int steer(struct xdp_md *ctx)
{
	// Big enough for the largest fixed header read at once (IPv6); __u64
	// keeps it 8-byte aligned, as the verifier requires for stack reads.
	__u64 scratch[IPV6_HLEN / 8];
	struct local_addr dst = {};
	__u8 dmac[6];
	const __u8 *h;
	__u32 off, rxq, zero = 0;
	__u16 proto;

	h = header(ctx, 0, ETH_HLEN, scratch);
	if (!h)
		return count(REASON_PASS_TRUNCATED_L2, XDP_PASS);
	__builtin_memcpy(dmac, h, 6);
	proto = be16_at(h + 12);
	off = ETH_HLEN;

	// One 802.1Q (or 802.1ad) tag; a stacked second tag is passed as not IP.
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		h = header(ctx, off, VLAN_HLEN, scratch);
		if (!h)
			return count(REASON_PASS_TRUNCATED_L2, XDP_PASS);
		proto = be16_at(h + 2);
		off += VLAN_HLEN;
	}

	if (proto == ETH_P_IP) {
		__u32 ihl;

		h = header(ctx, off, IPV4_MIN_HLEN, scratch);
		if (!h)
			return count(REASON_PASS_TRUNCATED_L3, XDP_PASS);
		ihl = h[0] & 0x0F;
		if (ihl < 5)
			return count(REASON_PASS_TRUNCATED_L3, XDP_PASS);
		if (h[9] != IPPROTO_UDP)
			return count(REASON_PASS_NOT_UDP, XDP_PASS);
		// Only the first fragment carries the UDP header. RoCEv2 senders
		// set DF, so fragments are not ours to steer.
		if (be16_at(h + 6) & IP_OFFSET_MASK)
			return count(REASON_PASS_IP_FRAGMENT, XDP_PASS);
		dst.addr[10] = 0xFF;
		dst.addr[11] = 0xFF;
		__builtin_memcpy(&dst.addr[12], h + 16, 4);
		off += ihl * 4;
	} else if (proto == ETH_P_IPV6) {
		h = header(ctx, off, IPV6_HLEN, scratch);
		if (!h)
			return count(REASON_PASS_TRUNCATED_L3, XDP_PASS);
		// No extension header walk: RoCEv2 senders (rxe, and every NIC in
		// ../shared/testdata/pcaps) put UDP right after the fixed header.
		if (h[6] != IPPROTO_UDP)
			return count(REASON_PASS_NOT_UDP, XDP_PASS);
		__builtin_memcpy(dst.addr, h + 24, 16);
		// An IPv4-mapped destination in an IPv6 header (RFC 4291
		// 2.5.5.2) would match the key of an IPv4 address: such a
		// packet is never sent to a host, so make it match nothing.
		if (is_v4_mapped(dst.addr))
			dst.addr[0] = 0xFF;
		off += IPV6_HLEN;
	} else {
		return count(REASON_PASS_NOT_IP, XDP_PASS);
	}

	h = header(ctx, off, UDP_HLEN, scratch);
	if (!h)
		return count(REASON_PASS_TRUNCATED_L4, XDP_PASS);
	if (be16_at(h + 2) != ROCEV2_PORT)
		return count(REASON_PASS_NOT_ROCE, XDP_PASS);
	off += UDP_HLEN;

	// From here on the frame is RoCEv2: never XDP_PASS.
	struct local_cfg *cfg = bpf_map_lookup_elem(&local_cfg, &zero);
	if (cfg && cfg->check) {
		__u8 *kind = bpf_map_lookup_elem(&local_addrs, &dst);

		if (dmac[0] & 1) {
			// A group MAC is the adapter's only for a group it joined.
			if (!kind || *kind != LOCAL_GROUP)
				return count(REASON_DROP_WRONG_DST_MAC, XDP_DROP);
		} else {
			if (!mac_equal(dmac, cfg->mac))
				return count(REASON_DROP_WRONG_DST_MAC, XDP_DROP);
			if (!kind || *kind != LOCAL_UNICAST)
				return count(REASON_DROP_WRONG_DST_IP, XDP_DROP);
		}
	}

	h = header(ctx, off, BTH_LEN, scratch);
	if (!h)
		return count(REASON_DROP_TRUNCATED_BTH, XDP_DROP);
	if (h[1] & 0x0F)
		return count(REASON_DROP_BAD_VERSION, XDP_DROP);

	__u32 qpn = ((__u32)h[5] << 16) | ((__u32)h[6] << 8) | h[7];
	__u32 *owner = bpf_map_lookup_elem(&qp_owner, &qpn);
	if (!owner)
		return count(REASON_DROP_UNKNOWN_QP, XDP_DROP);

	rxq = ctx->rx_queue_index;
	// The low bits of flags are the action when xsks has no entry for rxq
	// (bpf_redirect_map, include/uapi/linux/bpf.h): drop, never pass.
	if (bpf_redirect_map(&xsks, rxq, XDP_DROP) != XDP_REDIRECT)
		return count(REASON_DROP_NO_SOCKET, XDP_DROP);
	if (*owner != rxq)
		return count(REASON_REDIRECT_FOREIGN_QUEUE, XDP_REDIRECT);
	return count(REASON_REDIRECT, XDP_REDIRECT);
}

char __license[] SEC("license") = "Dual MIT/GPL";
