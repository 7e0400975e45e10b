/* test_cost: the iteration-time model against values computed by hand (the ring formula, the
 * expected union, one-chunk allreduce and parameter-server iterations, the overlap of
 * pipelined compression with the backward pass of the layers below), its monotonicity (more
 * bandwidth or less latency is never slower; the allreduce grows with W toward 2n/B), edge
 * cases (one worker, more servers than workers or chunks, zero latency, chunks under
 * --compress-min-bytes), rejected input, the choice of --mode auto among candidates,
 * powersgd's two rounds (a matrix by hand; its plan keeps matrices whole; with no matrix it
 * predicts ps-none; round 2 ahead of another chunk's round 1), a pool of compressor threads
 * (the speed-up, the busy time, the least pool that keeps up), and the measuring helpers on
 * small chunks (structure only: no timing is asserted). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_wire.h"

/* Relative closeness for values computed by hand in double. */
#define assert_close(a, b) assert_true(fabs((a) - (b)) <= 1e-9 * (fabs(b) + 1e-12))

/* Bytes of a pull besides its entries: the pc_wire header and the server's time (u64). */
#define PULL_HEAD (PC_WIRE_HEADER_BYTES + 8)

/* Rates with round numbers: every codec 2 ns per element, top-k and DGC 1 % as 8 bytes
 * per entry; the server's steps 1-20 ns; a 1 GB/s link with 10 us latency. */
static pc_cost_cfg_t base_cfg(void)
{
    pc_cost_cfg_t cfg = {.chunk_bytes = 64 << 20, .compress_min_bytes = 0};
    cfg.codec[PC_COST_CODEC_NONE] = (pc_cost_codec_rate_t){2e-9, 4.0, 1.0, false};
    cfg.codec[PC_COST_CODEC_TOPK] = (pc_cost_codec_rate_t){2e-9, 0.08, 0.01, true};
    cfg.codec[PC_COST_CODEC_TOPK_EF] = (pc_cost_codec_rate_t){2e-9, 0.08, 0.01, true};
    cfg.codec[PC_COST_CODEC_DGC] = (pc_cost_codec_rate_t){1e-9, 0.008, 0.001, true};
    /* powersgd rank 2: round 1 2 ns, round 2 1 ns, the worker's step 3 ns per element; the
     * server's rows and step 2 ns per element, orthonormalisation 1 ns per row x rank^2. */
    cfg.codec[PC_COST_CODEC_POWERSGD] = (pc_cost_codec_rate_t){2e-9, 0.02, 1.0, false};
    char err[128];
    assert_int_equal(pc_codec_spec_parse("powersgd:rank=2", &cfg.lowrank.spec, err, sizeof(err)),
                     PC_OK);
    cfg.lowrank.round2 = 1e-9;
    cfg.lowrank.finish = 3e-9;
    cfg.lowrank.step = 2e-9;
    cfg.lowrank.ortho = 1e-9;
    cfg.server = (pc_cost_server_rate_t){.agg_dense = 1e-9,
                                         .agg_sparse = 1e-8,
                                         .merge = 1e-9,
                                         .step_dense = 1e-9,
                                         .step_sparse = 2e-8,
                                         .pull_dense = 1e-9,
                                         .pull_sparse = 1e-8};
    cfg.link = (pc_cost_link_t){.bandwidth = 1e9, .latency = 1e-5};
    return cfg;
}

/* A model of nl layers (fwd, bwd each) with one tensor of n[l] elements and rows[l] rows
 * (rows NULL: none) per layer, no grouping (no buffers). */
static pc_cost_t *make_rows(pc_cost_cfg_t cfg, int nl, const double *fwd, const double *bwd,
                            const size_t *n, const size_t *rows)
{
    pc_cost_layer_t layers[8];
    pc_plan_tensor_t t[8];
    int tl[8];
    for (int l = 0; l < nl; l++) {
        layers[l] = (pc_cost_layer_t){fwd[l], bwd[l]};
        t[l] = (pc_plan_tensor_t){.n = n[l], .whole_rows = rows ? rows[l] : 0};
        tl[l] = l;
    }
    cfg.layers = layers;
    cfg.nlayers = nl;
    cfg.tensors = t;
    cfg.tensor_layer = tl;
    cfg.ntensors = nl;
    pc_cost_t *c = NULL;
    assert_int_equal(pc_cost_create(&cfg, &c), PC_OK);
    return c;
}

static pc_cost_t *make(pc_cost_cfg_t cfg, int nl, const double *fwd, const double *bwd,
                       const size_t *n)
{
    return make_rows(cfg, nl, fwd, bwd, n, NULL);
}

static void test_formulas(void **state)
{
    (void)state;
    pc_cost_link_t l = {.bandwidth = 1e9, .latency = 1e-5};
    /* 2 (W-1)/W n/B + 2 (W-1) alpha: W = 4, 1 MB: 1.5 ms + 60 us. */
    assert_close(pc_cost_ring(1e6, 4, &l), 1.5e-3 + 6e-5);
    assert_close(pc_cost_ring(1e6, 2, &l), 1e-3 + 2e-5);
    assert_close(pc_cost_ring(1e6, 1, &l), 0.0);
    /* n (1 - (1 - d)^W): 1000 entries, 1 %, 2 workers: 1000 (1 - 0.9801) = 19.9. */
    assert_close(pc_cost_union(1000, 0.01, 2), 19.9);
    assert_close(pc_cost_union(1000, 0.01, 1), 10.0);
    assert_close(pc_cost_union(1000, 1.0, 7), 1000.0);
    assert_true(pc_cost_union(1000, 0.01, 1024) < 1000.0);
}

/* One layer, one chunk of 1e6 elements: every step in sequence. */
static void test_allreduce_by_hand(void **state)
{
    (void)state;
    double fwd = 0.010, bwd = 0.020;
    size_t n = 1000000;
    pc_cost_t *c = make(base_cfg(), 1, &fwd, &bwd, &n);
    assert_int_equal(pc_cost_nchunks(c), 1);
    assert_int_equal(pc_cost_nelems(c), n);
    pc_cost_result_t r;
    assert_int_equal(pc_cost_predict(c, PC_COST_ALLREDUCE, 4, 0, NULL, &r), PC_OK);
    /* backward, ring of 4 MB over 4 workers (6 ms + 60 us), local step 1 ms, forward. */
    double ring = 2.0 * 3 / 4 * 4e6 / 1e9 + 2.0 * 3 * 1e-5;
    assert_close(r.iter, 0.020 + ring + 1e-3 + 0.010);
    assert_close(r.compute, 0.030);
    assert_close(r.exposed, ring + 1e-3);
    assert_close(r.comm_busy, ring);
    assert_close(r.server_busy, 1e-3);
    assert_close(r.bytes_up, 1.5 * 4e6);
    assert_close(r.bytes_down, 1.5 * 4e6);
    assert_close(r.compress, 0.0);
    /* One worker: nothing to exchange, the local step remains. */
    assert_int_equal(pc_cost_predict(c, PC_COST_ALLREDUCE, 1, 0, NULL, &r), PC_OK);
    assert_close(r.iter, 0.030 + 1e-3);
    assert_close(r.bytes_up, 0.0);
    pc_cost_destroy(c);
}

