/* test_codec: every codec against a naive reference; the error-feedback invariant bit for
 * bit; DGC's selected count; random-k sender/receiver agreement; unbiasedness of qsgd and
 * terngrad by a bound that cannot pass by accident; spec parsing and its errors; and
 * malformed messages rejected without writing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_wire.h"

/* ---- helpers ------------------------------------------------------------------------- */

static pc_codec_t *make(const char *text, uint64_t seed)
{
    pc_codec_spec_t spec;
    char err[256];
    if (pc_codec_spec_parse(text, &spec, err, sizeof(err)) != PC_OK)
        fail_msg("spec '%s': %s", text, err);
    spec.seed = seed;
    pc_codec_t *c;
    assert_int_equal(pc_codec_create(&spec, &c), PC_OK);
    return c;
}

/* Heavy-tailed gradient-like values (magnitudes over many octaves, random signs). */
static void heavy(float *x, size_t n, uint64_t seed)
{
    pc_philox_t g;
    pc_philox_init(&g, seed, 99, 0);
    for (size_t i = 0; i < n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        x[i] = ((pc_philox_next(&g) & 1) ? -1e-3f : 1e-3f) * powf(u, -1.2f);
    }
}

static void uniformish(float *x, size_t n, uint64_t seed)
{
    pc_philox_t g;
    pc_philox_init(&g, seed, 98, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = pc_philox_uniform(pc_philox_next(&g)) - 0.5f;
}

typedef struct msg {
    uint8_t *buf;
    size_t len, cap;
} msg_t;

static msg_t compress(pc_codec_t *c, pc_codec_state_t *st, const float *g, uint64_t it)
{
    msg_t m;
    m.cap = pc_codec_max_bytes(c, pc_codec_state_n(st));
    m.buf = malloc(m.cap + 16);
    int rc = pc_codec_compress(c, st, g, it, m.buf, m.cap, &m.len);
    if (rc != PC_OK)
        fail_msg("compress: %s", pc_strerror(rc));
    assert_true(m.len <= m.cap);
    return m;
}

static float *decode(pc_codec_t *c, const msg_t *m, uint32_t chunk, size_t n, uint64_t it)
{
    float *d = calloc(n, sizeof(float));
    pc_codec_expect_t want = {.chunk = chunk, .n = (uint32_t)n, .iteration = it};
    char err[256];
    int rc = pc_codec_decode_add(c, m->buf, m->len, &want, 1.0f, d, NULL, err, sizeof(err));
    if (rc != PC_OK)
        fail_msg("decode: %s", err);
    return d;
}

/* ---- spec strings -------------------------------------------------------------------- */

static void expect_spec_error(const char *text, const char *msg)
{
    pc_codec_spec_t s;
    memset(&s, 0x5a, sizeof(s));
    pc_codec_spec_t before = s;
    char err[256] = "";
    assert_int_equal(pc_codec_spec_parse(text, &s, err, sizeof(err)), PC_EUSAGE);
    if (strcmp(err, msg) != 0)
        fail_msg("spec '%s': got \"%s\", want \"%s\"", text ? text : "(null)", err, msg);
    assert_memory_equal(&s, &before, sizeof(s)); /* untouched */
}

static void test_spec_parsing(void **state)
{
    (void)state;
    pc_codec_spec_t s;
    char err[256], buf[256];
    assert_int_equal(pc_codec_spec_parse("topk", &s, err, sizeof(err)), PC_OK);
    assert_int_equal(s.id, PC_CODEC_TOPK);
    assert_true(s.ratio == 0.01 && s.ef && s.values == PC_VALUES_FP32 && s.index == PC_INDEX_U32);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    /* Worker-side momentum (the momentum correction) by default for the sparsifiers. */
    assert_string_equal(buf, "topk:ratio=0.01,momentum=0.9,ef=on,values=fp32,index=u32");
    assert_true(pc_codec_worker_momentum(&s) == 0.9);
    assert_int_equal(pc_codec_spec_parse("topk:ratio=0.001,ef=off,values=fp16,index=delta", &s, err,
                                         sizeof(err)),
                     PC_OK);
    assert_true(s.ratio == 0.001 && !s.ef && s.values == PC_VALUES_FP16 &&
                s.index == PC_INDEX_DELTA);
    assert_true(s.momentum == 0.0); /* no residual to accumulate into: no momentum */
    assert_int_equal(pc_codec_spec_parse("randomk:momentum=0", &s, err, sizeof(err)), PC_OK);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "randomk:ratio=0.01,momentum=0,ef=on,values=fp32");
    assert_true(pc_codec_worker_momentum(&s) == 0.0);
    assert_true(s.momentum_given); /* given, even as 0 (pc_config_codec_momentum_off) */
    assert_false(s.warmup_given);
    assert_int_equal(pc_codec_spec_parse("topk:warmup=0", &s, err, sizeof(err)), PC_OK);
    assert_true(s.warmup_given); /* given, even as 0 (pc_config_codec_adam_warmup) */
    assert_int_equal(pc_codec_spec_parse("randomk:momentum=0", &s, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_codec_spec_parse("threshold", &s, err, sizeof(err)), PC_OK);
    assert_true(pc_codec_worker_momentum(&s) == 0.0); /* no momentum key */
    assert_int_equal(pc_codec_spec_parse("dgc", &s, err, sizeof(err)), PC_OK);
    assert_true(pc_codec_worker_momentum(&s) == 0.9);
    assert_false(s.momentum_given); /* the default */
    assert_false(s.warmup_given);
    assert_int_equal(pc_codec_spec_parse("dgc:ratio=0.001,sample=0.01,momentum=0.5,clip=2,warmup=4",
                                         &s, err, sizeof(err)),
                     PC_OK);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "dgc:ratio=0.001,sample=0.01,momentum=0.5,clip=2,warmup=4,"
                             "values=fp32,index=u32");
    /* topk's warmup (added later) is printed only when set: older spec strings stay. */
    assert_int_equal(pc_codec_spec_parse("topk:ratio=0.01", &s, err, sizeof(err)), PC_OK);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "topk:ratio=0.01,momentum=0.9,ef=on,values=fp32,index=u32");
    assert_int_equal(pc_codec_spec_parse("topk:ratio=0.01,warmup=30", &s, err, sizeof(err)), PC_OK);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "topk:ratio=0.01,momentum=0.9,warmup=30,ef=on,values=fp32,index=u32");
    /* dense= likewise (topk and dgc), before warmup; given, even as 0. */
    assert_int_equal(pc_codec_spec_parse("dgc:ratio=0.001,warmup=5,dense=20", &s, err, sizeof(err)),
                     PC_OK);
    assert_true(s.dense == 20 && s.dense_given && s.warmup == 5);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "dgc:ratio=0.001,sample=0.01,momentum=0.9,clip=0,dense=20,warmup=5,"
                             "values=fp32,index=u32");
    assert_int_equal(pc_codec_spec_parse("topk:dense=0", &s, err, sizeof(err)), PC_OK);
    assert_true(s.dense == 0 && s.dense_given);
    pc_codec_spec_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "topk:ratio=0.01,momentum=0.9,ef=on,values=fp32,index=u32");
    assert_int_equal(pc_codec_spec_parse("qsgd:levels=16", &s, err, sizeof(err)), PC_OK);
    assert_true(s.levels == 16 && !s.ef); /* unbiased: no error feedback by default */
    assert_int_equal(pc_codec_spec_parse("efsign", &s, err, sizeof(err)), PC_OK);
    assert_true(s.ef); /* biased: error feedback by default */
    const char *ok[] = {
        "none",     "fp16",           "fp16:ef=on",      "randomk:ratio=0.01", "threshold:tau=1e-3",
        "terngrad", "terngrad:ef=on", "qsgd:levels=127", "topk:ratio=1"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (pc_codec_spec_parse(ok[i], &s, err, sizeof(err)) != PC_OK)
            fail_msg("'%s' rejected: %s", ok[i], err);

    expect_spec_error("topkk", "unknown compressor 'topkk' (none, fp16, topk, dgc, randomk, "
                               "threshold, qsgd, terngrad, efsign, powersgd)");
    expect_spec_error("", "empty compressor spec");
    expect_spec_error(NULL, "empty compressor spec");
    expect_spec_error("topk:", "topk: ':' must be followed by options (key=value,...)");
    expect_spec_error("topk:ratoi=0.1", "topk: unknown option 'ratoi' (topk takes: ratio, "
                                        "momentum, warmup, dense, ef, values, index)");
    expect_spec_error("topk:levels=4", "topk: unknown option 'levels' (topk takes: ratio, "
                                       "momentum, warmup, dense, ef, values, index)");
    expect_spec_error("threshold:momentum=0.9",
                      "threshold: unknown option 'momentum' (threshold takes: tau, ef, values, "
                      "index)");
    expect_spec_error("topk:momentum=0.9,ef=off",
                      "topk: momentum=0.9 needs ef=on (the momentum correction accumulates into "
                      "the residual); drop one of the two");
    expect_spec_error("randomk:ef=off,momentum=0.5",
                      "randomk: momentum=0.5 needs ef=on (the momentum correction accumulates "
                      "into the residual); drop one of the two");
    expect_spec_error("topk:momentum=1", "topk: momentum=1 is out of range [0, 1)");
    expect_spec_error("none:ef=on", "none: unknown option 'ef' (none takes: no options)");
    expect_spec_error("dgc:ef=off", "dgc: unknown option 'ef' (dgc takes: ratio, sample, "
                                    "momentum, clip, warmup, dense, values, index)");
    expect_spec_error("topk:ratio=1.5",
                      "topk: ratio=1.5 is out of range (0, 1] (0 would send nothing)");
    expect_spec_error("topk:ratio=-0.1",
                      "topk: ratio=-0.1 is out of range (0, 1] (0 would send nothing)");
    expect_spec_error("topk:ratio=0",
                      "topk: ratio=0 is out of range (0, 1] (0 would send nothing)");
    expect_spec_error("dgc:ratio=0", "dgc: ratio=0 is out of range (0, 1] (0 would send nothing)");
    expect_spec_error("randomk:ratio=0.0",
                      "randomk: ratio=0.0 is out of range (0, 1] (0 would send nothing)");
    expect_spec_error("topk:ratio=abc", "topk: ratio=abc is not a finite number");
    expect_spec_error("topk:ratio=nan", "topk: ratio=nan is not a finite number");
    expect_spec_error("topk:ratio", "topk: option 'ratio' has no value (key=value)");
    expect_spec_error("topk:ratio=", "topk: option 'ratio' has an empty value");
    expect_spec_error("topk:ratio=0.1,ratio=0.2", "topk: option 'ratio' given twice");
    expect_spec_error("topk:ratio=0.1,", "topk: empty option in 'topk:ratio=0.1,'");
    expect_spec_error("topk:ratio=0.1,,ef=on", "topk: empty option in 'topk:ratio=0.1,,ef=on'");
    expect_spec_error("topk:ef=maybe", "topk: ef=maybe is not on or off");
    expect_spec_error("topk:values=fp8", "topk: values=fp8 is not fp32 or fp16");
    expect_spec_error("topk:index=varint", "topk: index=varint is not u32 or delta");
    expect_spec_error("dgc:sample=0", "dgc: sample=0 is out of range (0, 1]");
    expect_spec_error("dgc:momentum=1", "dgc: momentum=1 is out of range [0, 1)");
    expect_spec_error("dgc:clip=-1", "dgc: clip=-1 must be >= 0 (0 = off)");
    expect_spec_error("dgc:warmup=2.5", "dgc: warmup=2.5 is not an integer");
    expect_spec_error("dgc:dense=-1", "dgc: dense=-1 is out of range [0, 1000000000]");
    expect_spec_error("topk:dense=x", "topk: dense=x is not an integer");
    expect_spec_error("powersgd:dense=10",
                      "powersgd: unknown option 'dense' (powersgd takes: warmup, ef, rank, "
                      "min-rank-gain)");
    expect_spec_error("threshold:tau=0", "threshold: tau=0 must be > 0");
    expect_spec_error("qsgd:levels=0", "qsgd: levels=0 is out of range [1, 127]");
    expect_spec_error("qsgd:levels=128", "qsgd: levels=128 is out of range [1, 127]");
    assert_string_equal(pc_codec_name(PC_CODEC_EFSIGN), "efsign");
    assert_string_equal(pc_codec_name(99), "?");
}

