/*
 * ndkxdp-imm: the peer side of test/interop's immediate-data case (the
 * guest's perftest, 4.5-0.17, has neither --write_with_imm nor
 * --send_with_imm). An rdma_cm client or server (librdmacm,
 * libibverbs) that, on one RC connection, does what its peer does:
 *
 *   before connecting, posts 2N+2 receives: the peer's descriptor, 2N
 *   for the messages, and the peer's goodbye ("late": only the
 *   descriptor's; the others after its own descriptor went out and 300
 *   ms passed, so that the peer's first message finds none and is RNR
 *   NAKed);
 *   sends its descriptor {addr, rkey (big-endian), 0} as a plain SEND
 *   of 16 bytes and waits for the peer's;
 *   for i in 0..N-1 posts IBV_WR_SEND_WITH_IMM of SIZE bytes of
 *   pattern(i) with imm 0x51000000|i, then IBV_WR_RDMA_WRITE_WITH_IMM of
 *   SIZE bytes of pattern(i) to the peer's addr + i*SIZE with imm
 *   0x57000000|i, each waited for;
 *   checks the peer's 2N messages as they complete its receives, in
 *   order: the SEND's with IBV_WC_RECV, IBV_WC_WITH_IMM, imm
 *   0x51000000|i, byte_len SIZE and pattern(i) in the receive buffer;
 *   the WRITE's with IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM, imm
 *   0x57000000|i, byte_len SIZE (the WRITE's length) and pattern(i) at
 *   its own addr + i*SIZE;
 *   sends a 1-byte goodbye, waits for the peer's, disconnects.
 *
 * pattern(i)[j] = (i*31 + j*7 + 1) & 0xff. It prints one line per
 * message and exits 0 only if everything went as described.
 * Usage: ndkxdp-imm client HOST PORT N SIZE [late]
 *        ndkxdp-imm server PORT N SIZE [late]
 * Every wait is bounded by alarm().
 */
#include <arpa/inet.h>
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define MAXN 64
#define MAXSIZE 65536
#define TAG_SEND 0x51000000u
#define TAG_WRITE 0x57000000u

static int n, size, late, failures;
static unsigned char *mem;	/* desc recv | desc send | bye | source | receives | write target */
static size_t memlen;
static struct ibv_mr *mr;
static struct rdma_cm_id *id;

enum { DESC_IN = 0, DESC_OUT = 16, BYE_IN = 32, BYE_OUT = 40, SRC = 64 };
#define RECV_AT(k) (SRC + (size_t)size + (size_t)(k) * size)
#define TARGET_AT(i) (RECV_AT(2 * n) + (size_t)(i) * size)

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static unsigned char pattern(int i, int j)
{
	return (unsigned char)((i * 31 + j * 7 + 1) & 0xff);
}

static void post_recv(uint64_t wrid, size_t off, size_t len)
{
	if (rdma_post_recv(id, (void *)(uintptr_t)wrid, mem + off, len, mr))
		die("rdma_post_recv");
}

static void post_messages(void)
{
	for (int k = 0; k < 2 * n; k++)
		post_recv(k, RECV_AT(k), size > 0 ? size : 1);
	post_recv(1000, BYE_IN, 1);
}

static void setup_qp(void)
{
	struct ibv_qp_init_attr attr;

	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = 8;
	attr.cap.max_recv_wr = 2 * MAXN + 4;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	if (rdma_create_qp(id, NULL, &attr))
		die("rdma_create_qp");
	mr = ibv_reg_mr(id->pd, mem, memlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	post_recv(999, DESC_IN, 16);
	if (!late)
		post_messages();
}

static void conn_param(struct rdma_conn_param *p)
{
	memset(p, 0, sizeof *p);
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

static void connect_to(const char *host, const char *port)
{
	struct rdma_addrinfo hints, *res;
	struct rdma_conn_param param;

	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(host, port, &hints, &res))
		die("rdma_getaddrinfo");
	if (rdma_create_ep(&id, res, NULL, NULL))
		die("rdma_create_ep");
	rdma_freeaddrinfo(res);
	setup_qp();
	conn_param(&param);
	if (rdma_connect(id, &param))
		die("rdma_connect");
}

static void accept_on(const char *port)
{
	struct rdma_addrinfo hints, *res;
	struct rdma_conn_param param;
	struct rdma_cm_id *listen_id;

	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(NULL, port, &hints, &res))
		die("rdma_getaddrinfo");
	if (rdma_create_ep(&listen_id, res, NULL, NULL))
		die("rdma_create_ep");
	rdma_freeaddrinfo(res);
	if (rdma_listen(listen_id, 1))
		die("rdma_listen");
	printf("listening on %s\n", port);
	if (rdma_get_request(listen_id, &id))
		die("rdma_get_request");
	setup_qp();
	conn_param(&param);
	if (rdma_accept(id, &param))
		die("rdma_accept");
}

/* post_send posts one signaled request and waits for its completion. */
static void post_send(struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	if (ibv_post_send(id->qp, wr, &bad))
		die("ibv_post_send");
	if (rdma_get_send_comp(id, &wc) <= 0)
		die("rdma_get_send_comp");
	if (wc.status != IBV_WC_SUCCESS) {
		printf("FAIL %s: %s (%d)\n", what, ibv_wc_status_str(wc.status), wc.status);
		exit(1);
	}
}

