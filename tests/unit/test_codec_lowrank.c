/* test_codec_lowrank: the powersgd codec (src/codec/codec_lowrank.c): its spec, which chunks
 * are matrices, one worker's two rounds against the products done by hand (P_w = M Q,
 * Q_w = M^T P^, residual = M - P^ Q^T), a rank-r matrix passed whole, the warm-up's dense
 * step, the order of the rounds, non-finite gradients, the receiver's checks of the
 * factor messages, and round 1's product made by the fold or by round 1 itself alike. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_philox.h"

static float *rand_floats(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    pc_philox_t g;
    pc_philox_init(&g, seed, 7, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = 2.0f * pc_philox_uniform(pc_philox_next(&g)) - 1.0f;
    return x;
}

static pc_codec_t *make(const char *text, pc_codec_spec_t *spec)
{
    char err[256];
    assert_int_equal(pc_codec_spec_parse(text, spec, err, sizeof(err)), PC_OK);
    spec->seed = 42;
    pc_codec_t *c;
    assert_int_equal(pc_codec_create(spec, &c), PC_OK);
    return c;
}

/* The factor of a message: its header checked by the receiver's rules. */
static void read_factor(const pc_codec_t *c, const uint8_t *msg, size_t len, int round,
                        uint32_t chunk, uint32_t n, uint32_t entries, float *out)
{
    pc_codec_expect_t want = {
        .chunk = chunk, .n = n, .iteration = 3, .round = round, .entries = entries};
    memset(out, 0, sizeof(float) * entries);
    char err[256] = "";
    assert_int_equal(pc_codec_decode_add(c, msg, len, &want, 1.0f, out, NULL, err, sizeof(err)),
                     PC_OK);
}

/* pc_codec_lowrank_finish's rows, gathered: each row once, in order. */
typedef struct rows_seen {
    float *u; /* rows x cols */
    size_t cols, next;
} rows_seen_t;

static void take_row(void *ud, size_t i, const float *update)
{
    rows_seen_t *s = ud;
    assert_int_equal(i, s->next++);
    memcpy(s->u + i * s->cols, update, sizeof(float) * s->cols);
}

static void test_spec(void **state)
{
    (void)state;
    pc_codec_spec_t s;
    char err[256], buf[256];
    assert_int_equal(pc_codec_spec_parse("powersgd", &s, err, sizeof(err)), PC_OK);
    assert_int_equal(s.id, PC_CODEC_POWERSGD);
    assert_int_equal(s.rank, 1);
    assert_true(s.ef);
    assert_int_equal(s.warmup, 0);
    assert_true(s.min_gain == 2.0);
    assert_int_equal(
        pc_codec_spec_parse("powersgd:rank=4,warmup=10,ef=off,min-rank-gain=3", &s, err, 256),
        PC_OK);
    assert_int_equal(s.rank, 4);
    assert_int_equal(s.warmup, 10);
    assert_false(s.ef);
    assert_true(s.min_gain == 3.0);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "powersgd:rank=4,warmup=10,ef=off,min-rank-gain=3");
    pc_codec_spec_t t;
    assert_int_equal(pc_codec_spec_parse(buf, &t, err, sizeof(err)), PC_OK);
    assert_int_equal(t.rank, 4);
    const char *bad[] = {"powersgd:rank=0",    "powersgd:rank=9",
                         "powersgd:rank=x",    "powersgd:min-rank-gain=0.5",
                         "powersgd:ratio=0.1", "powersgd:ef=maybe"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(pc_codec_spec_parse(bad[i], &s, err, sizeof(err)), PC_EUSAGE);
        assert_non_null(strstr(err, "powersgd"));
    }
    assert_int_equal(pc_codec_spec_parse("topk:rank=2", &s, err, sizeof(err)), PC_EUSAGE);
}

static void test_fits(void **state)
{
    (void)state;
    pc_codec_spec_t s;
    pc_codec_t *c = make("powersgd:rank=2", &s);
    assert_true(pc_codec_lowrank_fits(&s, 64, 64 * 64));
    assert_false(pc_codec_lowrank_fits(&s, 1, 4096));         /* a vector */
    assert_false(pc_codec_lowrank_fits(&s, 64, 64 * 64 + 1)); /* rows do not divide n */
    assert_false(pc_codec_lowrank_fits(&s, 4, 8));            /* (4 + 2) x 2 x 2 > 8 */
    /* torch's _should_compress: (rows + cols) r gain < n, strictly. */
    s.rank = 1;
    assert_false(pc_codec_lowrank_fits(&s, 4, 16)); /* (4 + 4) x 1 x 2 = 16: no */
    assert_true(pc_codec_lowrank_fits(&s, 4, 20));  /* (4 + 5) x 1 x 2 = 18 < 20 */
    s.rank = 2;
    s.min_gain = 1.0;
    assert_false(pc_codec_lowrank_fits(&s, 4, 4)); /* 2 x 2 at rank 2 gains nothing */
    s.rank = 8;
    assert_false(pc_codec_lowrank_fits(&s, 4, 400)); /* rank above the rows */
    pc_codec_spec_t topk;
    assert_int_equal(pc_codec_spec_parse("topk", &topk, NULL, 0), PC_OK);
    assert_false(pc_codec_lowrank_fits(&topk, 64, 4096));
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create_matrix(c, 0, 4, 8, &st), PC_EINVAL);
    assert_int_equal(pc_codec_state_create_matrix(c, 0, 64, 4096, &st), PC_OK);
    assert_int_equal(pc_codec_state_rows(st), 64);
    uint8_t out[64];
    size_t len;
    float *one = rand_floats(1, 1);
    assert_int_equal(pc_codec_compress(c, st, one, 0, out, sizeof(out), &len), PC_EINVAL);
    free(one);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
}