/* ---- references and invariants ------------------------------------------------------- */

static int cmp_mag_idx(const void *a, const void *b, void *arg)
{
    const float *x = arg;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    float p = fabsf(x[i]), q = fabsf(x[j]);
    if (p != q)
        return p > q ? -1 : 1;
    return (i > j) - (i < j);
}

/* topk against sort-based selection, with ties; k = 0, 1, n. */
static void test_topk_reference(void **state)
{
    (void)state;
    const size_t n = 2000;
    float *g = malloc(sizeof(float) * n);
    uint32_t *ord = malloc(sizeof(uint32_t) * n);
    const char *specs[] = {"topk:ratio=0.05,ef=off", "topk:ratio=0.05,ef=off,index=delta",
                           "topk:ratio=0.0005,ef=off", "topk:ratio=1,ef=off"};
    for (int variant = 0; variant < 2; variant++) {
        heavy(g, n, 7);
        if (variant) /* ties: few distinct magnitudes */
            for (size_t i = 0; i < n; i++)
                g[i] = (float)((int)(fabsf(g[i]) * 100) % 4) * (g[i] < 0 ? -1.0f : 1.0f);
        for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
            pc_codec_t *c = make(specs[s], 1);
            pc_codec_state_t *st;
            assert_int_equal(pc_codec_state_create(c, 3, n, &st), PC_OK);
            msg_t m = compress(c, st, g, 11);
            float *d = decode(c, &m, 3, n, 11);
            size_t k = (size_t)ceil(pc_codec_spec(c)->ratio * (double)n);
            for (size_t i = 0; i < n; i++)
                ord[i] = (uint32_t)i;
            qsort_r(ord, n, sizeof(uint32_t), cmp_mag_idx, g);
            float *want = calloc(n, sizeof(float));
            for (size_t j = 0; j < k; j++)
                want[ord[j]] = g[ord[j]];
            /* Compared as numbers: adding -0.0 into a zero buffer leaves +0.0. */
            for (size_t i = 0; i < n; i++)
                if (d[i] != want[i])
                    fail_msg("%s (variant %d): element %zu decoded %g, sort-based top-k %g",
                             specs[s], variant, i, (double)d[i], (double)want[i]);
            pc_wire_header_t h;
            char err[256];
            assert_int_equal(pc_wire_header_read(m.buf, m.len, &h, err, sizeof(err)), PC_OK);
            assert_int_equal(h.entries, k);
            free(want);
            free(d);
            free(m.buf);
            pc_codec_state_destroy(st);
            pc_codec_destroy(c);
        }
    }
    free(g);
    free(ord);
}

/* sent + new residual == old residual + gradient, bit for bit, over several iterations. */
static void test_error_feedback_invariant(void **state)
{
    (void)state;
    const char *specs[] = {"topk:ratio=0.01,momentum=0",
                           "topk:ratio=0.01,values=fp16,index=delta,momentum=0",
                           "dgc:ratio=0.01,momentum=0",
                           "dgc:ratio=0.01,momentum=0,values=fp16",
                           "randomk:ratio=0.02,momentum=0",
                           "randomk:ratio=0.02,values=fp16,momentum=0",
                           "threshold:tau=0.01",
                           "threshold:tau=0.01,values=fp16,index=delta"};
    const size_t n = 5000;
    float *g = malloc(sizeof(float) * n), *before = malloc(sizeof(float) * n),
          *v = malloc(sizeof(float) * n);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        pc_codec_t *c = make(specs[s], 5);
        pc_codec_state_t *st;
        assert_int_equal(pc_codec_state_create(c, 0, n, &st), PC_OK);
        float *r = pc_codec_state_residual(st);
        assert_non_null(r);
        for (uint64_t it = 0; it < 5; it++) {
            heavy(g, n, 100 + it);
            memcpy(before, r, sizeof(float) * n);
            for (size_t i = 0; i < n; i++)
                v[i] = before[i] + g[i]; /* what the codec accumulates */
            msg_t m = compress(c, st, g, it);
            float *sent = decode(c, &m, 0, n, it);
            size_t nsent = 0;
            for (size_t i = 0; i < n; i++) {
                if (sent[i] + r[i] != v[i])
                    fail_msg("%s it %llu elem %zu: sent %a + residual %a != %a", specs[s],
                             (unsigned long long)it, i, (double)sent[i], (double)r[i],
                             (double)v[i]);
                nsent += sent[i] != 0;
            }
            assert_true(nsent > 0);
            free(sent);
            free(m.buf);
        }
        pc_codec_state_destroy(st);
        pc_codec_destroy(c);
    }
    free(g);
    free(before);
    free(v);
}