static void test_ps_by_hand(void **state)
{
    (void)state;
    double fwd = 0.010, bwd = 0.020;
    size_t n = 1000000;
    pc_cost_cfg_t cfg = base_cfg();
    pc_cost_t *c = make(cfg, 1, &fwd, &bwd, &n);
    pc_cost_result_t r;
    const double B = 1e9, a = 1e-5, W = 2;
    /* top-k pipelined, W = 2, S = 1. */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, &r), PC_OK);
    double k = 1e4, U = 1e6 * (1 - 0.99 * 0.99); /* entries per message; union 19900 */
    double push = PC_WIRE_HEADER_BYTES + 0.08 * 1e6, pull = PULL_HEAD + 8 * U;
    double server = W * k * 1e-8               /* check and add W messages */
                    + 1e-9 * ((W - 1) * k + k) /* merge the second into the first's 1e4 */
                    + U * 2e-8                 /* plain SGD on the union */
                    + U * 1e-8;                /* sparse pull: 4 U < n */
    double sent = 0.020 + 2e-3;                /* after backward, compressed in 2 ms */
    double arrived = sent + W * push / B + a;  /* the server's downlink carries W pushes */
    double done = arrived + server;
    double back = done + W * pull / B + a; /* the server's uplink carries W pulls */
    assert_close(r.iter, back + 0.010);
    assert_close(r.compress, 2e-3);
    assert_close(r.bytes_up, push);
    assert_close(r.bytes_down, pull);
    assert_close(r.server_busy, server);
    assert_close(r.comm_busy, W * pull / B);
    assert_int_equal(r.servers_used, 1);
    /* Inline: the same sequence here (one layer: nothing below to hide compression in). */
    pc_cost_result_t ri;
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_INLINE, 2, 1, NULL, &ri), PC_OK);
    assert_close(ri.iter, r.iter);
    /* Dense servers: W dense messages added, every element stepped, dense pulls. */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 2, 1, NULL, &r), PC_OK);
    push = PC_WIRE_HEADER_BYTES + 4e6;
    pull = PULL_HEAD + 4e6;
    server = W * 1e6 * 1e-9 + 1e6 * 1e-9 + 1e6 * 1e-9;
    assert_close(r.iter, 0.020 + 2e-3 + W * push / B + a + server + W * pull / B + a + 0.010);
    /* Server momentum: sparse messages onto the dense path, dense pulls. */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_SERVERMOM, 2, 1, NULL, &r), PC_OK);
    push = PC_WIRE_HEADER_BYTES + 0.08 * 1e6;
    server = W * k * 1e-8 + 1e6 * 1e-9 + 1e6 * 1e-9;
    assert_close(r.iter, 0.020 + 2e-3 + W * push / B + a + server + W * pull / B + a + 0.010);
    /* Many workers: the union passes n / 4 and the pull goes dense. */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 64, 1, NULL, &r), PC_OK);
    assert_close(r.bytes_down, PULL_HEAD + 4e6);
    pc_cost_destroy(c);
}

/* Two layers, a chunk each, an ideal network and server: pipelined compression of the
 * last layer's chunk hides behind the first layer's backward; inline adds both. */
static void test_overlap(void **state)
{
    (void)state;
    double fwd[2] = {0.001, 0.001}, bwd[2] = {0.010, 0.010};
    size_t n[2] = {1000000, 1000000};
    pc_cost_cfg_t cfg = base_cfg();
    memset(&cfg.server, 0, sizeof(cfg.server));
    cfg.link = (pc_cost_link_t){.bandwidth = INFINITY, .latency = 0};
    pc_cost_t *c = make(cfg, 2, fwd, bwd, n);
    pc_cost_result_t p, i;
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, &p), PC_OK);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_INLINE, 2, 1, NULL, &i), PC_OK);
    /* Pipelined: layer 1's chunk compressed during layer 0's backward (hidden); layer 0's
     * after it (exposed: nothing is below it). 0.020 + 2 ms + 2 x 1 ms forward. */
    assert_close(p.iter, 0.020 + 2e-3 + 0.002);
    assert_close(p.exposed, 2e-3);
    /* Inline: both on the backprop thread. */
    assert_close(i.iter, 0.020 + 4e-3 + 0.002);
    assert_close(i.exposed, 4e-3);
    assert_close(i.compress, p.compress);
    /* Compression longer than the backward below it: only that much is hidden. */
    pc_cost_destroy(c);
    cfg.codec[PC_COST_CODEC_TOPK].compress = 15e-9; /* 15 ms per chunk */
    c = make(cfg, 2, fwd, bwd, n);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, &p), PC_OK);
    /* chunk 1: 0.010-0.025; chunk 0 (ready at 0.020, lower id) waits for the thread:
     * 0.025-0.040; forward from 0.040. */
    assert_close(p.iter, 0.040 + 0.002);
    pc_cost_destroy(c);
}

/* Ready chunks are compressed lowest id first (the next forward needs the first layer
 * first), not in hand-over order. */
static void test_priority(void **state)
{
    (void)state;
    double fwd[3] = {0.001, 0.001, 0.001}, bwd[3] = {0.001, 0.001, 0.001};
    size_t n[3] = {1000000, 1000000, 1000000};
    pc_cost_cfg_t cfg = base_cfg();
    memset(&cfg.server, 0, sizeof(cfg.server));
    cfg.link = (pc_cost_link_t){.bandwidth = INFINITY, .latency = 0};
    cfg.codec[PC_COST_CODEC_TOPK].compress = 5e-9; /* 5 ms per chunk */
    pc_cost_t *c = make(cfg, 3, fwd, bwd, n);
    pc_cost_result_t r;
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 1, 1, NULL, &r), PC_OK);
    /* Ready: chunk 2 at 1 ms, 1 at 2 ms, 0 at 3 ms. Thread: 2 (1-6 ms), then 0 (6-11: lower
     * id than 1), then 1 (11-16). Forward from 3 ms: layer 0 at max(3, 11) + 1 = 12,
     * layer 1 at max(12, 16) + 1 = 17, layer 2 at 18. */
    assert_close(r.iter, 0.018);
    pc_cost_destroy(c);
}

/* Small tensors share a chunk (pc_plan groups adjacent buffers); the chunk is ready after
 * its lowest layer. Chunks under --compress-min-bytes use the NONE codec's rates. */
static void test_plan_and_min_bytes(void **state)
{
    (void)state;
    static float p[300000], g[300000];
    pc_cost_layer_t layers[2] = {{0.001, 0.002}, {0.001, 0.002}};
    /* Layer 0: a weight of 200000 elements and its bias of 100; layer 1: 1000 and 10, one
     * slab. Each tensor after the first is small (PC_PLAN_GROUP_MAX), adjacent and fits:
     * pc_plan makes one chunk of all four. */
    size_t sizes[4] = {200000, 100, 1000, 10};
    pc_plan_tensor_t t[4];
    int tl[4] = {0, 0, 1, 1};
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        t[i] = (pc_plan_tensor_t){sizes[i], p + off, g + off, 0};
        off += sizes[i];
    }
    pc_cost_cfg_t cfg = base_cfg();
    cfg.layers = layers;
    cfg.nlayers = 2;
    cfg.tensors = t;
    cfg.tensor_layer = tl;
    cfg.ntensors = 4;
    cfg.chunk_bytes = 4 << 20;
    pc_cost_t *c = NULL;
    assert_int_equal(pc_cost_create(&cfg, &c), PC_OK);
    assert_int_equal(pc_cost_nchunks(c), 1);
    assert_int_equal(pc_cost_nelems(c), 201110);
    memset(&cfg.server, 0, sizeof(cfg.server));
    cfg.link = (pc_cost_link_t){.bandwidth = INFINITY, .latency = 0};
    pc_cost_destroy(c);
    assert_int_equal(pc_cost_create(&cfg, &c), PC_OK);
    pc_cost_result_t r;
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, &r), PC_OK);
    /* One chunk, ready when layer 0 is done (4 ms), compressed 201110 x 2 ns. */
    assert_close(r.iter, 0.004 + 201110 * 2e-9 + 0.002);
    pc_cost_destroy(c);
    /* Above the chunk's size, --compress-min-bytes sends it as NONE (4 bytes, 7 ns). */
    cfg.compress_min_bytes = 1 << 20;
    cfg.codec[PC_COST_CODEC_NONE].compress = 7e-9;
    assert_int_equal(pc_cost_create(&cfg, &c), PC_OK);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, &r), PC_OK);
    assert_close(r.compress, 201110 * 7e-9);
    assert_close(r.bytes_up, PC_WIRE_HEADER_BYTES + 4.0 * 201110);
    pc_cost_destroy(c);
}