/* One worker's step by hand in double: P = M Q, P^ from the module's Gram-Schmidt,
 * Q_w = M^T P^, residual = M - P^ Q_w^T. */
static void test_rounds(void **state)
{
    (void)state;
    const size_t rows = 24, cols = 20, n = rows * cols;
    const int r = 2;
    pc_codec_spec_t s;
    pc_codec_t *c = make("powersgd:rank=2", &s);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create_matrix(c, 5, rows, n, &st), PC_OK);
    float q0[20 * 2];
    memcpy(q0, pc_codec_state_lowrank_q(st), sizeof(q0));
    /* Q starts orthonormal. */
    for (int a = 0; a < r; a++)
        for (int b = 0; b < r; b++) {
            double d = 0;
            for (size_t j = 0; j < cols; j++)
                d += (double)q0[j * r + a] * q0[j * r + b];
            assert_true(fabs(d - (a == b)) < 1e-5);
        }
    float *g = rand_floats(n, 3);
    size_t cap = pc_codec_max_bytes(c, n), len;
    uint8_t *msg = malloc(cap);
    assert_int_equal(pc_codec_lowrank_q(c, st, 3, msg, cap, &len), PC_EINVAL); /* not folded */
    assert_int_equal(pc_codec_fold(c, st, g), PC_OK);
    assert_int_equal(pc_codec_lowrank_q(c, st, 3, msg, cap, &len), PC_EINVAL); /* round 1 first */
    assert_int_equal(pc_codec_lowrank_p(c, st, 3, msg, cap, &len), PC_OK);
    assert_int_equal(len, 40 + 4 * rows * r);
    float p[24 * 2];
    read_factor(c, msg, len, 1, 5, (uint32_t)n, (uint32_t)(rows * r), p);
    for (size_t i = 0; i < rows; i++)
        for (int k = 0; k < r; k++) {
            double want = 0;
            for (size_t j = 0; j < cols; j++)
                want += (double)g[i * cols + j] * q0[j * r + k];
            assert_true(fabs(p[i * r + k] - want) < 1e-4);
        }
    /* The receiver's checks: wrong round, wrong entries, no round. */
    pc_codec_expect_t want = {
        .chunk = 5, .n = (uint32_t)n, .iteration = 3, .round = 2, .entries = (uint32_t)(cols * r)};
    char err[256];
    assert_int_equal(pc_codec_validate(c, msg, len, &want, NULL, err, sizeof(err)), PC_EFORMAT);
    want.round = 1;
    want.entries = 7;
    assert_int_equal(pc_codec_validate(c, msg, len, &want, NULL, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "round-1 factor"));
    want.round = 0;
    want.entries = (uint32_t)(rows * r);
    assert_int_equal(pc_codec_validate(c, msg, len, &want, NULL, err, sizeof(err)), PC_EFORMAT);
    want.round = 1;
    msg[len - 1] = 0x7f, msg[len - 2] = 0x80; /* the last value becomes +inf */
    msg[len - 3] = 0, msg[len - 4] = 0;
    assert_int_equal(pc_codec_validate(c, msg, len, &want, NULL, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "not finite"));
    /* The server: P^ = orth(P) (one worker). */
    double work[24 * 2];
    assert_int_equal(pc_lowrank_orthonormalise(p, rows, r, work), PC_OK);
    memcpy(pc_codec_state_lowrank_phat(st), p, sizeof(p));
    assert_int_equal(pc_codec_lowrank_finish(c, st, q0, NULL, NULL), PC_EINVAL); /* round 2 first */
    assert_int_equal(pc_codec_lowrank_q(c, st, 3, msg, cap, &len), PC_OK);
    float qw[20 * 2];
    read_factor(c, msg, len, 2, 5, (uint32_t)n, (uint32_t)(cols * r), qw);
    for (size_t j = 0; j < cols; j++)
        for (int k = 0; k < r; k++) {
            double w2 = 0;
            for (size_t i = 0; i < rows; i++)
                w2 += (double)g[i * cols + j] * p[i * r + k];
            assert_true(fabs(qw[j * r + k] - w2) < 1e-4);
        }
    rows_seen_t seen = {.u = malloc(sizeof(float) * n), .cols = cols};
    assert_non_null(seen.u);
    assert_int_equal(pc_codec_lowrank_finish(c, st, qw, take_row, &seen), PC_OK);
    assert_int_equal(seen.next, rows);
    /* Error feedback: M = P^ Q^T + residual, exactly as the rows handed out (the bits
     * pc_lowrank_expand makes, which the server's step uses), and Q is the aggregate now. */
    const float *res = pc_codec_state_residual(st);
    float *u = malloc(sizeof(float) * n), *ework = malloc(sizeof(float) * cols * (r + 1));
    assert_int_equal(pc_lowrank_expand(u, rows, cols, p, qw, r, 1.0f, 0.0f, ework), PC_OK);
    assert_memory_equal(u, seen.u, sizeof(float) * n);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            double a = 0;
            for (int k = 0; k < r; k++)
                a += (double)p[i * r + k] * qw[j * r + k];
            assert_true(fabs(a - u[i * cols + j]) < 1e-5);
            assert_true(res[i * cols + j] == g[i * cols + j] - u[i * cols + j]);
        }
    free(u), free(ework), free(seen.u);
    assert_memory_equal(pc_codec_state_lowrank_q(st), qw, sizeof(qw));
    assert_int_equal(pc_codec_state_steps(st), 1);
    free(g);
    free(msg);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
}