/* Momentum correction on the workers (topk, randomk with momentum > 0; dgc): with u' =
 * m * u + g computed here, sent + new residual == old residual + u' bit for bit, and u is
 * masked (0) exactly at the sent indices, u' elsewhere. */
static void test_momentum_correction(void **state)
{
    (void)state;
    const char *specs[] = {"topk:ratio=0.01",    "topk:ratio=0.01,momentum=0.5,values=fp16",
                           "randomk:ratio=0.02", "randomk:ratio=0.02,values=fp16",
                           "dgc:ratio=0.01",     "topk:ratio=0.01,index=delta,momentum=0.99"};
    const size_t n = 5000;
    float *g = malloc(sizeof(float) * n), *before = malloc(sizeof(float) * n),
          *u = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        pc_codec_t *c = make(specs[s], 5);
        float m = (float)pc_codec_spec(c)->momentum;
        assert_true(m > 0);
        pc_codec_state_t *st;
        assert_int_equal(pc_codec_state_create(c, 0, n, &st), PC_OK);
        float *r = pc_codec_state_residual(st), *mom = pc_codec_state_momentum(st);
        assert_non_null(r);
        assert_non_null(mom);
        size_t masked = 0;
        for (uint64_t it = 0; it < 6; it++) {
            heavy(g, n, 200 + it);
            memcpy(before, r, sizeof(float) * n);
            for (size_t i = 0; i < n; i++) {
                u[i] = m * mom[i] + g[i]; /* the codec's arithmetic, in its order */
                v[i] = before[i] + u[i];
            }
            msg_t msg = compress(c, st, g, it);
            float *sent = decode(c, &msg, 0, n, it);
            size_t nsent = 0;
            for (size_t i = 0; i < n; i++) {
                if (sent[i] + r[i] != v[i])
                    fail_msg("%s it %llu elem %zu: sent %a + residual %a != residual + u %a",
                             specs[s], (unsigned long long)it, i, (double)sent[i], (double)r[i],
                             (double)v[i]);
                bool was_sent = sent[i] != 0;
                nsent += was_sent;
                float want = was_sent ? 0.0f : u[i];
                if (memcmp(&mom[i], &want, sizeof(float)) != 0)
                    fail_msg("%s it %llu elem %zu: u %a, expected %a (%s)", specs[s],
                             (unsigned long long)it, i, (double)mom[i], (double)want,
                             was_sent ? "sent: masked" : "not sent");
                masked += was_sent && u[i] != 0;
            }
            assert_true(nsent > 0);
            free(sent);
            free(msg.buf);
        }
        assert_true(masked > 0); /* the mask did clear momentum */
        pc_codec_state_destroy(st);
        pc_codec_destroy(c);
    }
    free(g);
    free(before);
    free(u);
    free(v);
}

/* momentum=0 is the plain error-feedback codec: no momentum array, and every message is
 * the reference top-k (sort-based, ties to the lower index) of residual + gradient, with
 * the residual emptied exactly there, iteration after iteration; momentum=0 and ef=off
 * (momentum 0 by default then) are accepted, momentum > 0 without a residual is not. */
static void test_momentum_zero_is_plain(void **state)
{
    (void)state;
    const size_t n = 3000;
    float *g = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    uint32_t *ord = malloc(sizeof(uint32_t) * n);
    pc_codec_t *c = make("topk:ratio=0.01,momentum=0", 2);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 1, n, &st), PC_OK);
    assert_null(pc_codec_state_momentum(st));
    float *r = pc_codec_state_residual(st);
    size_t k = (size_t)ceil(0.01 * (double)n);
    for (uint64_t it = 0; it < 5; it++) {
        heavy(g, n, 40 + it);
        for (size_t i = 0; i < n; i++) {
            v[i] = r[i] + g[i];
            ord[i] = (uint32_t)i;
        }
        qsort_r(ord, n, sizeof(uint32_t), cmp_mag_idx, v);
        msg_t m = compress(c, st, g, it);
        float *d = decode(c, &m, 1, n, it);
        float *want = calloc(n, sizeof(float));
        for (size_t j = 0; j < k; j++) {
            want[ord[j]] = v[ord[j]];
            v[ord[j]] = 0.0f;
        }
        assert_memory_equal(d, want, sizeof(float) * n);
        assert_memory_equal(r, v, sizeof(float) * n);
        free(want);
        free(d);
        free(m.buf);
    }
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    c = make("randomk:momentum=0", 2);
    assert_int_equal(pc_codec_state_create(c, 1, n, &st), PC_OK);
    assert_null(pc_codec_state_momentum(st));
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    c = make("topk:ef=off", 2);
    assert_int_equal(pc_codec_state_create(c, 1, n, &st), PC_OK);
    assert_null(pc_codec_state_momentum(st));
    assert_null(pc_codec_state_residual(st));
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    pc_codec_spec_t spec;
    assert_int_equal(pc_codec_spec_parse("topk:ef=off", &spec, NULL, 0), PC_OK);
    spec.momentum = 0.9; /* set by hand: no residual to accumulate into */
    assert_int_equal(pc_codec_create(&spec, &c), PC_EINVAL);
    free(g);
    free(v);
    free(ord);
}

static void test_dense_codecs(void **state)
{
    (void)state;
    const size_t n = 777;
    float *g = malloc(sizeof(float) * n);
    uniformish(g, n, 3);
    g[5] = 1e6f; /* saturates in fp16 */
    pc_codec_t *c = make("none", 0);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 9, n, &st), PC_OK);
    assert_null(pc_codec_state_residual(st));
    msg_t m = compress(c, st, g, 1);
    assert_int_equal(m.len, PC_WIRE_HEADER_BYTES + 4 * n);
    float *d = decode(c, &m, 9, n, 1);
    assert_memory_equal(d, g, sizeof(float) * n);
    free(d);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);

    c = make("fp16", 0);
    assert_int_equal(pc_codec_state_create(c, 9, n, &st), PC_OK);
    m = compress(c, st, g, 1);
    assert_int_equal(m.len, PC_WIRE_HEADER_BYTES + 2 * n);
    d = decode(c, &m, 9, n, 1);
    for (size_t i = 0; i < n; i++) {
        float x = g[i] > 65504.0f ? 65504.0f : g[i];
        assert_true(d[i] == pc_wire_f16_to_f32(pc_wire_f32_to_f16(x)));
    }
    free(d);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);

    /* efsign: +-mean|v| per element, residual = v - sent. */
    c = make("efsign", 0);
    assert_int_equal(pc_codec_state_create(c, 1, n, &st), PC_OK);
    m = compress(c, st, g, 0);
    d = decode(c, &m, 1, n, 0);
    double mean = 0;
    for (size_t i = 0; i < n; i++)
        mean += fabs((double)g[i]);
    float fm = (float)(mean / (double)n);
    for (size_t i = 0; i < n; i++) {
        assert_true(d[i] == (g[i] < 0 ? -fm : fm));
        assert_true(pc_codec_state_residual(st)[i] == g[i] - d[i]);
    }
    assert_int_equal(m.len, PC_WIRE_HEADER_BYTES + (n + 7) / 8);
    free(d);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    free(g);
}