/* A model of a few layers and many chunks for the sweeps. */
static pc_cost_t *sweep_model(pc_cost_cfg_t cfg)
{
    double fwd[4] = {0.004, 0.003, 0.002, 0.0005}, bwd[4] = {0.008, 0.006, 0.004, 0.001};
    size_t n[4] = {3000000, 2500000, 700000, 5000};
    cfg.chunk_bytes = 1 << 20; /* 256 Ki elements: several chunks per layer */
    cfg.compress_min_bytes = 65536;
    return make(cfg, 4, fwd, bwd, n);
}

static void test_monotone_bandwidth(void **state)
{
    (void)state;
    pc_cost_t *c = sweep_model(base_cfg());
    const double bws[] = {1e6, 1.25e8, 1.25e9, 1.25e10, 1e11, 1e13, INFINITY};
    const int Ws[] = {1, 2, 8, 64, 1024};
    for (int m = 0; m < PC_COST_MODES; m++)
        for (size_t wi = 0; wi < sizeof(Ws) / sizeof(Ws[0]); wi++)
            for (int S = 1; S <= Ws[wi] + 3; S += Ws[wi] / 4 + 2) {
                double prev = INFINITY;
                for (size_t b = 0; b < sizeof(bws) / sizeof(bws[0]); b++) {
                    pc_cost_link_t l = {.bandwidth = bws[b], .latency = 1e-5};
                    pc_cost_result_t r;
                    assert_int_equal(pc_cost_predict(c, m, Ws[wi], S, &l, &r), PC_OK);
                    assert_true(r.iter <= prev);
                    assert_true(r.iter >= r.compute);
                    assert_close(r.exposed, r.iter - r.compute);
                    prev = r.iter;
                }
                /* Less latency is never slower either. */
                prev = INFINITY;
                for (double lat = 1e-3; lat >= 1e-9; lat /= 10) {
                    pc_cost_link_t l = {.bandwidth = 1.25e9, .latency = lat};
                    pc_cost_result_t r;
                    assert_int_equal(pc_cost_predict(c, m, Ws[wi], S, &l, &r), PC_OK);
                    assert_true(r.iter <= prev);
                    prev = r.iter;
                }
            }
    pc_cost_destroy(c);
}

/* Zero latency: the ring's transfer time grows with W and stays below 2n/B, which it
 * approaches; the iteration is never faster with more workers. */
static void test_allreduce_grows_with_workers(void **state)
{
    (void)state;
    pc_cost_cfg_t cfg = base_cfg();
    cfg.link.latency = 0;
    pc_cost_t *c = sweep_model(cfg);
    double bytes = 4.0 * (double)pc_cost_nelems(c), limit = 2.0 * bytes / cfg.link.bandwidth;
    double prev_ring = -1, prev_iter = 0;
    pc_cost_result_t r;
    for (int W = 1; W <= 1024; W++) {
        assert_int_equal(pc_cost_predict(c, PC_COST_ALLREDUCE, W, 0, NULL, &r), PC_OK);
        assert_true(r.comm_busy >= prev_ring);
        assert_true(r.comm_busy < limit);
        assert_true(r.iter >= prev_iter);
        prev_ring = r.comm_busy;
        prev_iter = r.iter;
    }
    assert_true(r.comm_busy > 0.99 * limit);
    assert_close(r.comm_busy, 2.0 * 1023 / 1024 * bytes / cfg.link.bandwidth);
    /* With latency, every chunk pays 2 (W-1) alpha on top. */
    pc_cost_result_t rl;
    pc_cost_link_t l = {.bandwidth = cfg.link.bandwidth, .latency = 1e-6};
    assert_int_equal(pc_cost_predict(c, PC_COST_ALLREDUCE, 1024, 0, &l, &rl), PC_OK);
    assert_close(rl.comm_busy, r.comm_busy + pc_cost_nchunks(c) * 2.0 * 1023 * 1e-6);
    pc_cost_destroy(c);
}

static void test_edges(void **state)
{
    (void)state;
    pc_cost_t *c = sweep_model(base_cfg());
    int nc = pc_cost_nchunks(c);
    pc_cost_result_t a, b;
    /* More servers than workers, and than chunks: the extra ones stay idle. */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, 64, NULL, &a), PC_OK);
    assert_int_equal(a.servers_used, nc);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, nc, NULL, &b), PC_OK);
    assert_close(a.iter, b.iter);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, PC_COST_MAX_RANKS, NULL, &b),
                     PC_OK);
    assert_close(a.iter, b.iter);
    /* More servers never load one more: not slower than one server. */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 8, 1, NULL, &a), PC_OK);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 8, 4, NULL, &b), PC_OK);
    assert_true(b.iter <= a.iter);
    assert_true(b.server_busy < a.server_busy);
    /* One worker in every mode; zero latency. */
    pc_cost_link_t l = {.bandwidth = 1e9, .latency = 0};
    for (int m = 0; m < PC_COST_MODES; m++) {
        assert_int_equal(pc_cost_predict(c, m, 1, 1, &l, &a), PC_OK);
        assert_true(a.iter >= a.compute && isfinite(a.iter));
        assert_int_equal(a.nchunks, nc);
    }
    pc_cost_destroy(c);
}

