/* test_codec_elem: the codec kernels' per-element functions (cuda/codec_elem.h), compiled by
 * gcc and run over whole chunks in the kernels' order (cuda/codec_*.cu), against the CPU
 * codecs, the reference: fp16 with error feedback over two iterations, qsgd, terngrad and
 * efsign (codes, bit packing, residual, decode-add), exact top-k by the radix select's
 * three levels (digits, boundary bins, filters, ties by index; u32 and delta indices, f32
 * and f16 values), randomk by Floyd's membership walk, and the sparse decode, each bit for
 * bit (payload bytes, residuals, dense sums). What the device adds (launch geometry,
 * atomics' order, CUB's sorts and scans, cuRAND) runs only where a GPU is
 * (test_devcodec_cuda); everything else of a kernel runs here. */
#include "config.h"

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

#include "../../cuda/codec_elem.h"

#define CHUNK     3
#define PACK_TILE 1024 /* codec_impl.cuh's */

/* A gradient with heavy tails, exact ties (values on a coarse grid), zeros, and (with big)
 * values beyond fp16's range. */
static float *gradient(size_t n, uint64_t seed, bool big)
{
    float *x = malloc(n * sizeof(float));
    assert_non_null(x);
    pc_philox_t g;
    pc_philox_init(&g, seed, 11, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t d = pc_philox_next(&g);
        float u = pc_philox_uniform(pc_philox_next(&g));
        float v = (d & 1 ? -1e-3f : 1e-3f) * powf(u, -1.1f);
        if (d % 7 == 0)
            v = (float)((int)(d % 9) - 4) * 0.25f; /* ties */
        if (d % 31 == 0)
            v = 0.0f;
        if (big && d % 97 == 0)
            v = d & 2 ? 1e6f : -7e4f;
        x[i] = v;
    }
    return x;
}

/* The CPU codec and one state of n elements. */
typedef struct cpu {
    pc_codec_t *c;
    pc_codec_state_t *st;
    uint8_t *msg;
    size_t cap, len;
    pc_wire_header_t h;
} cpu_t;

static void cpu_open(cpu_t *k, const char *spec, size_t n)
{
    pc_codec_spec_t s;
    char err[256];
    if (pc_codec_spec_parse(spec, &s, err, sizeof(err)) != PC_OK)
        fail_msg("%s: %s", spec, err);
    s.seed = 0x5eedULL;
    assert_int_equal(pc_codec_create(&s, &k->c), PC_OK);
    assert_int_equal(pc_codec_state_create(k->c, CHUNK, n, &k->st), PC_OK);
    k->cap = pc_codec_max_bytes(k->c, n);
    k->msg = malloc(k->cap + 8);
    assert_non_null(k->msg);
}

static int cpu_compress(cpu_t *k, const float *grad, uint64_t it)
{
    int rc = pc_codec_compress(k->c, k->st, grad, it, k->msg, k->cap, &k->len);
    if (rc == PC_OK) {
        char err[128];
        assert_int_equal(pc_wire_header_read(k->msg, k->len, &k->h, err, sizeof(err)), PC_OK);
    }
    return rc;
}

static const uint8_t *cpu_payload(const cpu_t *k)
{
    return k->msg + PC_WIRE_HEADER_BYTES;
}

static void cpu_close(cpu_t *k)
{
    pc_codec_state_destroy(k->st);
    pc_codec_destroy(k->c);
    free(k->msg);
}

static void assert_bits_equal(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pc_elem_bits(a[i]) != pc_elem_bits(b[i]))
            fail_msg("element %zu: %a (0x%08x) against the CPU's %a (0x%08x)", i, (double)a[i],
                     pc_elem_bits(a[i]), (double)b[i], pc_elem_bits(b[i]));
}

/* ---- fp16 ---------------------------------------------------------------------------- */