/* Mean of many decodes of the same vector approaches the vector: per element the standard
 * error is at most bound / sqrt(trials); we allow 6 standard errors. A codec that returned
 * the input exactly would pass too, so we also require the single decodes to be coarse. */
static void check_unbiased(const char *spec, float per_draw_sd_bound_factor)
{
    const size_t n = 64;
    const int trials = 20000;
    float g[64];
    uniformish(g, n, 17);
    double norm = 0, maxabs = 0;
    for (size_t i = 0; i < n; i++) {
        norm += (double)g[i] * g[i];
        maxabs = fabs(g[i]) > maxabs ? fabs(g[i]) : maxabs;
    }
    norm = sqrt(norm);
    pc_codec_t *c = make(spec, 1234);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 2, n, &st), PC_OK);
    double sum[64] = {0};
    int inexact = 0;
    for (int t = 0; t < trials; t++) {
        msg_t m = compress(c, st, g, (uint64_t)t);
        float *d = decode(c, &m, 2, n, (uint64_t)t);
        for (size_t i = 0; i < n; i++) {
            sum[i] += d[i];
            inexact += d[i] != g[i];
        }
        free(d);
        free(m.buf);
    }
    /* qsgd: sd <= norm / (2 s); terngrad: sd <= max|g| / 2 (Bernoulli scaled by the max). */
    double sd = per_draw_sd_bound_factor * (strncmp(spec, "qsgd", 4) == 0 ? norm : maxabs);
    double bound = 6 * sd / sqrt((double)trials);
    for (size_t i = 0; i < n; i++)
        if (fabs(sum[i] / trials - g[i]) > bound)
            fail_msg("%s: element %zu mean %g vs %g (bound %g)", spec, i, sum[i] / trials,
                     (double)g[i], bound);
    assert_true(inexact > trials * (int)n / 2);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
}

static void test_qsgd_terngrad_unbiased(void **state)
{
    (void)state;
    check_unbiased("qsgd:levels=4", 1.0f / (2 * 4));
    check_unbiased("qsgd:levels=1", 1.0f / 2);
    check_unbiased("terngrad", 0.5f);
}

/* Deterministic: the same inputs give the same bytes; another iteration another draw. */
static void test_determinism(void **state)
{
    (void)state;
    const char *specs[] = {"topk",   "dgc:ratio=0.01", "randomk", "qsgd", "terngrad",
                           "efsign", "threshold",      "fp16",    "none"};
    const size_t n = 3000;
    float *g = malloc(sizeof(float) * n);
    heavy(g, n, 4);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        msg_t a[2];
        for (int rep = 0; rep < 2; rep++) {
            pc_codec_t *c = make(specs[s], 77);
            pc_codec_state_t *st;
            assert_int_equal(pc_codec_state_create(c, 4, n, &st), PC_OK);
            a[rep] = compress(c, st, g, 9);
            pc_codec_state_destroy(st);
            pc_codec_destroy(c);
        }
        assert_int_equal(a[0].len, a[1].len);
        assert_memory_equal(a[0].buf, a[1].buf, a[0].len);
        free(a[0].buf);
        free(a[1].buf);
    }
    free(g);
}

/* fold + compress_folded == compress: same bytes, same state, for every codec; the
 * gradient buffer may be overwritten between the two. */
static void test_fold_then_compress(void **state)
{
    (void)state;
    const char *specs[] = {"none",
                           "fp16",
                           "fp16:ef=on",
                           "topk",
                           "topk:momentum=0",
                           "topk:ef=off",
                           "dgc:ratio=0.01",
                           "dgc:clip=1,warmup=2",
                           "randomk",
                           "randomk:momentum=0",
                           "randomk:ef=off",
                           "threshold",
                           "qsgd",
                           "qsgd:ef=on",
                           "terngrad",
                           "efsign"};
    const size_t n = 70000; /* large enough for the sampled top-k path */
    float *g = malloc(sizeof(float) * n), *scratch = malloc(sizeof(float) * n);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        pc_codec_t *a = make(specs[s], 3), *b = make(specs[s], 3);
        pc_codec_state_t *sa, *sb;
        assert_int_equal(pc_codec_state_create(a, 1, n, &sa), PC_OK);
        assert_int_equal(pc_codec_state_create(b, 1, n, &sb), PC_OK);
        uint8_t dummy[64];
        size_t dl;
        if (!pc_codec_spec(b)->ef) /* nothing folded yet */
            assert_int_equal(pc_codec_compress_folded(b, sb, 0, dummy, sizeof(dummy), &dl),
                             PC_EINVAL);
        for (uint64_t it = 0; it < 3; it++) {
            heavy(g, n, 300 + it);
            msg_t ma = compress(a, sa, g, it);
            memcpy(scratch, g, sizeof(float) * n);
            assert_int_equal(pc_codec_fold(b, sb, scratch), PC_OK);
            memset(scratch, 0xff, sizeof(float) * n); /* the caller reuses its buffer */
            msg_t mb;
            mb.cap = pc_codec_max_bytes(b, n);
            mb.buf = malloc(mb.cap);
            assert_int_equal(pc_codec_compress_folded(b, sb, it, mb.buf, mb.cap, &mb.len), PC_OK);
            assert_int_equal(ma.len, mb.len);
            if (memcmp(ma.buf, mb.buf, ma.len) != 0)
                fail_msg("%s: fold + compress_folded differs from compress at iteration %llu",
                         specs[s], (unsigned long long)it);
            if (pc_codec_state_residual(sa))
                assert_memory_equal(pc_codec_state_residual(sa), pc_codec_state_residual(sb),
                                    sizeof(float) * n);
            if (pc_codec_state_momentum(sa))
                assert_memory_equal(pc_codec_state_momentum(sa), pc_codec_state_momentum(sb),
                                    sizeof(float) * n);
            free(ma.buf);
            free(mb.buf);
        }
        pc_codec_state_destroy(sa);
        pc_codec_state_destroy(sb);
        pc_codec_destroy(a);
        pc_codec_destroy(b);
    }
    free(g);
    free(scratch);
}

/* random-k: the receiver regenerates the sender's indices: decoded entries sit exactly
 * where the sender's residual was emptied; another iteration picks another set. */
static void test_randomk_agreement(void **state)
{
    (void)state;
    const size_t n = 10000;
    float *g = malloc(sizeof(float) * n);
    heavy(g, n, 8);
    pc_codec_t *sender = make("randomk:ratio=0.01,momentum=0", 42),
               *receiver = make("randomk:ratio=0.01", 42);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(sender, 6, n, &st), PC_OK);
    msg_t m = compress(sender, st, g, 3);
    float *d = decode(receiver, &m, 6, n, 3);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] != 0) {
            k++;
            assert_true(d[i] == g[i]);
            assert_true(pc_codec_state_residual(st)[i] == 0.0f);
        } else {
            assert_true(pc_codec_state_residual(st)[i] == g[i]);
        }
    }
    assert_int_equal(k, 100);
    /* A receiver with another seed decodes values onto other indices. */
    pc_codec_t *wrong = make("randomk:ratio=0.01", 43);
    float *e = decode(wrong, &m, 6, n, 3);
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += e[i] != 0 && d[i] != 0;
    assert_true(same < 20);
    free(e);
    pc_codec_destroy(wrong);
    free(d);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(sender);
    pc_codec_destroy(receiver);
    free(g);
}

/* DGC selects within [0.8k, 1.3k] in at least 99% of trials on heavy-tailed gradients, and
 * mostly from the sampled threshold (not by falling back to exact top-k). */
/* The pool deals by pc_codec_work: 2 n for a streaming codec, more for dgc's small chunks
 * (its sample is the whole chunk up to 128 / ratio elements), and a dgc chunk's work per
 * element falls as the chunk grows past that. */