/* A matrix of rank 1 at rank 1 passes whole in one step: the residual is (float) zero. */
static void test_rank_one_whole(void **state)
{
    (void)state;
    const size_t rows = 16, cols = 12, n = rows * cols;
    pc_codec_spec_t s;
    pc_codec_t *c = make("powersgd:rank=1", &s);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create_matrix(c, 0, rows, n, &st), PC_OK);
    float *u = rand_floats(rows, 8), *v = rand_floats(cols, 9), *m = malloc(n * sizeof(float));
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            m[i * cols + j] = u[i] * v[j];
    size_t cap = pc_codec_max_bytes(c, n), len;
    uint8_t *msg = malloc(cap);
    float p[16], q[12];
    double work[16];
    assert_int_equal(pc_codec_fold(c, st, m), PC_OK);
    assert_int_equal(pc_codec_lowrank_p(c, st, 3, msg, cap, &len), PC_OK);
    read_factor(c, msg, len, 1, 0, (uint32_t)n, rows, p);
    assert_int_equal(pc_lowrank_orthonormalise(p, rows, 1, work), PC_OK);
    memcpy(pc_codec_state_lowrank_phat(st), p, sizeof(p));
    assert_int_equal(pc_codec_lowrank_q(c, st, 3, msg, cap, &len), PC_OK);
    read_factor(c, msg, len, 2, 0, (uint32_t)n, cols, q);
    assert_int_equal(pc_codec_lowrank_finish(c, st, q, NULL, NULL), PC_OK);
    const float *res = pc_codec_state_residual(st);
    for (size_t i = 0; i < n; i++)
        assert_true(fabsf(res[i]) < 1e-5f);
    free(u), free(v), free(m), free(msg);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
}

/* Warm-up: the first steps send M dense (a message of codec none) and leave no residual;
 * Q is the same on every state of one chunk and seed, another for another chunk. */