/* fold_check, then fp16_kernel: code, payload, residual -= what was sent. */
static void test_fp16(void **state)
{
    (void)state;
    size_t n = 5003;
    cpu_t k;
    cpu_open(&k, "fp16:ef=on", n);
    float *r = calloc(n, sizeof(float));
    uint16_t *pay = malloc(2 * n);
    for (uint64_t it = 0; it < 2; it++) {
        float *g = gradient(n, 10 + it, true);
        assert_int_equal(cpu_compress(&k, g, it), PC_OK);
        for (size_t i = 0; i < n; i++) {
            r[i] = pc_elem_fold(r[i], g[i]);
            assert_false(pc_elem_nonfinite(r[i]));
            uint16_t h = pc_elem_f16(r[i]);
            pay[i] = h;
            r[i] = PC_FSUB(r[i], pc_elem_f16_value(h));
        }
        assert_int_equal(k.h.payload, 2 * n);
        assert_memory_equal(pay, cpu_payload(&k), 2 * n); /* little-endian host */
        assert_bits_equal(r, pc_codec_state_residual(k.st), n);
        free(g);
    }
    /* A non-finite value: the CPU refuses the chunk, the kernel's check flags it. */
    float *g = gradient(n, 12, false);
    g[77] = NAN;
    assert_int_equal(cpu_compress(&k, g, 2), PC_ERANGE);
    assert_true(pc_elem_nonfinite(pc_elem_fold(r[77], g[77])));
    free(g), free(r), free(pay);
    cpu_close(&k);
}

/* ---- the quantisers -------------------------------------------------------------------- */

static uint32_t code_bits(int kind, int levels)
{
    if (kind == PC_ELEM_TERNGRAD)
        return 2;
    if (kind == PC_ELEM_EFSIGN)
        return 1;
    uint32_t b = 1; /* codec_quant.cu's qsgd_bits */
    while ((1u << b) < (uint32_t)(2 * levels + 1))
        b++;
    return b;
}

/* quant_kernel: tiles of PACK_TILE elements, four per thread from one Philox block, the
 * codes packed at bit (i - tile0) * bits of the tile's words; then decode_dense_kernel. */
static void quantiser(const char *spec, int kind, int levels)
{
    size_t n = 3 * PACK_TILE + 517;
    cpu_t k;
    cpu_open(&k, spec, n);
    float *r = calloc(n, sizeof(float));
    uint32_t bits = code_bits(kind, levels);
    size_t nwords = (n * bits + 31) / 32;
    uint32_t *words = calloc(nwords + 1, sizeof(uint32_t));
    for (uint64_t it = 0; it < 2; it++) {
        float *g = gradient(n, 20 + it, false);
        assert_int_equal(cpu_compress(&k, g, it), PC_OK);
        float scale = k.h.scale; /* the canonical sum is test_codec_sum's */
        uint64_t subseq = pc_philox_subsequence(it, CHUNK);
        memset(words, 0, (nwords + 1) * sizeof(uint32_t));
        for (size_t i = 0; i < n; i++)
            r[i] = pc_elem_fold(r[i], g[i]);
        for (size_t tile0 = 0; tile0 < n; tile0 += PACK_TILE) {
            uint32_t *tw = words + tile0 * bits / 32;
            for (size_t i = tile0; i < n && i < tile0 + PACK_TILE; i++) {
                uint32_t draw = kind == PC_ELEM_EFSIGN ? 0 : pc_elem_draw(0x5eedULL, subseq, i);
                float sent;
                uint32_t code = pc_elem_quant_code(kind, r[i], scale, levels, draw, &sent);
                pc_elem_pack(tw, (uint32_t)(i - tile0) * bits, code, bits);
                r[i] = PC_FSUB(r[i], sent);
            }
        }
        size_t bytes = (n * bits + 7) / 8;
        assert_int_equal(k.h.payload, bytes);
        assert_memory_equal(words, cpu_payload(&k), bytes);
        assert_bits_equal(r, pc_codec_state_residual(k.st), n);
        /* Decode-add into a dense buffer that already holds something. */
        float *want = gradient(n, 30, false), *got = malloc(n * sizeof(float));
        memcpy(got, want, n * sizeof(float));
        pc_codec_expect_t ex = {.chunk = CHUNK, .n = (uint32_t)n, .iteration = it};
        char err[256];
        if (pc_codec_decode_add(k.c, k.msg, k.len, &ex, 0.5f, want, NULL, err, sizeof(err)))
            fail_msg("decode: %s", err);
        uint8_t *padded = calloc(bytes + 1, 1); /* the device copy's zero byte */
        memcpy(padded, cpu_payload(&k), bytes);
        for (size_t i = 0; i < n; i++) {
            bool add;
            float v =
                pc_elem_quant_value(kind, pc_elem_unpack(padded, i, bits), k.h.scale, levels, &add);
            if (add)
                got[i] = pc_elem_add_scaled(got[i], 0.5f, v);
        }
        assert_bits_equal(got, want, n);
        free(padded), free(want), free(got), free(g);
    }
    free(r), free(words);
    cpu_close(&k);
}