static void test_codec_work(void **state)
{
    (void)state;
    pc_codec_spec_t topk, dgc;
    char err[160];
    assert_int_equal(pc_codec_spec_parse("topk:ratio=0.01", &topk, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_codec_spec_parse("dgc:ratio=0.001", &dgc, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_codec_work(&topk, 65536), 2 * 65536);
    assert_int_equal(pc_codec_work(&dgc, 65536), 7 * 65536);                  /* sampled whole */
    assert_int_equal(pc_codec_work(&dgc, 1048576), 2 * 1048576 + 5 * 128000); /* 128 / 0.001 */
    assert_int_equal(pc_codec_work(&dgc, 1), 2); /* k = n: nothing to select */
    assert_int_equal(pc_codec_work(NULL, 10), 20);
}

static void test_dgc_count_window(void **state)
{
    (void)state;
    const size_t n = 200000;
    const int trials = 200;
    float *g = malloc(sizeof(float) * n);
    pc_codec_t *c = make("dgc:ratio=0.001,sample=0.01,momentum=0.9", 3);
    int inside = 0;
    for (int t = 0; t < trials; t++) {
        pc_codec_state_t *st;
        assert_int_equal(pc_codec_state_create(c, (uint32_t)t, n, &st), PC_OK);
        heavy(g, n, 1000 + (uint64_t)t);
        msg_t m = compress(c, st, g, 0);
        pc_wire_header_t h;
        char err[256];
        assert_int_equal(pc_wire_header_read(m.buf, m.len, &h, err, sizeof(err)), PC_OK);
        inside += h.entries >= 160 && h.entries <= 260; /* k = 200 */
        /* Momentum factor masking: u is zero where v was sent. */
        float *d = decode(c, &m, (uint32_t)t, n, 0);
        for (size_t i = 0; i < n; i++)
            if (d[i] != 0)
                assert_true(pc_codec_state_momentum(st)[i] == 0.0f);
        free(d);
        free(m.buf);
        pc_codec_state_destroy(st);
    }
    pc_codec_stats_t s = pc_codec_stats(c);
    fprintf(stderr, "dgc: %d/%d inside [0.8k, 1.3k]; sampled %llu, adapted %llu, exact %llu\n",
            inside, trials, (unsigned long long)s.dgc_sampled, (unsigned long long)s.dgc_adapted,
            (unsigned long long)s.dgc_exact);
    assert_true(inside >= trials * 99 / 100);
    assert_true(s.dgc_sampled + s.dgc_adapted >= (uint64_t)trials * 9 / 10);
    pc_codec_destroy(c);
    free(g);
}

static void test_dgc_warmup_and_clip(void **state)
{
    (void)state;
    const size_t n = 10000;
    float *g = malloc(sizeof(float) * n);
    pc_codec_t *c = make("dgc:ratio=0.001,warmup=4,clip=0.5", 3);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 0, n, &st), PC_OK);
    uint32_t prev = UINT32_MAX;
    for (uint64_t it = 0; it < 6; it++) {
        heavy(g, n, 50 + it);
        msg_t m = compress(c, st, g, it);
        pc_wire_header_t h;
        char err[256];
        assert_int_equal(pc_wire_header_read(m.buf, m.len, &h, err, sizeof(err)), PC_OK);
        assert_true(m.len <= pc_codec_max_bytes(c, n));
        if (it < 4)
            assert_true(h.entries < prev); /* density decreasing */
        else
            assert_true(h.entries >= 8 && h.entries <= 13); /* k = 10 */
        prev = h.entries;
        free(m.buf);
    }
    /* Clipping bounds what momentum accumulates: ||u|| <= clip / (1 - m) = 5. */
    double nu = 0;
    for (size_t i = 0; i < n; i++)
        nu += (double)pc_codec_state_momentum(st)[i] * pc_codec_state_momentum(st)[i];
    assert_true(sqrt(nu) <= 5.0 + 1e-3);
    assert_int_equal(pc_codec_state_steps(st), 6);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    free(g);
}

/* The density DGC uses at a step (the codec's schedule, written out as the reference):
 * every entry for the first `dense` steps, then the warm-up's, then ratio. */
static size_t dgc_k_ref(double ratio, int dense, int warmup, uint64_t step, size_t n)
{
    if (step < (uint64_t)dense)
        return n;
    step -= (uint64_t)dense;
    double d =
        warmup > 0 && step < (uint64_t)warmup ? pow(ratio, (double)(step + 1) / warmup) : ratio;
    double k = ceil(d * (double)n);
    return k >= (double)n ? n : (size_t)k;
}

/* A receiver of spec recv_spec given a sender's (send_spec) first message of a 4096-element
 * chunk: taken when want_err is NULL, else refused with exactly want_err. */
static void expect_received(const char *recv_spec, const char *send_spec, const char *want_err)
{
    pc_codec_t *recv = make(recv_spec, 5), *c = make(send_spec, 5);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 7, 4096, &st), PC_OK);
    float *g = malloc(sizeof(float) * 4096), *d = calloc(4096, sizeof(float));
    heavy(g, 4096, 77);
    msg_t m = compress(c, st, g, 0);
    char err[256] = "";
    pc_codec_expect_t want = {.chunk = 7, .n = 4096, .iteration = 0};
    int rc = pc_codec_decode_add(recv, m.buf, m.len, &want, 1.0f, d, NULL, err, sizeof(err));
    if (!want_err)
        assert_int_equal(rc, PC_OK);
    else {
        assert_int_equal(rc, PC_EFORMAT);
        assert_string_equal(err, want_err);
    }
    free(g);
    free(d);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    pc_codec_destroy(recv);
}

/* topk:dense=D,warmup=W: the first D calls send every entry, call t of the next W exactly
 * dgc's warm-up k (its reference above), then ceil(ratio * n); every message within
 * max_bytes, decoded, and sent + new residual == folded residual bit for bit; a receiver
 * with the warm-up takes any count from the steady k to the densest call's and refuses one
 * outside, naming the range. */
static void test_topk_warmup(void **state)
{
    (void)state;
    const int warmups[] = {0, 1, 3, 20}, denses[] = {0, 2};
    const char *ratios[] = {"0.01", "0.25", "1"};
    const size_t sizes[] = {1, 31, 4096};
    float *g = malloc(sizeof(float) * 4096), *before = malloc(sizeof(float) * 4096);
    for (size_t wi = 0; wi < sizeof(warmups) / sizeof(warmups[0]) * 2; wi++)
        for (size_t ri = 0; ri < sizeof(ratios) / sizeof(ratios[0]); ri++) {
            int warmup = warmups[wi / 2], dense = denses[wi % 2];
            char spec[128];
            snprintf(spec, sizeof(spec), "topk:ratio=%s,momentum=0,dense=%d,warmup=%d", ratios[ri],
                     dense, warmup);
            pc_codec_t *c = make(spec, 5);
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
                size_t n = sizes[si];
                pc_codec_state_t *st;
                assert_int_equal(pc_codec_state_create(c, 7, n, &st), PC_OK);
                for (int it = 0; it < dense + warmup + 2; it++) {
                    heavy(g, n, 400 + (uint64_t)it);
                    assert_int_equal(pc_codec_fold(c, st, g), PC_OK);
                    memcpy(before, pc_codec_state_residual(st), sizeof(float) * n);
                    msg_t m;
                    m.cap = pc_codec_max_bytes(c, n);
                    m.buf = malloc(m.cap);
                    assert_int_equal(
                        pc_codec_compress_folded(c, st, (uint64_t)it, m.buf, m.cap, &m.len), PC_OK);
                    pc_wire_header_t h;
                    char err[256];
                    assert_int_equal(pc_wire_header_read(m.buf, m.len, &h, err, sizeof(err)),
                                     PC_OK);
                    size_t k = dgc_k_ref(atof(ratios[ri]), dense, warmup, (uint64_t)it, n);
                    if (h.entries != k)
                        fail_msg("%s n=%zu step %d: %u entries, k = %zu", spec, n, it, h.entries,
                                 k);
                    float *d = calloc(n, sizeof(float));
                    pc_codec_expect_t want = {
                        .chunk = 7, .n = (uint32_t)n, .iteration = (uint64_t)it};
                    if (pc_codec_decode_add(c, m.buf, m.len, &want, 1.0f, d, NULL, err,
                                            sizeof(err)) != PC_OK)
                        fail_msg("%s n=%zu step %d: decode: %s", spec, n, it, err);
                    const float *after = pc_codec_state_residual(st);
                    for (size_t i = 0; i < n; i++) {
                        float sum = d[i] + after[i];
                        if (memcmp(&sum, &before[i], sizeof(float)) != 0)
                            fail_msg("%s n=%zu step %d: element %zu: sent + kept != folded", spec,
                                     n, it, i);
                    }
                    free(d);
                    free(m.buf);
                }
                pc_codec_state_destroy(st);
            }
            pc_codec_destroy(c);
        }
    /* The receiver's range at n = 4096: 41 (steady) to ceil(0.01^(1/3) * 4096) = 883. */
    expect_received("topk:ratio=0.01,warmup=3", "topk:ratio=0.01", NULL);
    expect_received("topk:ratio=0.01,warmup=3", "topk:ratio=0.2", NULL);
    expect_received("topk:ratio=0.01,warmup=3", "topk:ratio=0.25",
                    "chunk 7: topk message with 1024 entries, expected 41 to 883 (warmup=3)");
    /* With dense=2 every entry is taken, and fewer than the steady k still refused, naming
     * the dense phase. */
    expect_received("topk:ratio=0.01,dense=2", "topk:ratio=1", NULL);
    expect_received("topk:ratio=0.01,dense=2", "topk:ratio=0.005",
                    "chunk 7: topk message with 21 entries, expected 41 to 4096 (dense=2)");
    free(g);
    free(before);
}