static void send_bytes(size_t off, size_t len, int opcode, uint32_t imm, uint64_t raddr, uint32_t rkey, const char *what)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(mem + off), .length = (uint32_t)len, .lkey = mr->lkey};
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof wr);
	wr.opcode = opcode;
	wr.sg_list = len > 0 ? &sge : NULL;
	wr.num_sge = len > 0 ? 1 : 0;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	post_send(&wr, what);
}

static void recv_one(struct ibv_wc *wc, const char *what)
{
	if (rdma_get_recv_comp(id, wc) <= 0)
		die("rdma_get_recv_comp");
	if (wc->status != IBV_WC_SUCCESS) {
		printf("FAIL %s: %s (%d)\n", what, ibv_wc_status_str(wc->status), wc->status);
		exit(1);
	}
}

static int same_pattern(const unsigned char *b, int i)
{
	for (int j = 0; j < size; j++)
		if (b[j] != pattern(i, j))
			return 0;
	return 1;
}

/* check_message checks the k-th message completion (k even: SEND i=k/2,
 * k odd: WRITE i=k/2). */
static void check_message(int k)
{
	struct ibv_wc wc;
	int i = k / 2, write = k & 1;
	uint32_t want = (write ? TAG_WRITE : TAG_SEND) | (uint32_t)i;
	uint32_t imm;
	int ok;

	recv_one(&wc, write ? "write receive" : "send receive");
	imm = ntohl(wc.imm_data);
	if (write)
		ok = wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && same_pattern(mem + TARGET_AT(i), i);
	else
		ok = wc.opcode == IBV_WC_RECV && same_pattern(mem + RECV_AT((uintptr_t)wc.wr_id), i);
	ok = ok && (wc.wc_flags & IBV_WC_WITH_IMM) && imm == want && (int)wc.byte_len == size;
	printf("%s %d: opcode %d flags %#x imm %#x byte_len %u: %s\n", write ? "recv_rdma_with_imm" : "recv_with_imm",
	       i, wc.opcode, wc.wc_flags, imm, wc.byte_len, ok ? "ok" : "WRONG");
	if (!ok)
		failures++;
}

int main(int argc, char **argv)
{
	struct ibv_wc wc;
	uint64_t raddr;
	uint32_t rkey;
	int server, a;

	if (argc < 5) {
		fprintf(stderr, "usage: %s client HOST PORT N SIZE [late] | server PORT N SIZE [late]\n", argv[0]);
		return 2;
	}
	server = strcmp(argv[1], "server") == 0;
	a = server ? 3 : 4;
	if (argc < a + 2)
		return 2;
	n = atoi(argv[a]);
	size = atoi(argv[a + 1]);
	late = argc > a + 2 && strcmp(argv[a + 2], "late") == 0;
	if (n < 1 || n > MAXN || size < 0 || size > MAXSIZE) {
		fprintf(stderr, "N in 1..%d, SIZE in 0..%d\n", MAXN, MAXSIZE);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(150);
	memlen = TARGET_AT(n) + 64;
	mem = calloc(1, memlen);
	if (!mem)
		die("calloc");

	if (server)
		accept_on(argv[2]);
	else
		connect_to(argv[2], argv[3]);
	printf("connected\n");

	*(uint64_t *)(mem + DESC_OUT) = htobe64((uintptr_t)(mem + TARGET_AT(0)));
	*(uint32_t *)(mem + DESC_OUT + 8) = htobe32(mr->rkey);
	send_bytes(DESC_OUT, 16, IBV_WR_SEND, 0, 0, 0, "descriptor");
	if (late) {
		usleep(300000);
		post_messages();
		printf("receives posted late\n");
	}
	recv_one(&wc, "peer descriptor");
	if (wc.opcode != IBV_WC_RECV || (wc.wc_flags & IBV_WC_WITH_IMM) || wc.byte_len != 16) {
		printf("FAIL peer descriptor: opcode %d flags %#x byte_len %u\n", wc.opcode, wc.wc_flags, wc.byte_len);
		return 1;
	}
	raddr = be64toh(*(uint64_t *)(mem + DESC_IN));
	rkey = be32toh(*(uint32_t *)(mem + DESC_IN + 8));
	printf("peer target %#llx rkey %#x\n", (unsigned long long)raddr, rkey);

	for (int i = 0; i < n; i++) {
		for (int j = 0; j < size; j++)
			mem[SRC + j] = pattern(i, j);
		send_bytes(SRC, size, IBV_WR_SEND_WITH_IMM, TAG_SEND | i, 0, 0, "send_with_imm");
		send_bytes(SRC, size, IBV_WR_RDMA_WRITE_WITH_IMM, TAG_WRITE | i, raddr + (uint64_t)i * size, rkey, "rdma_write_with_imm");
	}
	printf("sent %d send_with_imm and %d rdma_write_with_imm of %d bytes\n", n, n, size);
	for (int k = 0; k < 2 * n; k++)
		check_message(k);

	mem[BYE_OUT] = 'b';
	send_bytes(BYE_OUT, 1, IBV_WR_SEND, 0, 0, 0, "goodbye");
	recv_one(&wc, "peer goodbye");
	rdma_disconnect(id);
	printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