static void test_qsgd(void **state)
{
    (void)state;
    quantiser("qsgd:levels=16,ef=on", PC_ELEM_QSGD, 16);
    quantiser("qsgd:levels=3,ef=on", PC_ELEM_QSGD, 3);
}

static void test_terngrad(void **state)
{
    (void)state;
    quantiser("terngrad:ef=on", PC_ELEM_TERNGRAD, 0);
}

static void test_efsign(void **state)
{
    (void)state;
    quantiser("efsign:ef=on", PC_ELEM_EFSIGN, 0);
}

/* ---- top-k by the radix select ----------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* radix_select: hist1 -> find_bin(0) -> filter1 (selected above, candidates in the bin,
 * their level 2 histogram) -> find_bin(1) -> filter2 -> find_bin(2) -> filter3 (selected
 * above the k-th key, ties equal to it) -> the kleft lowest ties -> ascending. Returns the
 * count (k), or -1 for a non-finite key (hist1's check). */
static long radix_topk(const float *v, size_t n, size_t k, uint32_t *sel)
{
    uint32_t h1[PC_ELEM_L1_BINS] = {0}, h2[PC_ELEM_L2_BINS] = {0}, h3[PC_ELEM_L3_BINS] = {0};
    uint32_t digit[3] = {0}, size[3] = {0}, kleft = (uint32_t)k;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = pc_elem_key(v[i]);
        if (key >= PC_ELEM_KEY_NONFINITE)
            return -1;
        h1[pc_elem_digit(key, 0)]++;
    }
    assert_true(pc_elem_find_bin(h1, PC_ELEM_L1_BINS - 1, PC_ELEM_L1_BINS, 0, kleft, &digit[0],
                                 &size[0], &kleft));
    size_t nsel = 0, ncand = 0;
    uint32_t *cidx = malloc((size[0] + 1) * sizeof(uint32_t));
    uint32_t *ckey = malloc((size[0] + 1) * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        uint32_t key = pc_elem_key(v[i]);
        int c = pc_elem_classify(key, 0, digit);
        if (c == PC_ELEM_ABOVE) {
            sel[nsel++] = (uint32_t)i;
        } else if (c == PC_ELEM_IN) {
            ckey[ncand] = key;
            cidx[ncand++] = (uint32_t)i;
            h2[pc_elem_digit(key, 1)]++;
        }
    }
    assert_int_equal(ncand, size[0]);
    assert_true(pc_elem_find_bin(h2, PC_ELEM_L2_BINS - 1, PC_ELEM_L2_BINS, 0, kleft, &digit[1],
                                 &size[1], &kleft));
    for (size_t j = 0; j < ncand; j++) {
        int c = pc_elem_classify(ckey[j], 1, digit);
        assert_int_not_equal(c, PC_ELEM_DECIDED); /* candidates share digit 0 */
        if (c == PC_ELEM_ABOVE)
            sel[nsel++] = cidx[j];
        else if (c == PC_ELEM_IN)
            h3[pc_elem_digit(ckey[j], 2)]++;
    }
    assert_true(pc_elem_find_bin(h3, PC_ELEM_L3_BINS - 1, PC_ELEM_L3_BINS, 0, kleft, &digit[2],
                                 &size[2], &kleft));
    uint32_t kth = pc_elem_key_of_digits(digit);
    uint32_t *ties = malloc((ncand + 1) * sizeof(uint32_t));
    size_t neq = 0;
    for (size_t j = 0; j < ncand; j++) {
        int c = pc_elem_classify(ckey[j], 2, digit);
        if (c == PC_ELEM_ABOVE)
            sel[nsel++] = cidx[j];
        else if (c == PC_ELEM_IN)
            ties[neq++] = cidx[j];
        assert_true(c != PC_ELEM_IN || ckey[j] == kth);
    }
    assert_int_equal(neq, size[2]);
    assert_int_equal(nsel + kleft, k); /* the counts are exact (radix_select's check) */
    qsort(ties, neq, sizeof(uint32_t), cmp_u32);
    memcpy(sel + nsel, ties, kleft * sizeof(uint32_t));
    qsort(sel, k, sizeof(uint32_t), cmp_u32);
    free(cidx), free(ckey), free(ties);
    return (long)k;
}