/* Fill g with one of four shapes: heavy-tailed, half zeros (ReLU-like), all zeros, all
 * magnitudes equal. */
static void dgc_input(float *g, size_t n, int kind, uint64_t seed)
{
    heavy(g, n, seed);
    for (size_t i = 0; i < n; i++) {
        if (kind == 1 && (i % 2 == 0))
            g[i] = 0.0f;
        else if (kind == 2)
            g[i] = 0.0f;
        else if (kind == 3)
            g[i] = g[i] < 0 ? -0.5f : 0.5f;
    }
}

/* Every warm-up length and density, density 1 included (warm-up's first steps select
 * nearly everything), every other warm-up after dense=3 (every entry): each message decodes
 * (indices strictly increasing, in range), holds a count within [0.8k, 1.3k] or exactly k, and sent
 * + new residual == folded residual bit for bit. The warm-up of 20 at ratio 0.01 once sent a count
 * of n with no index list. */
static void test_dgc_warmup_every_density(void **state)
{
    (void)state;
    const int warmups[] = {0, 1, 2, 3, 5, 15, 20, 100, 200};
    const char *ratios[] = {"0.001", "0.01", "0.25", "1"};
    const size_t sizes[] = {1, 2, 31, 1000, 4096};
    float *g = malloc(sizeof(float) * 4096), *before = malloc(sizeof(float) * 4096);
    long messages = 0;
    for (size_t wi = 0; wi < sizeof(warmups) / sizeof(warmups[0]); wi++)
        for (size_t ri = 0; ri < sizeof(ratios) / sizeof(ratios[0]); ri++) {
            char spec[128];
            int dense = wi % 2 ? 3 : 0;
            snprintf(spec, sizeof(spec), "dgc:ratio=%s,warmup=%d,dense=%d", ratios[ri], warmups[wi],
                     dense);
            pc_codec_t *c = make(spec, 5);
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
                for (int kind = 0; kind < 4; kind++) {
                    size_t n = sizes[si];
                    pc_codec_state_t *st;
                    assert_int_equal(pc_codec_state_create(c, 7, n, &st), PC_OK);
                    int steps = dense + warmups[wi] + 2;
                    for (int it = 0; it < steps; it++) {
                        dgc_input(g, n, kind, 300 + (uint64_t)it);
                        assert_int_equal(pc_codec_fold(c, st, g), PC_OK);
                        memcpy(before, pc_codec_state_residual(st), sizeof(float) * n);
                        msg_t m;
                        m.cap = pc_codec_max_bytes(c, n);
                        m.buf = malloc(m.cap);
                        int rc =
                            pc_codec_compress_folded(c, st, (uint64_t)it, m.buf, m.cap, &m.len);
                        if (rc != PC_OK)
                            fail_msg("%s n=%zu kind %d step %d: %s", spec, n, kind, it,
                                     pc_strerror(rc));
                        pc_wire_header_t h;
                        char err[256];
                        assert_int_equal(pc_wire_header_read(m.buf, m.len, &h, err, sizeof(err)),
                                         PC_OK);
                        size_t k = dgc_k_ref(atof(ratios[ri]), dense, warmups[wi], (uint64_t)it, n);
                        size_t lo = (size_t)ceil(0.8 * (double)k),
                               hi = (size_t)floor(1.3 * (double)k);
                        if (!(h.entries == k ||
                              (h.entries >= lo && h.entries <= hi && h.entries <= n)))
                            fail_msg("%s n=%zu kind %d step %d: %u entries, k = %zu", spec, n, kind,
                                     it, h.entries, k);
                        float *d = calloc(n, sizeof(float));
                        pc_codec_expect_t want = {
                            .chunk = 7, .n = (uint32_t)n, .iteration = (uint64_t)it};
                        rc = pc_codec_decode_add(c, m.buf, m.len, &want, 1.0f, d, NULL, err,
                                                 sizeof(err));
                        if (rc != PC_OK)
                            fail_msg("%s n=%zu kind %d step %d: decode: %s", spec, n, kind, it,
                                     err);
                        const float *after = pc_codec_state_residual(st);
                        for (size_t i = 0; i < n; i++) {
                            float sum = d[i] + after[i];
                            if (memcmp(&sum, &before[i], sizeof(float)) != 0)
                                fail_msg("%s n=%zu kind %d step %d: element %zu: sent %g + "
                                         "residual %g != %g",
                                         spec, n, kind, it, i, d[i], after[i], before[i]);
                        }
                        free(d);
                        free(m.buf);
                        messages++;
                    }
                    pc_codec_state_destroy(st);
                }
            pc_codec_destroy(c);
        }
    fprintf(stderr, "dgc warm-up: %ld messages checked\n", messages);
    free(g);
    free(before);
}

/* Inputs on which the sampled threshold misses the window. The sample of ns elements sits
 * at floor(j * n / ns); with n = 16 * ns that is every 16th element.
 *  - Sampled elements 1.5x their neighbours' scale: the first threshold selects too few
 *    (about k / 1.4 on these heavy tails); the re-aimed one must land in the window.
 *  - Sampled elements tiny: every sample threshold selects nearly all of the chunk; the
 *    exact top-k must be used, giving exactly k.
 * The stats must show which path ran, so that a codec accepting a count outside the window
 * cannot pass. */
static void test_dgc_sample_misses(void **state)
{
    (void)state;
    /* ratio 0.01: ns = DGC's floor of 128 / 0.01 = 12800 sampled elements. */
    const size_t ns = 12800, n = 16 * ns, k = 2048;
    float *g = malloc(sizeof(float) * n);
    for (int kind = 0; kind < 2; kind++) {
        pc_codec_t *c = make("dgc:ratio=0.01,sample=0.01,momentum=0", 11);
        pc_codec_state_t *st;
        assert_int_equal(pc_codec_state_create(c, 0, n, &st), PC_OK);
        heavy(g, n, 77);
        for (size_t i = 0; i < n; i += 16)
            g[i] *= kind == 0 ? 1.5f : 1e-6f;
        msg_t m = compress(c, st, g, 0);
        pc_wire_header_t h;
        char err[256];
        assert_int_equal(pc_wire_header_read(m.buf, m.len, &h, err, sizeof(err)), PC_OK);
        pc_codec_stats_t s = pc_codec_stats(c);
        fprintf(stderr,
                "dgc sample miss %s: %u entries (k %zu); sampled %llu adapted %llu exact %llu\n",
                kind == 0 ? "scaled" : "tiny", h.entries, k, (unsigned long long)s.dgc_sampled,
                (unsigned long long)s.dgc_adapted, (unsigned long long)s.dgc_exact);
        if (kind == 0) {
            assert_int_equal(s.dgc_sampled, 0);
            assert_int_equal(s.dgc_adapted, 1);
            assert_true(h.entries >= (uint32_t)ceil(0.8 * k) &&
                        h.entries <= (uint32_t)floor(1.3 * k));
        } else {
            assert_int_equal(s.dgc_sampled + s.dgc_adapted, 0);
            assert_int_equal(s.dgc_exact, 1);
            assert_int_equal(h.entries, k);
        }
        free(m.buf);
        pc_codec_state_destroy(st);
        pc_codec_destroy(c);
    }
    free(g);
}