static void test_warmup_and_seeds(void **state)
{
    (void)state;
    const size_t rows = 8, cols = 8, n = 64;
    pc_codec_spec_t s;
    pc_codec_t *c = make("powersgd:rank=1,warmup=2", &s);
    assert_true(pc_codec_lowrank_warm(&s, 0));
    assert_true(pc_codec_lowrank_warm(&s, 1));
    assert_false(pc_codec_lowrank_warm(&s, 2));
    pc_codec_state_t *st, *twin, *other;
    assert_int_equal(pc_codec_state_create_matrix(c, 1, rows, n, &st), PC_OK);
    assert_int_equal(pc_codec_state_create_matrix(c, 1, rows, n, &twin), PC_OK);
    assert_int_equal(pc_codec_state_create_matrix(c, 2, rows, n, &other), PC_OK);
    assert_memory_equal(pc_codec_state_lowrank_q(st), pc_codec_state_lowrank_q(twin),
                        cols * sizeof(float));
    assert_memory_not_equal(pc_codec_state_lowrank_q(st), pc_codec_state_lowrank_q(other),
                            cols * sizeof(float));
    float *g = rand_floats(n, 4), dense[64] = {0};
    size_t cap = pc_codec_max_bytes(c, n), len;
    uint8_t *msg = malloc(cap);
    assert_int_equal(pc_codec_fold(c, st, g), PC_OK);
    assert_int_equal(pc_codec_lowrank_dense(c, st, 0, msg, cap, &len), PC_OK);
    pc_codec_spec_t none_spec;
    pc_codec_t *none;
    assert_int_equal(pc_codec_spec_parse("none", &none_spec, NULL, 0), PC_OK);
    assert_int_equal(pc_codec_create(&none_spec, &none), PC_OK);
    pc_codec_expect_t want = {.chunk = 1, .n = (uint32_t)n, .iteration = 0};
    char err[256];
    assert_int_equal(pc_codec_decode_add(none, msg, len, &want, 1.0f, dense, NULL, err, 256),
                     PC_OK);
    assert_memory_equal(dense, g, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        assert_true(pc_codec_state_residual(st)[i] == 0.0f);
    assert_int_equal(pc_codec_state_steps(st), 1);
    /* Non-finite: the fold says so, and so does round 1 after it. */
    g[5] = NAN;
    assert_int_equal(pc_codec_fold(c, st, g), PC_ERANGE);
    assert_int_equal(pc_codec_lowrank_p(c, st, 1, msg, cap, &len), PC_ERANGE);
    free(g), free(msg);
    pc_codec_destroy(none);
    pc_codec_state_destroy(st);
    pc_codec_state_destroy(twin);
    pc_codec_state_destroy(other);
    pc_codec_destroy(c);
}

/* The fold makes round 1's P_w in the same pass (pc_lowrank_fold_project) unless the step
 * is a warm-up one by the state's count, when round 1 makes it from the folded M: both
 * give the same message and residual, bit for bit, with error feedback and without; and a
 * product that overflows from a finite M is round 1's PC_ERANGE. */
static void test_fold_projects(void **state)
{
    (void)state;
    const size_t rows = 12, cols = 37, n = rows * cols;
    static const char *const specs[][2] = {
        {"powersgd:rank=3", "powersgd:rank=3,warmup=1"},
        {"powersgd:rank=3,ef=off", "powersgd:rank=3,ef=off,warmup=1"}};
    float *g = rand_floats(n, 9);
    for (int e = 0; e < 2; e++) {
        pc_codec_spec_t s;
        pc_codec_t *a = make(specs[e][0], &s), *b = make(specs[e][1], &s);
        pc_codec_state_t *sa, *sb;
        assert_int_equal(pc_codec_state_create_matrix(a, 2, rows, n, &sa), PC_OK);
        assert_int_equal(pc_codec_state_create_matrix(b, 2, rows, n, &sb), PC_OK);
        size_t cap = pc_codec_max_bytes(a, n), la, lb;
        uint8_t *ma = malloc(cap), *mb = malloc(cap);
        assert_non_null(ma), assert_non_null(mb);
        assert_int_equal(pc_codec_fold(a, sa, g), PC_OK);
        assert_int_equal(pc_codec_fold(b, sb, g), PC_OK); /* step 0 of 1 warm: no product */
        assert_int_equal(pc_codec_lowrank_p(a, sa, 0, ma, cap, &la), PC_OK);
        assert_int_equal(pc_codec_lowrank_p(b, sb, 0, mb, cap, &lb), PC_OK);
        assert_int_equal(la, lb);
        assert_memory_equal(ma, mb, la);
        if (e == 0)
            assert_memory_equal(pc_codec_state_residual(sa), pc_codec_state_residual(sb),
                                sizeof(float) * n);
        pc_codec_state_destroy(sa), pc_codec_state_destroy(sb);
        pc_codec_destroy(a), pc_codec_destroy(b);
        free(ma), free(mb);
    }
    /* Finite M, infinite product: the fold succeeds, round 1 says PC_ERANGE. */
    pc_codec_spec_t s;
    pc_codec_t *c = make("powersgd:rank=1", &s);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create_matrix(c, 0, rows, n, &st), PC_OK);
    for (size_t i = 0; i < n; i++)
        g[i] = 3e38f;
    float *q = pc_codec_state_lowrank_q(st);
    for (size_t j = 0; j < cols; j++)
        q[j] = 1.0f;
    size_t cap = pc_codec_max_bytes(c, n), len;
    uint8_t *msg = malloc(cap);
    assert_non_null(msg);
    assert_int_equal(pc_codec_fold(c, st, g), PC_OK);
    assert_int_equal(pc_codec_lowrank_p(c, st, 0, msg, cap, &len), PC_ERANGE);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    free(msg);
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec),
        cmocka_unit_test(test_fits),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_rank_one_whole),
        cmocka_unit_test(test_warmup_and_seeds),
        cmocka_unit_test(test_fold_projects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