/* encode_kernel over k ascending indices of n: the index section (u32, or varints at the
 * exclusive scan of their lengths; bitmap_kernel's bitmap of n bits where that is
 * smaller), the values, the residual left. Returns the bytes. */
static size_t encode(const uint32_t *idx, size_t k, size_t n, float *v, bool delta, bool fp16,
                     bool with_index, uint8_t *out)
{
    size_t ib = 0;
    uint32_t *off = malloc((k + 1) * sizeof(uint32_t));
    for (size_t j = 0; j < k; j++) { /* varint_len_kernel, then the scan */
        off[j] = (uint32_t)ib;
        ib += with_index ? (delta ? pc_elem_varint_len(pc_elem_gap(idx, j)) : 4) : 0;
    }
    if (with_index && (n + 7) / 8 < ib) { /* the bitmap: the memset, then one bit per index */
        ib = (n + 7) / 8;
        memset(out, 0, ib);
        for (size_t j = 0; j < k; j++)
            out[idx[j] / 8] |= (uint8_t)(1u << (idx[j] % 8));
        with_index = false;
    }
    for (size_t j = 0; j < k; j++) {
        if (with_index && delta)
            pc_elem_varint_put(out + off[j], pc_elem_gap(idx, j));
        else if (with_index)
            memcpy(out + 4 * j, &idx[j], 4); /* little-endian host, as the device */
        v[idx[j]] = pc_elem_put_value(out + ib, j, v[idx[j]], fp16);
    }
    free(off);
    return ib + (fp16 ? 2 : 4) * k;
}

static void topk(const char *spec, double ratio, bool delta, bool fp16, float m)
{
    size_t n = 20011;
    cpu_t c;
    cpu_open(&c, spec, n);
    float *r = calloc(n, sizeof(float)), *u = calloc(n, sizeof(float));
    size_t kk = (size_t)ceil(ratio * (double)n); /* compared with the CPU's entries below */
    uint32_t *sel = malloc(n * sizeof(uint32_t));
    uint8_t *out = malloc(c.cap);
    for (uint64_t it = 0; it < 3; it++) {
        float *g = gradient(n, 40 + it, false);
        assert_int_equal(cpu_compress(&c, g, it), PC_OK);
        size_t k = c.h.entries;
        assert_true(k == kk || k + 1 == kk || k == kk + 1);
        for (size_t i = 0; i < n; i++) { /* momentum_kernel, or the fold hist1 fuses */
            if (m > 0)
                u[i] = pc_elem_momentum(u[i], g[i], 1.0f, m);
            r[i] = pc_elem_fold(r[i], m > 0 ? u[i] : g[i]);
        }
        assert_int_equal(radix_topk(r, n, k, sel), (long)k);
        size_t bytes = encode(sel, k, n, r, delta, fp16, true, out);
        if (m > 0) { /* the momentum masked where values were sent */
            for (size_t j = 0; j < k; j++)
                u[sel[j]] = 0.0f;
            assert_bits_equal(u, pc_codec_state_momentum(c.st), n);
        }
        assert_int_equal(bytes, c.h.payload);
        assert_memory_equal(out, cpu_payload(&c), bytes);
        assert_bits_equal(r, pc_codec_state_residual(c.st), n);
        /* decode_sparse_kernel over the message's indices and values */
        float *want = gradient(n, 50, false), *got = malloc(n * sizeof(float));
        memcpy(got, want, n * sizeof(float));
        pc_codec_expect_t ex = {.chunk = CHUNK, .n = (uint32_t)n, .iteration = it};
        char err[256];
        if (pc_codec_decode_add(c.c, c.msg, c.len, &ex, -2.0f, want, NULL, err, sizeof(err)))
            fail_msg("decode: %s", err);
        const uint8_t *values = cpu_payload(&c) + c.h.payload - (fp16 ? 2 : 4) * k;
        for (size_t j = 0; j < k; j++)
            got[sel[j]] =
                pc_elem_add_scaled(got[sel[j]], -2.0f, pc_elem_get_value(values, j, fp16));
        assert_bits_equal(got, want, n);
        free(want), free(got), free(g);
    }
    /* NaN anywhere: hist1's check, the CPU's PC_ERANGE. */
    float *g = gradient(n, 49, false);
    g[n / 2] = INFINITY;
    for (size_t i = 0; i < n; i++)
        r[i] = pc_elem_fold(r[i], m > 0 ? pc_elem_momentum(u[i], g[i], 1.0f, m) : g[i]);
    assert_int_equal(radix_topk(r, n, 10, sel), -1);
    assert_int_equal(cpu_compress(&c, g, 3), PC_ERANGE);
    free(g), free(r), free(u), free(sel), free(out);
    cpu_close(&c);
}