static void test_nonfinite_gradient(void **state)
{
    (void)state;
    const char *specs[] = {"none",      "fp16", "topk",     "dgc",    "randomk",
                           "threshold", "qsgd", "terngrad", "efsign", "topk:ef=off"};
    float g[100];
    uniformish(g, 100, 1);
    g[37] = NAN;
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        pc_codec_t *c = make(specs[s], 1);
        pc_codec_state_t *st;
        assert_int_equal(pc_codec_state_create(c, 0, 100, &st), PC_OK);
        uint8_t buf[4096];
        size_t len;
        int rc = pc_codec_compress(c, st, g, 0, buf, sizeof(buf), &len);
        if (rc != PC_ERANGE)
            fail_msg("%s: NaN gradient gave %s", specs[s], pc_errname(rc));
        assert_int_equal(pc_codec_compress(c, st, g, 0, buf, 10, &len), PC_EINVAL); /* cap */
        pc_codec_state_destroy(st);
        pc_codec_destroy(c);
    }
}

/* An empty message (nothing above the threshold) is a valid message that adds nothing. */
static void test_empty_message(void **state)
{
    (void)state;
    float g[50];
    uniformish(g, 50, 2);
    pc_codec_t *c = make("threshold:tau=1e30", 1);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 0, 50, &st), PC_OK);
    msg_t m = compress(c, st, g, 0);
    assert_int_equal(m.len, PC_WIRE_HEADER_BYTES);
    float *d = decode(c, &m, 0, 50, 0);
    for (int i = 0; i < 50; i++)
        assert_true(d[i] == 0.0f && pc_codec_state_residual(st)[i] == g[i]);
    free(d);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
}

/* ---- malformed messages --------------------------------------------------------------- */

#define SENTINEL 7.25f

/* Decode must fail with PC_EFORMAT and leave dense untouched. */
static void expect_reject(const pc_codec_t *c, const uint8_t *buf, size_t len, uint32_t chunk,
                          size_t n, const char *what, const char *needle)
{
    float *d = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        d[i] = SENTINEL;
    pc_codec_expect_t want = {.chunk = chunk, .n = (uint32_t)n, .iteration = 5};
    char err[256] = "";
    int rc = pc_codec_decode_add(c, buf, len, &want, 1.0f, d, NULL, err, sizeof(err));
    if (rc != PC_EFORMAT)
        fail_msg("%s: accepted (rc %s)", what, pc_errname(rc));
    if (needle && !strstr(err, needle))
        fail_msg("%s: message \"%s\" lacks \"%s\"", what, err, needle);
    for (size_t i = 0; i < n; i++)
        if (d[i] != SENTINEL)
            fail_msg("%s: wrote dense[%zu]", what, i);
    free(d);
}

static void set_u32(uint8_t *p, uint32_t v)
{
    pc_wire_put_u32(p, v);
}

/* A malformed copy of message m (chunk 2 of n elements) in b: stmt mutates it, then the
 * codec c must refuse len_ bytes of it with a message holding needle (test_malformed_sparse,
 * test_index_bitmap). */
#define MUT(stmt, len_, what, needle)                                                              \
    do {                                                                                           \
        memcpy(b, m.buf, m.len);                                                                   \
        stmt;                                                                                      \
        expect_reject(c, b, (len_), 2, n, what, needle);                                           \
    } while (0)

static void test_malformed_sparse(void **state)
{
    (void)state;
    const size_t n = 1000;
    float g[1000];
    heavy(g, n, 3);
    for (int delta = 0; delta < 2; delta++) {
        pc_codec_t *c = make(delta ? "topk:ratio=0.01,index=delta" : "topk:ratio=0.01", 1);
        pc_codec_state_t *st;
        assert_int_equal(pc_codec_state_create(c, 2, n, &st), PC_OK);
        msg_t m = compress(c, st, g, 5);
        uint8_t *b = malloc(m.len + 8);
        const size_t H = PC_WIRE_HEADER_BYTES;
        MUT((void)0, m.len - 1, "truncated", "payload");
        MUT(b[m.len] = 0, m.len + 1, "oversized", "payload");
        MUT(set_u32(b + 28, (uint32_t)(m.len - H - 1)), m.len - 1, "truncated consistently",
            "value bytes");
        MUT((void)0, 12, "shorter than header", "shorter");
        MUT(b[4] = 9, m.len, "wrong version", "version");
        MUT(b[5] = PC_CODEC_QSGD, m.len, "wrong codec", "codec");
        MUT(b[0] ^= 0xff, m.len, "bad magic", "magic");
        MUT(set_u32(b + 8, 3), m.len, "wrong chunk", "chunk 3");
        MUT(set_u32(b + 12, 999), m.len, "wrong n", "elements");
        MUT(b[16] = 6, m.len, "wrong iteration", "iteration");
        MUT(set_u32(b + 24, 9), m.len, "wrong entry count", "entries");
        MUT(set_u32(b + 32, 0x7fc00000u), m.len, "NaN scale", "scale");
        MUT(b[6] ^= PC_WIRE_F_FP16, m.len, "wrong flags", "flags");
        MUT(set_u32(b + 36, 1), m.len, "reserved", "reserved");
        if (!delta) {
            MUT(set_u32(b + H, 1000), m.len, "index out of range", "out of range");
            MUT(set_u32(b + H, 0xffffffffu), m.len, "index far out of range", "out of range");
            MUT(set_u32(b + H + 4, pc_wire_get_u32(b + H)), m.len, "repeated index",
                "strictly increasing");
            MUT(set_u32(b + H + 4 * 10, 0x7f800000u), m.len, "infinite value", "not finite");
            MUT(set_u32(b + H + 4 * 11, 0x7fc00001u), m.len, "NaN value", "not finite");
        } else {
            MUT(b[H] = 0xff; b[H + 1] = 0xff; b[H + 2] = 0xff; b[H + 3] = 0xff;
                b[H + 4] = 0xff, m.len, "overlong varint", "varint");
            MUT(b[H] = 0xe8; b[H + 1] = 0x07, m.len, "first index 1000", NULL);
        }
        free(b);
        free(m.buf);
        pc_codec_state_destroy(st);
        pc_codec_destroy(c);
    }
}

/* The index section as a bitmap of n bits (PC_WIRE_F_BITMAP) exactly when that is smaller
 * than the codec's list (u32s: above 1/32 density; varints: their bytes), the same entries
 * and values either way: the message re-encoded by hand as a list decodes to the same
 * bits. Malformed bitmaps are refused in one line; the flag on a codec without indices
 * is. */