/* powersgd, one 1000 x 1000 matrix at rank 2, 2 workers: every step of both rounds. */
static void test_powersgd_by_hand(void **state)
{
    (void)state;
    double fwd = 0.010, bwd = 0.020, B = 1e9, a = 1e-5, W = 2;
    size_t n = 1000000, rows = 1000;
    pc_cost_t *c = make_rows(base_cfg(), 1, &fwd, &bwd, &n, &rows);
    pc_cost_result_t r;
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, 2, 1, NULL, &r), PC_OK);
    assert_int_equal(r.nchunks, 1);
    /* Round 1 (2 ms) after backward; P_w (1000 x 2 floats) up, W of them into the server,
     * which adds them (W x 2000 x 1 ns) and orthonormalises (1000 x 2^2 x 1 ns); P^ (2000
     * floats) to each worker. */
    double push1 = PC_WIRE_HEADER_BYTES + 4.0 * 2000, pull1 = PC_WIRE_HEADER_BYTES + 4.0 * 2000;
    double srv1 = W * 2000 * 1e-9 + 4000 * 1e-9;
    double phat = 0.020 + 2e-3 + W * push1 / B + a + srv1 + W * pull1 / B + a;
    /* Round 2 (1 ms); Q_w (1000 x 2) up; the server adds W of them and steps the rows (2 ms);
     * Q down with the server's time; the worker's step (3 ms); then the forward. */
    double push2 = PC_WIRE_HEADER_BYTES + 4.0 * 2000, pull2 = PULL_HEAD + 4.0 * 2000;
    double srv2 = W * 2000 * 1e-9 + 2e-3;
    double q = phat + 1e-3 + W * push2 / B + a + srv2 + W * pull2 / B + a;
    assert_close(r.iter, q + 3e-3 + 0.010);
    assert_close(r.compute, 0.030);
    assert_close(r.compress, 2e-3 + 1e-3 + 3e-3);
    assert_close(r.bytes_up, push1 + push2);
    assert_close(r.bytes_down, pull1 + pull2);
    assert_close(r.server_busy, srv1 + srv2);
    assert_close(r.comm_busy, W * (pull1 + pull2) / B); /* the server's uplink: Q has 8 more */
    pc_cost_destroy(c);
}

/* powersgd's plan: a matrix stays one chunk whatever --chunk-bytes; a vector, a tensor
 * under --compress-min-bytes or one whose factors would not pay goes dense, as in ps-none;
 * with no matrix at all the mode predicts exactly ps-none. */
static void test_powersgd_plan(void **state)
{
    (void)state;
    double fwd[3] = {0.001, 0.001, 0.001}, bwd[3] = {0.002, 0.002, 0.002};
    size_t n[3] = {4000000, 4000, 3000000}, rows[3] = {2000, 40, 0};
    pc_cost_cfg_t cfg = base_cfg();
    cfg.chunk_bytes = 1 << 20;
    cfg.compress_min_bytes = 65536; /* the 4000-element matrix is under it */
    pc_cost_t *c = make_rows(cfg, 3, fwd, bwd, n, rows);
    pc_cost_result_t p, d;
    assert_int_equal(pc_cost_nchunks(c), 16 + 1 + 12); /* the plain plan */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, 2, 1, NULL, &p), PC_OK);
    assert_int_equal(p.nchunks, 1 + 1 + 12);
    /* One matrix's factors up (rank 2: 2000 + 2000 rows and columns), the rest dense. */
    double up = 2 * PC_WIRE_HEADER_BYTES + 4.0 * 2 * (2000 + 2000) +
                (1 + 12) * PC_WIRE_HEADER_BYTES + 4.0 * (4000 + 3000000);
    assert_close(p.bytes_up, up);
    pc_cost_destroy(c);
    /* A min-rank-gain the matrix cannot meet: it goes dense (in chunks, as any tensor). */
    assert_int_equal(
        pc_codec_spec_parse("powersgd:rank=2,min-rank-gain=1000", &cfg.lowrank.spec, NULL, 0),
        PC_OK);
    c = make_rows(cfg, 3, fwd, bwd, n, rows);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, 2, 1, NULL, &p), PC_OK);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 2, 1, NULL, &d), PC_OK);
    assert_int_equal(p.nchunks, 16 + 1 + 12);
    assert_memory_equal(&p, &d, sizeof(p));
    pc_cost_destroy(c);
    /* No powersgd spec: no matrix either. */
    cfg.lowrank.spec.id = PC_CODEC_NONE;
    c = make_rows(cfg, 3, fwd, bwd, n, rows);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, 2, 1, NULL, &p), PC_OK);
    assert_memory_equal(&p, &d, sizeof(p));
    pc_cost_destroy(c);
}

/* Two matrices, an ideal network and server: the last layer's two rounds and step hide
 * behind the first layer's backward; and an answer that is in goes ahead of another
 * chunk's round 1 that is ready too. */
static void test_powersgd_overlap(void **state)
{
    (void)state;
    double fwd[2] = {0.001, 0.001}, bwd[2] = {0.010, 0.010};
    size_t n[2] = {1000000, 1000000}, rows[2] = {1000, 1000};
    pc_cost_cfg_t cfg = base_cfg();
    memset(&cfg.server, 0, sizeof(cfg.server));
    cfg.lowrank.step = cfg.lowrank.ortho = 0;
    cfg.link = (pc_cost_link_t){.bandwidth = INFINITY, .latency = 0};
    pc_cost_t *c = make_rows(cfg, 2, fwd, bwd, n, rows);
    pc_cost_result_t r;
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, 2, 1, NULL, &r), PC_OK);
    /* Matrix 1 (layer 1, ready at 0.010): round 1 to 0.012, round 2 (P^ back at once) to
     * 0.013, its step to 0.016: all during layer 0's backward. Matrix 0 (ready at 0.020):
     * 2 + 1 + 3 ms: forward from 0.026. */
    assert_close(r.iter, 0.026 + 0.002);
    assert_close(r.exposed, 0.006);
    /* Six times slower: matrix 1's round 1 runs 0.010-0.022, when matrix 0 (ready at
     * 0.020) and matrix 1's P^ both wait; P^ first: round 2 0.022-0.028, then Q: the step
     * 0.028-0.046; matrix 0's round 1 0.046-0.058, round 2 to 0.064, step to 0.082. */
    pc_cost_destroy(c);
    cfg.codec[PC_COST_CODEC_POWERSGD].compress = 12e-9;
    cfg.lowrank.round2 = 6e-9;
    cfg.lowrank.finish = 18e-9;
    c = make_rows(cfg, 2, fwd, bwd, n, rows);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, 2, 1, NULL, &r), PC_OK);
    assert_close(r.iter, 0.082 + 0.002);
    pc_cost_destroy(c);
}

/* powersgd's prediction on a model of matrices and vectors: never below the compute, the
 * busiest link direction's or the busiest server's time; a 1 MB/s link is slower than an
 * ideal one. It is not monotone in between: its compressor takes answers first, as the
 * runtime's thread does, so a faster link can bring a P^ or a Q in ahead of another
 * chunk's round 1 and delay it (a list-scheduling anomaly: up to 7 % on this model, e.g. W
 * = 4 at 10 us against 100 us of latency; even an ideal link is not the fastest), which
 * doc/scaling.md states. */
static void test_powersgd_bounds(void **state)
{
    (void)state;
    double fwd[4] = {0.004, 0.003, 0.002, 0.0005}, bwd[4] = {0.008, 0.006, 0.004, 0.001};
    size_t n[4] = {3000000, 2500000, 700000, 5000}, rows[4] = {1000, 2500, 0, 50};
    pc_cost_cfg_t cfg = base_cfg();
    cfg.chunk_bytes = 1 << 20;
    cfg.compress_min_bytes = 65536;
    pc_cost_t *c = make_rows(cfg, 4, fwd, bwd, n, rows);
    const double bws[] = {1e6, 1.25e8, 1.25e9, 1.25e10, 1e11, 1e13, INFINITY};
    const pc_cost_link_t ideal = {.bandwidth = INFINITY, .latency = 0},
                         slow = {.bandwidth = 1e6, .latency = 1e-3};
    for (int W = 1; W <= 1024; W *= 4)
        for (int S = 1; S <= 3; S++) {
            pc_cost_result_t r, lo, hi;
            assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, W, S, &ideal, &lo),
                             PC_OK);
            assert_int_equal(pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, W, S, &slow, &hi),
                             PC_OK);
            assert_true(lo.iter <= hi.iter);
            for (size_t b = 0; b < sizeof(bws) / sizeof(bws[0]); b++)
                for (double lat = 1e-3; lat >= 1e-9; lat /= 10) {
                    pc_cost_link_t l = {.bandwidth = bws[b], .latency = lat};
                    assert_int_equal(
                        pc_cost_predict(c, PC_COST_PS_POWERSGD_PIPELINED, W, S, &l, &r), PC_OK);
                    assert_true(r.iter >= r.compute);
                    assert_true(r.iter >= r.comm_busy);
                    assert_true(r.iter >= r.server_busy);
                    assert_close(r.exposed, r.iter - r.compute);
                }
        }
    pc_cost_destroy(c);
}