static void test_topk(void **state)
{
    (void)state;
    topk("topk:ratio=0.01,momentum=0", 0.01, false, false, 0.0f);
    topk("topk:ratio=0.05,momentum=0,index=delta,values=fp16", 0.05, true, true, 0.0f);
    topk("topk:ratio=0.3,momentum=0,index=delta", 0.3, true, false, 0.0f);
    topk("topk:ratio=0.02,momentum=0.9", 0.02, false, false, 0.9f);
}

/* The boundary search a kernel thread makes over its own bins finds what one pass over all
 * bins finds, whichever thread holds it (find_bin_kernel: 256 threads of 8 bins). */
static void test_find_bin_split(void **state)
{
    (void)state;
    uint32_t hist[PC_ELEM_L1_BINS];
    pc_philox_t g;
    pc_philox_init(&g, 9, 9, 0);
    uint32_t total = 0;
    for (int b = 0; b < PC_ELEM_L1_BINS; b++)
        total += hist[b] = pc_philox_next(&g) % 5 == 0 ? pc_philox_next(&g) % 40 : 0;
    for (uint32_t k = 1; k <= total; k += 1 + k / 7) {
        uint32_t bin = 0, size = 0, left = 0, bin2 = 0, size2 = 0, left2 = 0;
        assert_true(
            pc_elem_find_bin(hist, PC_ELEM_L1_BINS - 1, PC_ELEM_L1_BINS, 0, k, &bin, &size, &left));
        int per = PC_ELEM_L1_BINS / 256, found = 0;
        uint32_t above = 0;
        for (int t = 0; t < 256; t++) {
            int top = PC_ELEM_L1_BINS - 1 - t * per;
            found += pc_elem_find_bin(hist, top, per, above, k, &bin2, &size2, &left2);
            for (int j = 0; j < per; j++)
                above += hist[top - j];
        }
        assert_int_equal(found, 1);
        assert_int_equal(bin2, bin);
        assert_int_equal(size2, size);
        assert_int_equal(left2, left);
        assert_true(left >= 1 && left <= size);
    }
}

/* ---- randomk ----------------------------------------------------------------------------- */

/* randomk_hits_kernel (first_hit: the earliest step drawing each value), then the membership
 * of every index (randomk_member), then encode without indices. */
static void test_randomk(void **state)
{
    (void)state;
    const double ratios[] = {0.01, 0.5, 0.97};
    for (size_t t = 0; t < sizeof(ratios) / sizeof(ratios[0]); t++) {
        size_t n = 7001;
        char spec[64];
        snprintf(spec, sizeof(spec), "randomk:ratio=%g,momentum=0", ratios[t]);
        cpu_t c;
        cpu_open(&c, spec, n);
        float *r = calloc(n, sizeof(float));
        uint32_t *hit = malloc(n * sizeof(uint32_t)), *sel = malloc(n * sizeof(uint32_t));
        uint8_t *out = malloc(c.cap);
        for (uint64_t it = 0; it < 2; it++) {
            float *g = gradient(n, 60 + it, false);
            assert_int_equal(cpu_compress(&c, g, it), PC_OK);
            uint32_t k = c.h.entries, lo = (uint32_t)n - k;
            uint64_t subseq = pc_philox_subsequence(it, CHUNK);
            for (size_t i = 0; i < n; i++) {
                hit[i] = PC_ELEM_NO_HIT;
                r[i] = pc_elem_fold(r[i], g[i]);
            }
            for (uint32_t j = lo; j < n; j++) {
                uint32_t y = pc_elem_randomk_t(j, pc_elem_draw(0x5eedULL, subseq, j - lo));
                if (j < hit[y])
                    hit[y] = j;
            }
            size_t m = 0;
            for (uint32_t i = 0; i < n; i++)
                if (pc_elem_randomk_member(i, (uint32_t)n, k, 0x5eedULL, subseq, hit))
                    sel[m++] = i;
            assert_int_equal(m, k); /* Floyd's algorithm always yields k */
            size_t bytes = encode(sel, k, n, r, false, false, false, out);
            assert_int_equal(bytes, c.h.payload);
            assert_memory_equal(out, cpu_payload(&c), bytes);
            assert_bits_equal(r, pc_codec_state_residual(c.st), n);
            free(g);
        }
        free(r), free(hit), free(sel), free(out);
        cpu_close(&c);
    }
}