static void test_index_bitmap(void **state)
{
    (void)state;
    const char *specs[] = {"topk:ratio=0.5,momentum=0",  "topk:ratio=0.01,momentum=0",
                           "topk:ratio=0.05,momentum=0", "topk:ratio=0.2,index=delta",
                           "topk:ratio=0.5,values=fp16", "threshold:tau=0.5",
                           "dgc:ratio=0.3,momentum=0"};
    const size_t sizes[] = {1, 31, 1001, 4099};
    float *g = malloc(sizeof(float) * 4099);
    for (size_t si = 0; si < sizeof(specs) / sizeof(specs[0]); si++)
        for (size_t ni = 0; ni < sizeof(sizes) / sizeof(sizes[0]); ni++) {
            size_t n = sizes[ni];
            pc_codec_t *c = make(specs[si], 3);
            pc_codec_state_t *st;
            assert_int_equal(pc_codec_state_create(c, 4, n, &st), PC_OK);
            heavy(g, n, 50 + ni);
            msg_t m = compress(c, st, g, 5);
            pc_wire_header_t h;
            char err[256];
            assert_int_equal(pc_wire_header_read(m.buf, m.len, &h, err, sizeof(err)), PC_OK);
            float *d = decode(c, &m, 4, n, 5);
            /* The entries' indices, from the decoded positions (values are never 0 here:
             * heavy() draws none) */
            size_t k = 0, vb = strstr(specs[si], "fp16") ? 2 : 4, list = 0;
            uint32_t *idx = malloc(sizeof(uint32_t) * n);
            for (size_t i = 0; i < n; i++)
                if (d[i] != 0.0f)
                    idx[k++] = (uint32_t)i;
            assert_int_equal(k, h.entries);
            bool delta = strstr(specs[si], "delta") != NULL;
            for (size_t j = 0; j < k; j++)
                list += delta ? pc_wire_varint_len(j ? idx[j] - idx[j - 1] - 1 : idx[0]) : 4;
            size_t nb = (n + 7) / 8;
            bool bitmap = nb < list;
            if (bitmap != ((h.flags & PC_WIRE_F_BITMAP) != 0))
                fail_msg("%s n=%zu: %zu entries, list %zu bytes, bitmap %zu: flags 0x%x", specs[si],
                         n, k, list, nb, h.flags);
            assert_int_equal(m.len, PC_WIRE_HEADER_BYTES + (bitmap ? nb : list) + k * vb);
            if (bitmap && !delta) { /* the same message with a u32 list decodes alike */
                size_t len2 = PC_WIRE_HEADER_BYTES + 4 * k + k * vb;
                uint8_t *b = malloc(len2);
                h.flags &= (uint16_t)~PC_WIRE_F_BITMAP;
                h.payload = (uint32_t)(len2 - PC_WIRE_HEADER_BYTES);
                pc_wire_header_write(&h, b);
                for (size_t j = 0; j < k; j++)
                    pc_wire_put_u32(b + PC_WIRE_HEADER_BYTES + 4 * j, idx[j]);
                memcpy(b + PC_WIRE_HEADER_BYTES + 4 * k, m.buf + m.len - k * vb, k * vb);
                msg_t m2 = {.buf = b, .len = len2, .cap = len2};
                float *d2 = decode(c, &m2, 4, n, 5);
                assert_memory_equal(d, d2, sizeof(float) * n);
                free(d2);
                free(b);
            }
            free(idx);
            free(d);
            free(m.buf);
            pc_codec_state_destroy(st);
            pc_codec_destroy(c);
        }
    free(g);
    /* Malformed: n = 1001, top-k 50 % (the bitmap form: 126 bytes against 2004). */
    const size_t n = 1001, H = PC_WIRE_HEADER_BYTES;
    float x[1001];
    heavy(x, n, 9);
    pc_codec_t *c = make("topk:ratio=0.5", 1);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 2, n, &st), PC_OK);
    msg_t m = compress(c, st, x, 5);
    assert_true(pc_wire_get_u16(m.buf + 6) & PC_WIRE_F_BITMAP);
    uint8_t *b = malloc(m.len);
    size_t first = 0; /* the byte of the first set bit */
    while (!m.buf[H + first])
        first++;
    MUT(b[H + first] &= (uint8_t)(b[H + first] - 1), m.len, "a bit cleared",
        "bits set for 501 entries");
    MUT(b[H + 125] |= 0x80, m.len, "a bit past n", "bits set past n = 1001");
    MUT(set_u32(b + 28, 100), H + 100, "payload inside the bitmap",
        "ends inside its 126-byte index bitmap");
    MUT(b[6] |= PC_WIRE_F_DELTA, m.len, "bitmap and delta", "sends 0x0000 (with 0x0008");
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    /* randomk sends no indices: the flag is refused. */
    c = make("randomk:ratio=0.5", 1);
    assert_int_equal(pc_codec_state_create(c, 2, n, &st), PC_OK);
    free(m.buf);
    m = compress(c, st, x, 5);
    b = realloc(b, m.len);
    memcpy(b, m.buf, m.len);
    b[6] |= PC_WIRE_F_BITMAP;
    expect_reject(c, b, m.len, 2, n, "bitmap on randomk", "this randomk codec sends 0x0000");
    free(b);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
}

#undef MUT

static void test_malformed_quantised(void **state)
{
    (void)state;
    const size_t n = 101; /* 101 * 6 bits: pad bits in the last byte */
    float g[101];
    uniformish(g, n, 5);
    pc_codec_t *c = make("qsgd:levels=16", 1);
    pc_codec_state_t *st;
    assert_int_equal(pc_codec_state_create(c, 2, n, &st), PC_OK);
    msg_t m = compress(c, st, g, 5);
    uint8_t *b = malloc(m.len);
    const size_t H = PC_WIRE_HEADER_BYTES;
    memcpy(b, m.buf, m.len);
    b[H] |= 0x3f; /* first code = 63 > 2s = 32 */
    expect_reject(c, b, m.len, 2, n, "qsgd code out of range", "out of range");
    memcpy(b, m.buf, m.len);
    b[m.len - 1] |= 0x80; /* a pad bit */
    expect_reject(c, b, m.len, 2, n, "qsgd pad bit", "pad");
    memcpy(b, m.buf, m.len);
    set_u32(b + 32, 0xff800000u); /* -inf scale */
    expect_reject(c, b, m.len, 2, n, "qsgd infinite scale", "scale");
    free(b);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);

    c = make("terngrad", 1);
    assert_int_equal(pc_codec_state_create(c, 2, n, &st), PC_OK);
    m = compress(c, st, g, 5);
    b = malloc(m.len);
    memcpy(b, m.buf, m.len);
    b[H] |= 0x03; /* code 3 */
    expect_reject(c, b, m.len, 2, n, "terngrad code 3", "out of range");
    free(b);
    free(m.buf);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
}

/* Every codec's messages stay within max_bytes, including the densest cases. */
static void test_max_bytes(void **state)
{
    (void)state;
    const char *specs[] = {"threshold:tau=1e-9",
                           "threshold:tau=1e-9,values=fp16,index=delta",
                           "dgc:ratio=0.5,warmup=3,index=delta",
                           "topk:ratio=1,index=delta",
                           "qsgd:levels=127",
                           "qsgd:levels=1",
                           "terngrad",
                           "efsign",
                           "randomk:ratio=1"};
    const size_t sizes[] = {1, 7, 64, 4099};
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++)
        for (size_t z = 0; z < 4; z++) {
            size_t n = sizes[z];
            float *g = malloc(sizeof(float) * n);
            heavy(g, n, n);
            pc_codec_t *c = make(specs[s], 1);
            pc_codec_state_t *st;
            assert_int_equal(pc_codec_state_create(c, 0, n, &st), PC_OK);
            for (uint64_t it = 0; it < 3; it++) {
                msg_t m = compress(c, st, g, it);
                float *d = decode(c, &m, 0, n, it);
                free(d);
                free(m.buf);
            }
            pc_codec_state_destroy(st);
            pc_codec_destroy(c);
            free(g);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_parsing),
        cmocka_unit_test(test_topk_reference),
        cmocka_unit_test(test_error_feedback_invariant),
        cmocka_unit_test(test_momentum_correction),
        cmocka_unit_test(test_momentum_zero_is_plain),
        cmocka_unit_test(test_dense_codecs),
        cmocka_unit_test(test_qsgd_terngrad_unbiased),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_fold_then_compress),
        cmocka_unit_test(test_randomk_agreement),
        cmocka_unit_test(test_codec_work),
        cmocka_unit_test(test_dgc_count_window),
        cmocka_unit_test(test_dgc_warmup_and_clip),
        cmocka_unit_test(test_dgc_warmup_every_density),
        cmocka_unit_test(test_topk_warmup),
        cmocka_unit_test(test_dgc_sample_misses),
        cmocka_unit_test(test_nonfinite_gradient),
        cmocka_unit_test(test_empty_message),
        cmocka_unit_test(test_malformed_sparse),
        cmocka_unit_test(test_index_bitmap),
        cmocka_unit_test(test_malformed_quantised),
        cmocka_unit_test(test_max_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
