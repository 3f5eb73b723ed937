/*
 * ndkxdp-sendinv: the peer side of test/interop's SEND with Invalidate
 * case. An rdma_cm client (librdmacm, libibverbs) that
 *
 * connection 1: receives {mw rkey, mr rkey, mw addr, mr addr} (24 bytes,
 *   big-endian) from the server, WRITEs 8 bytes through each token, posts
 *   IBV_WR_SEND_WITH_INV naming the window, then the MR, waits for the
 *   server's go-ahead (a 1-byte SEND), and WRITEs through the window's
 *   token again, which must fail with IBV_WC_REM_ACCESS_ERR;
 * connection 2: receives {valid rkey, mr rkey, valid addr, mr addr},
 *   WRITEs through the valid token (must succeed), then through the
 *   invalidated MR's token (must fail with IBV_WC_REM_ACCESS_ERR).
 * connection 3: waits for the server's 1-byte goodbye and disconnects
 *   (the server checks there that its own NdkInvalidate of the MR fails).
 *
 * It prints one line per step and exits 0 only if every step went as
 * described. Usage: ndkxdp-sendinv SERVER PORT. Every wait is bounded by
 * alarm().
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define MSG 24

struct conn {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	unsigned char buf[64]; /* [0,24) receive, [32,40) write source, [40,48) send */
};

static int failures;

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void conn_open(struct conn *c, const char *host, const char *port)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_conn_param param;

	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(host, port, &hints, &res))
		die("rdma_getaddrinfo");
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = 8;
	attr.cap.max_recv_wr = 8;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&c->id, res, NULL, &attr))
		die("rdma_create_ep");
	rdma_freeaddrinfo(res);
	c->mr = rdma_reg_msgs(c->id, c->buf, sizeof c->buf);
	if (!c->mr)
		die("rdma_reg_msgs");
	if (rdma_post_recv(c->id, NULL, c->buf, MSG, c->mr))
		die("rdma_post_recv");
	memset(&param, 0, sizeof param);
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	if (rdma_connect(c->id, &param))
		die("rdma_connect");
}

static void conn_close(struct conn *c)
{
	rdma_disconnect(c->id);
	rdma_dereg_mr(c->mr);
	rdma_destroy_ep(c->id);
}

static void recv_msg(struct conn *c, const char *what, int want)
{
	struct ibv_wc wc;

	if (rdma_get_recv_comp(c->id, &wc) <= 0)
		die("rdma_get_recv_comp");
	printf("%s: %s, %u bytes\n", what, ibv_wc_status_str(wc.status), wc.byte_len);
	if (wc.status != IBV_WC_SUCCESS || (int)wc.byte_len != want) {
		printf("FAIL %s\n", what);
		exit(1);
	}
}

/* step posts wr, waits for its completion and counts a failure unless its
 * status is want. */
static void step(struct conn *c, struct ibv_send_wr *wr, const char *what, enum ibv_wc_status want)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	if (ibv_post_send(c->id->qp, wr, &bad))
		die("ibv_post_send");
	if (rdma_get_send_comp(c->id, &wc) <= 0)
		die("rdma_get_send_comp");
	printf("%s: %s (%d)\n", what, ibv_wc_status_str(wc.status), wc.status);
	if (wc.status != want) {
		printf("FAIL %s: want %s\n", what, ibv_wc_status_str(want));
		failures++;
	}
	fflush(stdout);
}

static void write_to(struct conn *c, uint32_t rkey, uint64_t addr, const char *text, const char *what, enum ibv_wc_status want)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(c->buf + 32), .length = 8, .lkey = c->mr->lkey};
	struct ibv_send_wr wr;

	memcpy(c->buf + 32, text, 8);
	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	step(c, &wr, what, want);
}

static void send_inv(struct conn *c, uint32_t rkey, const char *text, const char *what)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(c->buf + 40), .length = 8, .lkey = c->mr->lkey};
	struct ibv_send_wr wr;

	memcpy(c->buf + 40, text, 8);
	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_SEND_WITH_INV;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = rkey;
	step(c, &wr, what, IBV_WC_SUCCESS);
}

static void tokens(const unsigned char *b, uint32_t *k1, uint32_t *k2, uint64_t *a1, uint64_t *a2)
{
	memcpy(k1, b, 4);
	memcpy(k2, b + 4, 4);
	memcpy(a1, b + 8, 8);
	memcpy(a2, b + 16, 8);
	*k1 = be32toh(*k1);
	*k2 = be32toh(*k2);
	*a1 = be64toh(*a1);
	*a2 = be64toh(*a2);
}

int main(int argc, char **argv)
{
	struct conn c1, c2, c3;
	uint32_t mw_rkey, mr_rkey, ok_rkey, dead_rkey;
	uint64_t mw_addr, mr_addr, ok_addr, dead_addr;
	char what[96];

	if (argc != 3) {
		fprintf(stderr, "usage: %s SERVER PORT\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(90);

	memset(&c1, 0, sizeof c1);
	conn_open(&c1, argv[1], argv[2]);
	recv_msg(&c1, "conn1 tokens", MSG);
	tokens(c1.buf, &mw_rkey, &mr_rkey, &mw_addr, &mr_addr);
	printf("conn1 mw rkey %#x addr %#llx, mr rkey %#x addr %#llx\n", mw_rkey, (unsigned long long)mw_addr, mr_rkey, (unsigned long long)mr_addr);
	if (rdma_post_recv(c1.id, NULL, c1.buf, MSG, c1.mr))
		die("rdma_post_recv");
	write_to(&c1, mw_rkey, mw_addr, "mw-write", "conn1 write through mw", IBV_WC_SUCCESS);
	write_to(&c1, mr_rkey, mr_addr, "mr-write", "conn1 write through mr", IBV_WC_SUCCESS);
	snprintf(what, sizeof what, "conn1 send_with_inv %#x (mw)", mw_rkey);
	send_inv(&c1, mw_rkey, "inval-mw", what);
	snprintf(what, sizeof what, "conn1 send_with_inv %#x (mr)", mr_rkey);
	send_inv(&c1, mr_rkey, "inval-mr", what);
	recv_msg(&c1, "conn1 go-ahead", 1);
	write_to(&c1, mw_rkey, mw_addr, "mw-again", "conn1 write through mw after invalidation", IBV_WC_REM_ACCESS_ERR);
	conn_close(&c1);

	memset(&c2, 0, sizeof c2);
	conn_open(&c2, argv[1], argv[2]);
	recv_msg(&c2, "conn2 tokens", MSG);
	tokens(c2.buf, &ok_rkey, &dead_rkey, &ok_addr, &dead_addr);
	printf("conn2 valid rkey %#x addr %#llx, invalidated mr rkey %#x addr %#llx\n", ok_rkey, (unsigned long long)ok_addr, dead_rkey, (unsigned long long)dead_addr);
	write_to(&c2, ok_rkey, ok_addr, "ok-write", "conn2 write through a valid mr", IBV_WC_SUCCESS);
	write_to(&c2, dead_rkey, dead_addr, "mr-again", "conn2 write through mr after invalidation", IBV_WC_REM_ACCESS_ERR);
	conn_close(&c2);

	memset(&c3, 0, sizeof c3);
	conn_open(&c3, argv[1], argv[2]);
	recv_msg(&c3, "conn3 goodbye", 1);
	conn_close(&c3);

	printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