/* ---- pieces ------------------------------------------------------------------------------ */

static void test_varint_and_values(void **state)
{
    (void)state;
    const uint32_t xs[] = {
        0,        1,          127, 128, 16383, 16384, (1u << 21) - 1, 1u << 21, (1u << 28) - 1,
        1u << 28, 0xffffffffu};
    for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
        uint8_t a[8] = {0}, b[8] = {0};
        size_t len = pc_wire_varint_put(a, xs[i]);
        assert_int_equal(pc_elem_varint_len(xs[i]), len);
        pc_elem_varint_put(b, xs[i]);
        assert_memory_equal(a, b, sizeof(a));
    }
    /* fp16 values: clamped, rounded as the wire's conversion, read back exactly */
    const float fs[] = {0.0f,  -0.0f,    1.0f,  65504.0f, 65520.0f, 1e9f,
                        -1e9f, 5.96e-8f, 3e-8f, 0.1f,     -2.5e-5f};
    for (size_t i = 0; i < sizeof(fs) / sizeof(fs[0]); i++) {
        uint8_t v[2];
        float left = pc_elem_put_value(v, 0, fs[i], true);
        float sent = pc_elem_get_value(v, 0, true);
        float c = fs[i] > 65504.0f ? 65504.0f : fs[i] < -65504.0f ? -65504.0f : fs[i];
        assert_int_equal(v[0] | v[1] << 8, pc_wire_f32_to_f16(c));
        assert_true(pc_elem_bits(left) == pc_elem_bits(fs[i] - sent));
    }
    assert_int_equal(pc_elem_key(-3.0f), pc_elem_bits(3.0f));
    assert_true(pc_elem_key(NAN) >= PC_ELEM_KEY_NONFINITE);
    assert_true(pc_elem_key(-INFINITY) >= PC_ELEM_KEY_NONFINITE);
    assert_true(pc_elem_key(3.4e38f) < PC_ELEM_KEY_NONFINITE);
    /* curand_uniform's formula is pc_philox_uniform's */
    for (uint32_t x = 0; x < 4000000000u; x += 7777777u)
        assert_true(pc_elem_uniform(x) == pc_philox_uniform(x));
}

/* The momentum correction's element against codec_sparse.c's momentum_fold (dgc: u = m u +
 * g with the clip factor 1 when no clip is set; v += u). */
static void test_momentum(void **state)
{
    (void)state;
    size_t n = 2048;
    cpu_t c;
    cpu_open(&c, "topk:ratio=1,momentum=0.9", n);
    float *u = calloc(n, sizeof(float)), *r = calloc(n, sizeof(float));
    for (uint64_t it = 0; it < 3; it++) {
        float *g = gradient(n, 70 + it, false);
        assert_int_equal(pc_codec_fold(c.c, c.st, g), PC_OK);
        for (size_t i = 0; i < n; i++) {
            u[i] = pc_elem_momentum(u[i], g[i], 1.0f, 0.9f);
            r[i] = pc_elem_fold(r[i], u[i]);
        }
        assert_bits_equal(r, pc_codec_state_residual(c.st), n);
        assert_bits_equal(u, pc_codec_state_momentum(c.st), n);
        /* ratio 1 sends everything: the residual and u are zeroed where sent */
        assert_int_equal(pc_codec_compress_folded(c.c, c.st, it, c.msg, c.cap, &c.len), PC_OK);
        memset(r, 0, n * sizeof(float));
        memset(u, 0, n * sizeof(float));
        free(g);
    }
    free(u), free(r);
    cpu_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16),     cmocka_unit_test(test_qsgd),
        cmocka_unit_test(test_terngrad), cmocka_unit_test(test_efsign),
        cmocka_unit_test(test_topk),     cmocka_unit_test(test_find_bin_split),
        cmocka_unit_test(test_randomk),  cmocka_unit_test(test_varint_and_values),
        cmocka_unit_test(test_momentum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