static void test_invalid(void **state)
{
    (void)state;
    double fwd = 0.001, bwd = 0.002;
    size_t n = 1000;
    pc_cost_layer_t layer = {fwd, bwd};
    pc_plan_tensor_t t = {.n = n};
    int tl = 0;
    pc_cost_cfg_t good = base_cfg();
    good.layers = &layer;
    good.nlayers = 1;
    good.tensors = &t;
    good.tensor_layer = &tl;
    good.ntensors = 1;
    static char sentinel;
    pc_cost_t *c = NULL, *keep = (pc_cost_t *)(void *)&sentinel; /* untouched on error */
    pc_cost_cfg_t bad;
#define REJECT(change)                                                                             \
    do {                                                                                           \
        bad = good;                                                                                \
        change;                                                                                    \
        c = keep;                                                                                  \
        assert_int_equal(pc_cost_create(&bad, &c), PC_EINVAL);                                     \
        assert_ptr_equal(c, keep);                                                                 \
    } while (0)
    REJECT(bad.nlayers = 0);
    REJECT(bad.layers = NULL);
    REJECT(bad.ntensors = 0);
    REJECT(bad.tensor_layer = NULL);
    pc_cost_layer_t neg = {-1, 0}, nan_layer = {NAN, 0}, inf_layer = {0, INFINITY};
    REJECT(bad.layers = &neg);
    REJECT(bad.layers = &nan_layer);
    REJECT(bad.layers = &inf_layer);
    int tl_bad = 1;
    REJECT(bad.tensor_layer = &tl_bad);
    pc_plan_tensor_t empty = {.n = 0};
    REJECT(bad.tensors = &empty);
    REJECT(bad.chunk_bytes = 2);
    REJECT(bad.codec[PC_COST_CODEC_TOPK].density = 0);
    REJECT(bad.codec[PC_COST_CODEC_TOPK].density = 1.5);
    REJECT(bad.codec[PC_COST_CODEC_DGC].compress = NAN);
    REJECT(bad.codec[PC_COST_CODEC_NONE].bytes = -4);
    REJECT(bad.server.merge = -1e-9);
    REJECT(bad.server.pull_sparse = INFINITY);
    REJECT(bad.link.bandwidth = 0);
    REJECT(bad.link.bandwidth = NAN);
    REJECT(bad.link.latency = -1e-6);
    REJECT(bad.lowrank.round2 = -1e-9);
    REJECT(bad.lowrank.step = NAN);
    REJECT(bad.lowrank.spec.rank = 0);
    pc_plan_tensor_t odd = {.n = n, .whole_rows = 7}; /* 7 rows do not divide 1000 */
    REJECT(bad.tensors = &odd);
    assert_int_equal(pc_cost_create(NULL, &c), PC_EINVAL);
    assert_int_equal(pc_cost_create(&good, NULL), PC_EINVAL);

    assert_int_equal(pc_cost_create(&good, &c), PC_OK);
    pc_cost_result_t r = {.iter = 42};
    assert_int_equal(pc_cost_predict(c, PC_COST_ALLREDUCE, 0, 0, NULL, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict(c, PC_COST_ALLREDUCE, PC_COST_MAX_RANKS + 1, 0, NULL, &r),
                     PC_EINVAL);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 2, 0, NULL, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 2, -1, NULL, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict(c, (pc_cost_mode_t)-1, 2, 1, NULL, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict(c, PC_COST_MODES, 2, 1, NULL, &r), PC_EINVAL);
    pc_cost_link_t l0 = {.bandwidth = 0, .latency = 0}, ln = {.bandwidth = 1e9, .latency = -1};
    assert_int_equal(pc_cost_predict(c, PC_COST_ALLREDUCE, 2, 0, &l0, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 2, 1, &ln, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict(NULL, PC_COST_PS_NONE, 2, 1, NULL, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_NONE, 2, 1, NULL, NULL), PC_EINVAL);
    assert_close(r.iter, 42.0); /* untouched by every failure */
    pc_cost_destroy(c);
    pc_cost_destroy(NULL);
}

static void test_names(void **state)
{
    (void)state;
    const char *want[] = {
        "allreduce",        "ps-none",           "ps-topk-inline",       "ps-topk-pipelined",
        "ps-dgc-pipelined", "ps-topk-servermom", "ps-powersgd-pipelined"};
    /* e2e.sh's modes 1..6 and 8, in order (its 7 is --mode auto) */
    const int e2e[] = {1, 2, 3, 4, 5, 6, 8};
    assert_int_equal(PC_COST_MODES, 7);
    for (int m = 0; m < PC_COST_MODES; m++) {
        assert_string_equal(pc_cost_mode_name(m), want[m]);
        assert_int_equal(pc_cost_mode_e2e(m), e2e[m]);
        pc_cost_mode_t got = PC_COST_MODES;
        assert_int_equal(pc_cost_mode_parse(want[m], &got), PC_OK);
        assert_int_equal(got, m);
        char num[4];
        snprintf(num, sizeof(num), "%d", e2e[m]);
        got = PC_COST_MODES;
        assert_int_equal(pc_cost_mode_parse(num, &got), PC_OK);
        assert_int_equal(got, m);
    }
    pc_cost_mode_t got = PC_COST_ALLREDUCE;
    assert_int_equal(pc_cost_mode_parse("7", &got), PC_EINVAL);
    assert_int_equal(pc_cost_mode_parse("ps", &got), PC_EINVAL);
    assert_int_equal(pc_cost_mode_parse("", &got), PC_EINVAL);
    assert_int_equal(pc_cost_mode_parse(NULL, &got), PC_EINVAL);
    assert_int_equal(got, PC_COST_ALLREDUCE);
    assert_string_equal(pc_cost_mode_name(PC_COST_MODES), "?");
    assert_int_equal(pc_cost_mode_e2e(-1), 0);
    assert_string_equal(pc_cost_codec_name(PC_COST_CODEC_TOPK_EF), "topk-ef");
    assert_string_equal(pc_cost_codec_name(PC_COST_CODEC_POWERSGD), "powersgd");
    assert_string_equal(pc_cost_codec_name(PC_COST_CODECS), "?");
}

/* The measuring helpers run the real code on small inputs; only their structure is
 * checked (positive, finite, the density and bytes the codec produces). */
static void test_measure(void **state)
{
    (void)state;
    enum { N = 30000 };
    float *g = malloc(sizeof(float) * N);
    assert_non_null(g);
    for (int i = 0; i < N; i++)
        g[i] = (float)((i * 7919) % 1000 - 500) * 1e-4f;
    size_t chunks[2] = {20000, 10000};
    pc_codec_spec_t spec;
    char err[256];
    assert_int_equal(pc_codec_spec_parse("topk:ratio=0.01", &spec, err, sizeof(err)), PC_OK);
    pc_cost_codec_rate_t r;
    assert_int_equal(pc_cost_measure_codec(&spec, g, chunks, 2, 1, &r, err, sizeof(err)), PC_OK);
    assert_true(r.compress > 0 && isfinite(r.compress));
    assert_close(r.density, 0.01); /* ceil(0.01 n) entries per chunk */
    assert_close(r.bytes, 0.08);   /* a u32 index and a binary32 value each */
    assert_true(r.sparse);
    assert_int_equal(pc_codec_spec_parse("none", &spec, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_cost_measure_codec(&spec, g, chunks, 2, 2, &r, err, sizeof(err)), PC_OK);
    assert_close(r.bytes, 4.0);
    assert_close(r.density, 1.0);
    assert_false(r.sparse);
    assert_int_equal(pc_cost_measure_codec(&spec, g, chunks, 0, 1, &r, err, sizeof(err)),
                     PC_EINVAL);
    assert_int_equal(pc_cost_measure_codec(&spec, g, chunks, 2, 0, &r, err, sizeof(err)),
                     PC_EINVAL);
    size_t zero = 0;
    assert_int_equal(pc_cost_measure_codec(&spec, g, &zero, 1, 1, &r, err, sizeof(err)), PC_EINVAL);
    free(g);

    pc_cost_server_rate_t s;
    assert_int_equal(pc_cost_measure_server(20000, 50000, 1, &s, err, sizeof(err)), PC_OK);
    double v[] = {s.agg_dense,   s.agg_sparse, s.merge,      s.step_dense,
                  s.step_sparse, s.pull_dense, s.pull_sparse};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        assert_true(v[i] >= 0 && isfinite(v[i]));
    assert_true(s.agg_sparse > 0 && s.step_dense > 0 && s.pull_dense > 0);
    assert_int_equal(pc_cost_measure_server(100, 100, 1, &s, err, sizeof(err)), PC_EINVAL);
    assert_int_equal(pc_cost_measure_server(20000, 20000, 0, &s, err, sizeof(err)), PC_EINVAL);
    assert_int_equal(pc_cost_measure_server(20000, 10000, 1, &s, err, sizeof(err)), PC_EINVAL);
}

/* pc_cost_choose: every candidate predicted with its own workers (the allreduce on every
 * rank, the servers' modes on the others), the rate W / iter, the best the argmax; the
 * fast link favours the allreduce (one more worker, no server), the slow one DGC. */
static void test_choose(void **state)
{
    (void)state;
    pc_cost_t *c = sweep_model(base_cfg());
    const unsigned all = (1u << PC_COST_MODES) - 1;
    pc_cost_choice_t ch;
    pc_cost_link_t fast = {.bandwidth = INFINITY, .latency = 0}, slow = {1e6, 1e-4};
    assert_int_equal(pc_cost_choose(c, all, 3, 1, &fast, &ch), PC_OK);
    assert_int_equal(ch.best, PC_COST_ALLREDUCE);
    for (int m = 0; m < PC_COST_MODES; m++) {
        assert_true(ch.candidate[m]);
        assert_int_equal(ch.workers[m], m == PC_COST_ALLREDUCE ? 3 : 2);
        pc_cost_result_t r;
        assert_int_equal(
            pc_cost_predict(c, m, ch.workers[m], m == PC_COST_ALLREDUCE ? 0 : 1, &fast, &r), PC_OK);
        assert_close(ch.pred[m].iter, r.iter);
        assert_close(ch.rate[m], ch.workers[m] / r.iter);
        assert_true(ch.rate[m] <= ch.rate[ch.best]);
    }
    assert_int_equal(pc_cost_choose(c, all, 3, 1, &slow, &ch), PC_OK);
    assert_int_equal(ch.best, PC_COST_PS_DGC_PIPELINED);
    for (int m = 0; m < PC_COST_MODES; m++)
        assert_true(ch.rate[m] <= ch.rate[ch.best]);
    /* Only the candidates asked for; a mode without a layout is no candidate. */
    assert_int_equal(pc_cost_choose(c, 1u << PC_COST_PS_TOPK_PIPELINED, 5, 2, &slow, &ch), PC_OK);
    assert_int_equal(ch.best, PC_COST_PS_TOPK_PIPELINED);
    assert_false(ch.candidate[PC_COST_ALLREDUCE]);
    assert_int_equal(ch.workers[PC_COST_PS_TOPK_PIPELINED], 3);
    assert_int_equal(pc_cost_choose(c, all, 1, 1, &slow, &ch), PC_OK);
    assert_int_equal(ch.best, PC_COST_ALLREDUCE);
    assert_false(ch.candidate[PC_COST_PS_NONE]);
    assert_int_equal(pc_cost_choose(c, all, 4, 0, &slow, &ch), PC_OK); /* no servers */
    assert_int_equal(ch.best, PC_COST_ALLREDUCE);
    assert_int_equal(pc_cost_choose(c, all & ~1u, 1, 1, &slow, &ch), PC_EINVAL);
    assert_int_equal(pc_cost_choose(c, 1u << PC_COST_MODES, 3, 1, &slow, &ch), PC_EINVAL);
    assert_int_equal(pc_cost_choose(c, all, 0, 1, &slow, &ch), PC_EINVAL);
    assert_int_equal(pc_cost_choose(c, all, 3, -1, &slow, &ch), PC_EINVAL);
    assert_int_equal(pc_cost_choose(NULL, all, 3, 1, &slow, &ch), PC_EINVAL);
    assert_int_equal(pc_cost_choose(c, all, 3, 1, &slow, NULL), PC_EINVAL);
    pc_cost_destroy(c);
}

/* pc_cost_measure_codecs on tensors that are not adjacent, a small one grouped with its
 * predecessor: the plan's counts, each codec's bytes and density (no timing asserted). */
static void test_measure_codecs(void **state)
{
    (void)state;
    enum { A = 12000, B = 100, C = 20000 };
    float *ab = malloc(sizeof(float) * (A + B)), *abp = malloc(sizeof(float) * (A + B));
    float *cg = malloc(sizeof(float) * C), *cp = malloc(sizeof(float) * C);
    assert_true(ab && abp && cg && cp);
    for (int i = 0; i < A + B; i++)
        ab[i] = (float)((i * 7919) % 1000 - 500) * 1e-4f;
    for (int i = 0; i < C; i++)
        cg[i] = (float)((i * 104729) % 777 - 388) * 1e-3f;
    /* C is a 100 x 200 matrix (powersgd's, at rank 2: 20000 > 2 x 300 x 2); A's 12000 rows
     * are a vector's. */
    pc_plan_tensor_t t[3] = {{A, abp, ab, 0}, {B, abp + A, ab + A, 0}, {C, cp, cg, 100}};
    const size_t chunk_bytes = 4 * 16384, min_bytes = 4 * 12000;
    pc_plan_t *plan;
    pc_plan_tensor_t plain[3] = {t[0], t[1], t[2]};
    plain[2].whole_rows = 0; /* the element-wise codecs' plan */
    assert_int_equal(pc_plan_create(plain, 3, chunk_bytes / 4, 1, &plan), PC_OK);
    int nbig = 0;
    size_t most = 0;
    for (int i = 0; i < plan->nchunks; i++) {
        nbig += plan->chunks[i].n * 4 >= min_bytes;
        most = plan->chunks[i].n > most ? plan->chunks[i].n : most;
    }
    assert_true(plan->chunks[0].last_tensor == 1); /* B rides with A (a whole-tensor chunk) */
    assert_true(nbig > 0 && nbig < plan->nchunks);
    const char *texts[PC_COST_CODECS] = {"none", "topk:ratio=0.01", "topk:ratio=0.01,momentum=0",
                                         "dgc:ratio=0.001", "powersgd:rank=2"};
    pc_codec_spec_t specs[PC_COST_CODECS];
    char err[256];
    for (int q = 0; q < PC_COST_CODECS; q++)
        assert_int_equal(pc_codec_spec_parse(texts[q], &specs[q], err, sizeof(err)), PC_OK);
    pc_cost_codec_rate_t r[PC_COST_CODECS];
    pc_cost_lowrank_t lr;
    pc_cost_chunks_t ch;
    assert_int_equal(pc_cost_measure_codecs(t, 3, chunk_bytes, min_bytes, specs, 1, r, &lr, &ch,
                                            err, sizeof(err)),
                     PC_OK);
    assert_int_equal(ch.nchunks, plan->nchunks);
    assert_int_equal(ch.ncompressed, nbig);
    assert_int_equal(ch.elements, A + B + C);
    assert_int_equal(ch.largest, most);
    assert_close(r[PC_COST_CODEC_NONE].bytes, 4.0);
    assert_close(r[PC_COST_CODEC_NONE].density, 1.0);
    assert_true(fabs(r[PC_COST_CODEC_TOPK].density - 0.01) < 1e-3);
    assert_true(fabs(r[PC_COST_CODEC_TOPK_EF].density - 0.01) < 1e-3);
    assert_true(r[PC_COST_CODEC_DGC].density < 0.01);
    for (int q = 0; q < PC_COST_CODECS; q++)
        assert_true(r[q].compress > 0 && isfinite(r[q].compress));
    /* powersgd: the one matrix, its factors' bytes (2 x (100 + 200) floats per 20000). */
    assert_int_equal(ch.nmatrices, 1);
    assert_int_equal(lr.spec.id, PC_CODEC_POWERSGD);
    assert_close(r[PC_COST_CODEC_POWERSGD].bytes, 4.0 * 2 * 300 / C);
    assert_true(lr.round2 > 0 && lr.finish > 0 && lr.step > 0 && lr.ortho > 0);
    /* No matrix (its rows cleared; or under --compress-min-bytes): zero rates. */
    t[2].whole_rows = 0;
    assert_int_equal(pc_cost_measure_codecs(t, 3, chunk_bytes, min_bytes, specs, 1, r, &lr, &ch,
                                            err, sizeof(err)),
                     PC_OK);
    assert_int_equal(ch.nmatrices, 0);
    assert_true(r[PC_COST_CODEC_POWERSGD].compress == 0 && lr.round2 == 0 && lr.step == 0);
    assert_close(r[PC_COST_CODEC_POWERSGD].density, 1.0);
    t[2].whole_rows = 100;
    assert_int_equal(pc_cost_measure_codecs(t, 3, chunk_bytes, 4 * C + 4, specs, 1, r, &lr, &ch,
                                            err, sizeof(err)),
                     PC_OK);
    assert_int_equal(ch.nmatrices, 0);
    /* Rows that do not divide the tensor; pc_cost_measure_lowrank's own refusals. */
    t[2].whole_rows = 7;
    assert_int_equal(pc_cost_measure_codecs(t, 3, chunk_bytes, min_bytes, specs, 1, r, &lr, &ch,
                                            err, sizeof(err)),
                     PC_EINVAL);
    assert_non_null(strstr(err, "tensor 2: 7 rows do not divide its 20000 elements"));
    t[2].whole_rows = 100;
    const float *gm[1] = {cg};
    size_t mn[1] = {C}, mr[1] = {100}, bad_rows[1] = {1};
    assert_int_equal(pc_cost_measure_lowrank(&specs[PC_COST_CODEC_POWERSGD], gm, mn, mr, 1, 2,
                                             &r[0], &lr, err, sizeof(err)),
                     PC_OK);
    assert_int_equal(pc_cost_measure_lowrank(&specs[PC_COST_CODEC_POWERSGD], gm, mn, bad_rows, 1, 1,
                                             &r[0], &lr, err, sizeof(err)),
                     PC_EINVAL);
    assert_non_null(strstr(err, "matrix 0 (20000 elements, 1 rows) does not fit rank 2"));
    assert_int_equal(pc_cost_measure_lowrank(&specs[PC_COST_CODEC_TOPK], gm, mn, mr, 1, 1, &r[0],
                                             &lr, err, sizeof(err)),
                     PC_EINVAL);
    assert_int_equal(pc_cost_measure_lowrank(&specs[PC_COST_CODEC_POWERSGD], gm, mn, mr, 0, 1,
                                             &r[0], &lr, err, sizeof(err)),
                     PC_EINVAL);
    cg[5] = NAN; /* a non-finite gradient: the codec's PC_ERANGE, named */
    assert_int_equal(pc_cost_measure_lowrank(&specs[PC_COST_CODEC_POWERSGD], gm, mn, mr, 1, 1,
                                             &r[0], &lr, err, sizeof(err)),
                     PC_ERANGE);
    assert_non_null(strstr(err, "NaN or infinite"));
    /* Rejected: no tensors, a tensor without gradient, chunks under a float, no reps. */
    assert_int_equal(pc_cost_measure_codecs(t, 0, chunk_bytes, min_bytes, specs, 1, r, &lr, &ch,
                                            err, sizeof(err)),
                     PC_EINVAL);
    assert_int_equal(
        pc_cost_measure_codecs(t, 3, 2, min_bytes, specs, 1, r, &lr, &ch, err, sizeof(err)),
        PC_EINVAL);
    assert_int_equal(pc_cost_measure_codecs(t, 3, chunk_bytes, min_bytes, specs, 0, r, &lr, &ch,
                                            err, sizeof(err)),
                     PC_EINVAL);
    t[2].grad = NULL;
    assert_int_equal(pc_cost_measure_codecs(t, 3, chunk_bytes, min_bytes, specs, 1, r, &lr, &ch,
                                            err, sizeof(err)),
                     PC_EINVAL);
    assert_non_null(strstr(err, "tensor 2"));
    pc_plan_destroy(plan);
    free(ab);
    free(abp);
    free(cg);
    free(cp);
}

/* A pool of compressor threads (pc_cost_predict_pool): N = 1 is pc_cost_predict bit for bit;
 * the pipelined compressor's time divides by the speed-up 1 + (N - 1) e (one chunk by hand:
 * it leaves 1 ms earlier with two threads); more threads are never slower; the busy time
 * and the CPU time; pc_cost_pool_size's least N that keeps up with the backward pass, at
 * perfect and at half efficiency, capped; the refusals (N out of range, a pool for the
 * inline mode or the allreduce, an efficiency outside [0, 1]). */
static void test_pool(void **state)
{
    (void)state;
    assert_close(pc_cost_pool_speedup(1, 0.5), 1.0);
    assert_close(pc_cost_pool_speedup(4, 0), 4.0);
    assert_close(pc_cost_pool_speedup(4, 0.5), 2.5);
    assert_true(pc_cost_mode_pooled(PC_COST_PS_TOPK_PIPELINED) &&
                pc_cost_mode_pooled(PC_COST_PS_POWERSGD_PIPELINED) &&
                pc_cost_mode_pooled(PC_COST_PS_NONE));
    assert_false(pc_cost_mode_pooled(PC_COST_PS_TOPK_INLINE) ||
                 pc_cost_mode_pooled(PC_COST_ALLREDUCE) || pc_cost_mode_pooled(PC_COST_MODES));
    double fwd = 0.010, bwd = 0.020;
    size_t n = 1000000;
    pc_cost_t *c = make(base_cfg(), 1, &fwd, &bwd, &n);
    pc_cost_result_t one, r;
    for (int m = 0; m < PC_COST_MODES; m++) { /* N = 1: the same prediction, bit for bit */
        int W = 2, S = m == PC_COST_ALLREDUCE ? 0 : 1;
        assert_int_equal(pc_cost_predict(c, (pc_cost_mode_t)m, W, S, NULL, &one), PC_OK);
        assert_int_equal(pc_cost_predict_pool(c, (pc_cost_mode_t)m, W, S, NULL, 1, &r), PC_OK);
        assert_true(one.iter == r.iter && one.compute == r.compute && one.exposed == r.exposed &&
                    one.compress == r.compress && one.comm_busy == r.comm_busy &&
                    one.server_busy == r.server_busy && one.bytes_up == r.bytes_up &&
                    one.bytes_down == r.bytes_down && one.nchunks == r.nchunks &&
                    one.servers_used == r.servers_used);
        assert_int_equal(r.compressors, 1);
        assert_true(r.compress_busy == r.compress && r.backward == bwd);
    }
    /* One chunk, top-k pipelined: 2 ms of compression after the 20 ms backward; two threads
     * send it 1 ms earlier, and every later step follows. */
    assert_int_equal(pc_cost_predict(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, &one), PC_OK);
    assert_int_equal(pc_cost_predict_pool(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 2, &r), PC_OK);
    assert_close(one.iter - r.iter, 1e-3);
    assert_close(r.compress, 2e-3); /* the CPU time stays */
    assert_close(r.compress_busy, 1e-3);
    assert_int_equal(r.compressors, 2);
    /* Refusals. */
    assert_int_equal(pc_cost_predict_pool(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 0, &r),
                     PC_EINVAL);
    assert_int_equal(pc_cost_predict_pool(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL,
                                          PC_COST_MAX_COMPRESSORS + 1, &r),
                     PC_EINVAL);
    assert_int_equal(pc_cost_predict_pool(c, PC_COST_PS_TOPK_INLINE, 2, 1, NULL, 2, &r), PC_EINVAL);
    assert_int_equal(pc_cost_predict_pool(c, PC_COST_ALLREDUCE, 2, 0, NULL, 2, &r), PC_EINVAL);
    pc_cost_destroy(c);

    /* Three layers, several chunks each: more threads never slower (the one-round modes:
     * powersgd's compressor picks by arrival, pc_cost.h), the busy time falls as 1/N,
     * powersgd's rounds too. */
    double f3[3] = {0.001, 0.002, 0.001}, b3[3] = {0.002, 0.003, 0.001};
    size_t n3[3] = {3000000, 2000000, 1000000}, rows[3] = {3000, 0, 1000};
    pc_cost_cfg_t cfg = base_cfg();
    cfg.chunk_bytes = 4 << 20;
    c = make_rows(cfg, 3, f3, b3, n3, rows);
    const pc_cost_mode_t pooled[] = {PC_COST_PS_TOPK_PIPELINED, PC_COST_PS_DGC_PIPELINED,
                                     PC_COST_PS_POWERSGD_PIPELINED, PC_COST_PS_NONE};
    for (size_t i = 0; i < sizeof(pooled) / sizeof(pooled[0]); i++) {
        double prev = INFINITY;
        for (int N = 1; N <= 16; N *= 2) {
            assert_int_equal(pc_cost_predict_pool(c, pooled[i], 2, 1, NULL, N, &r), PC_OK);
            assert_true(r.iter <= prev || pooled[i] == PC_COST_PS_POWERSGD_PIPELINED);
            assert_close(r.compress_busy, r.compress / N);
            prev = r.iter;
        }
    }
    pc_cost_destroy(c);

    /* pc_cost_pool_size: 2 ms of compression against a 0.6 ms backward needs 4 threads
     * (3 give 0.67 ms); at half efficiency 6 (speed-ups 3 and 3.5); capped at 2, it says 2;
     * the inline mode 1. */
    bwd = 0.0006;
    c = make(base_cfg(), 1, &fwd, &bwd, &n);
    int N = 0;
    assert_int_equal(pc_cost_pool_size(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 16, &N, &r),
                     PC_OK);
    assert_int_equal(N, 4);
    assert_true(r.compress_busy <= r.backward && r.compressors == 4);
    assert_int_equal(pc_cost_predict_pool(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 3, &one),
                     PC_OK);
    assert_true(one.compress_busy > one.backward);
    assert_int_equal(pc_cost_pool_size(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 2, &N, &r), PC_OK);
    assert_int_equal(N, 2);
    assert_true(r.compress_busy > r.backward);
    assert_int_equal(pc_cost_pool_size(c, PC_COST_PS_TOPK_INLINE, 2, 1, NULL, 16, &N, &r), PC_OK);
    assert_int_equal(N, 1);
    assert_int_equal(pc_cost_pool_size(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 0, &N, &r),
                     PC_EINVAL);
    assert_int_equal(pc_cost_pool_size(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 4, NULL, &r),
                     PC_EINVAL);
    pc_cost_destroy(c);
    cfg = base_cfg();
    cfg.pool_efficiency = 0.5;
    c = make(cfg, 1, &fwd, &bwd, &n);
    assert_int_equal(pc_cost_pool_size(c, PC_COST_PS_TOPK_PIPELINED, 2, 1, NULL, 16, &N, &r),
                     PC_OK);
    assert_int_equal(N, 6);
    assert_close(r.compress_busy, 2e-3 / 3.5);
    pc_cost_destroy(c);
    /* An efficiency outside [0, 1] makes no model. */
    pc_cost_layer_t layer = {fwd, bwd};
    pc_plan_tensor_t t = {.n = n};
    int tl = 0;
    const double bad[] = {-0.1, 1.5, NAN};
    for (int i = 0; i < 3; i++) {
        cfg = base_cfg();
        cfg.layers = &layer;
        cfg.nlayers = 1;
        cfg.tensors = &t;
        cfg.tensor_layer = &tl;
        cfg.ntensors = 1;
        cfg.pool_efficiency = bad[i];
        c = NULL;
        assert_int_equal(pc_cost_create(&cfg, &c), PC_EINVAL);
        assert_null(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formulas),
        cmocka_unit_test(test_allreduce_by_hand),
        cmocka_unit_test(test_ps_by_hand),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_plan_and_min_bytes),
        cmocka_unit_test(test_monotone_bandwidth),
        cmocka_unit_test(test_allreduce_grows_with_workers),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_powersgd_by_hand),
        cmocka_unit_test(test_powersgd_plan),
        cmocka_unit_test(test_powersgd_overlap),
        cmocka_unit_test(test_powersgd_bounds),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_measure),
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_measure_codecs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
