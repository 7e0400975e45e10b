/* test_wire: header round trip and every header check; little-endian scalars; varints;
 * binary16 conversion against the compiler's _Float16 (round to nearest even) on edge cases
 * and random floats, and exhaustively in the other direction. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_wire.h"

static pc_wire_header_t sample(void)
{
    pc_wire_header_t h = {.magic = PC_WIRE_MAGIC,
                          .version = PC_WIRE_VERSION,
                          .codec = 2,
                          .flags = PC_WIRE_F_DELTA,
                          .chunk = 77,
                          .n = 1000,
                          .iteration = 0x123456789ull,
                          .entries = 10,
                          .payload = 24,
                          .scale = 0.5f};
    return h;
}

static void test_header_round_trip(void **state)
{
    (void)state;
    uint8_t buf[PC_WIRE_HEADER_BYTES + 24] = {0};
    pc_wire_header_t h = sample(), r;
    pc_wire_header_write(&h, buf);
    assert_int_equal(buf[0], 'P');
    assert_int_equal(buf[1], 'C');
    assert_int_equal(buf[2], 'Z');
    assert_int_equal(buf[3], '1');
    char err[256];
    assert_int_equal(pc_wire_header_read(buf, sizeof(buf), &r, err, sizeof(err)), PC_OK);
    assert_memory_equal(&h, &r, sizeof(h));
}

static int read_mutated(void (*mutate)(pc_wire_header_t *), size_t len_delta, char *err)
{
    uint8_t buf[PC_WIRE_HEADER_BYTES + 64] = {0};
    pc_wire_header_t h = sample(), r;
    mutate(&h);
    pc_wire_header_write(&h, buf);
    return pc_wire_header_read(buf, PC_WIRE_HEADER_BYTES + 24 + len_delta, &r, err, 256);
}
static void m_magic(pc_wire_header_t *h)
{
    h->magic ^= 1;
}
static void m_version(pc_wire_header_t *h)
{
    h->version = 2;
}
static void m_flags(pc_wire_header_t *h)
{
    h->flags = 0x10;
}
static void m_reserved(pc_wire_header_t *h)
{
    h->reserved = 1;
}
static void m_nan(pc_wire_header_t *h)
{
    h->scale = NAN;
}
static void m_inf(pc_wire_header_t *h)
{
    h->scale = INFINITY;
}
static void m_neg(pc_wire_header_t *h)
{
    h->scale = -1;
}
static void m_entries(pc_wire_header_t *h)
{
    h->entries = 1001;
}
static void m_none(pc_wire_header_t *h)
{
    (void)h;
}
/* The accepted side of the bounds above: as many entries as elements, a scale of +0. */
static void m_entries_n(pc_wire_header_t *h)
{
    h->entries = h->n;
}
static void m_scale_zero(pc_wire_header_t *h)
{
    h->scale = 0.0f;
}
static void m_scale_tiny_neg(pc_wire_header_t *h)
{
    h->scale = -FLT_TRUE_MIN;
}

static void test_header_rejections(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(read_mutated(m_none, 0, err), PC_OK);
    assert_int_equal(read_mutated(m_magic, 0, err), PC_EFORMAT);
    assert_non_null(strstr(err, "magic"));
    assert_int_equal(read_mutated(m_version, 0, err), PC_EFORMAT);
    assert_string_equal(err, "wire version 2, this build reads version 1");
    assert_int_equal(read_mutated(m_flags, 0, err), PC_EFORMAT);
    assert_int_equal(read_mutated(m_reserved, 0, err), PC_EFORMAT);
    assert_int_equal(read_mutated(m_nan, 0, err), PC_EFORMAT);
    assert_non_null(strstr(err, "scale"));
    assert_int_equal(read_mutated(m_inf, 0, err), PC_EFORMAT);
    assert_int_equal(read_mutated(m_neg, 0, err), PC_EFORMAT);
    assert_int_equal(read_mutated(m_entries, 0, err), PC_EFORMAT);
    assert_string_equal(err, "1001 entries for a chunk of 1000 elements");
    assert_int_equal(read_mutated(m_entries_n, 0, err), PC_OK);
    assert_int_equal(read_mutated(m_scale_zero, 0, err), PC_OK);
    assert_int_equal(read_mutated(m_scale_tiny_neg, 0, err), PC_EFORMAT);
    assert_non_null(strstr(err, "not a finite non-negative number"));
    assert_int_equal(read_mutated(m_none, 1, err), PC_EFORMAT); /* oversized */
    assert_string_equal(err, "header announces 24 payload bytes, message carries 25");
    assert_int_equal(read_mutated(m_none, (size_t)-1, err), PC_EFORMAT); /* truncated */
    uint8_t tiny[10] = {0};
    pc_wire_header_t r;
    assert_int_equal(pc_wire_header_read(tiny, sizeof(tiny), &r, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "message of 10 bytes is shorter than its 40-byte header");
    assert_int_equal(pc_wire_header_read(NULL, 100, &r, err, sizeof(err)), PC_EFORMAT);
    /* The length bound on both sides: a header alone (no payload) is a message, one byte
     * less is not. */
    uint8_t head[PC_WIRE_HEADER_BYTES];
    pc_wire_header_t h = sample();
    h.payload = 0;
    pc_wire_header_write(&h, head);
    assert_int_equal(pc_wire_header_read(head, sizeof(head), &r, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_wire_header_read(head, sizeof(head) - 1, &r, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "message of 39 bytes is shorter than its 40-byte header");
}

/* Scalars are little-endian byte by byte, whatever the host; u64 is low word first. */
static void test_scalars(void **state)
{
    (void)state;
    uint8_t buf[9] = {0};
    pc_wire_put_u16(buf, 0xbeefu);
    assert_int_equal(buf[0], 0xef);
    assert_int_equal(buf[1], 0xbe);
    assert_int_equal(pc_wire_get_u16(buf), 0xbeefu);
    pc_wire_put_u32(buf, 0x12345678u);
    const uint8_t le32[4] = {0x78, 0x56, 0x34, 0x12};
    assert_memory_equal(buf, le32, 4);
    assert_int_equal(pc_wire_get_u32(buf), 0x12345678u);
    const uint64_t vals[] = {0,         1, 0xffffffffull, 0x100000000ull, 0x0123456789abcdefull,
                             UINT64_MAX};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        buf[8] = 0xa5; /* a canary: exactly 8 bytes are written */
        pc_wire_put_u64(buf, vals[i]);
        assert_int_equal(buf[8], 0xa5);
        for (int b = 0; b < 8; b++)
            assert_int_equal(buf[b], (uint8_t)(vals[i] >> (8 * b)));
        assert_true(pc_wire_get_u64(buf) == vals[i]);
        /* The two u32 halves, low first. */
        assert_int_equal(pc_wire_get_u32(buf), (uint32_t)vals[i]);
        assert_int_equal(pc_wire_get_u32(buf + 4), (uint32_t)(vals[i] >> 32));
    }
    /* Unaligned. */
    pc_wire_put_u64(buf + 1, 0x1122334455667788ull);
    assert_true(pc_wire_get_u64(buf + 1) == 0x1122334455667788ull);
    assert_int_equal(buf[1], 0x88);
}

static void test_varints(void **state)
{
    (void)state;
    uint8_t buf[5];
    const uint32_t vals[] = {0,     1,        127,      128,       300,        16383,
                             16384, 0x1fffff, 0x200000, 0xfffffff, 0x10000000, 0xffffffffu};
    const size_t lens[] = {1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 5};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        size_t n = pc_wire_varint_put(buf, vals[i]);
        assert_int_equal(n, lens[i]);
        uint32_t v = 0;
        assert_int_equal(pc_wire_varint_get(buf, buf + n, &v), n);
        assert_int_equal(v, vals[i]);
        if (n > 1) /* truncated */
            assert_int_equal(pc_wire_varint_get(buf, buf + n - 1, &v), 0);
    }
    uint32_t v;
    const uint8_t too_long[6] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    assert_int_equal(pc_wire_varint_get(too_long, too_long + 6, &v), 0);
    const uint8_t too_big[5] = {0xff, 0xff, 0xff, 0xff, 0x1f}; /* 2^35 - 1 */
    assert_int_equal(pc_wire_varint_get(too_big, too_big + 5, &v), 0);
    /* The fifth byte's bound on both sides: 0x0f (2^32 - 1) read, 0x10 (2^32) refused. */
    const uint8_t top[5] = {0xff, 0xff, 0xff, 0xff, 0x0f}, over[5] = {0x80, 0x80, 0x80, 0x80, 0x10};
    assert_int_equal(pc_wire_varint_get(top, top + 5, &v), 5);
    assert_int_equal(v, 0xffffffffu);
    assert_int_equal(pc_wire_varint_get(over, over + 5, &v), 0);
    assert_int_equal(pc_wire_varint_get(too_big, too_big, &v), 0);
}

static uint16_t ref_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, sizeof(u));
    return u;
}

static void test_f16_matches_compiler(void **state)
{
    (void)state;
    const float edges[] = {
        0.0f,           -0.0f,          1.0f,     -1.0f,          65504.0f,       65519.0f,
        65520.0f,       1e9f,           -1e9f,    6.1035156e-05f, 6.0975552e-05f, 5.9604645e-08f,
        2.9802322e-08f, 2.9802326e-08f, 1e-10f,   0.333333333f,   1.0009765625f,  1.00048828125f,
        1.00146484375f, INFINITY,       -INFINITY};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        assert_int_equal(pc_wire_f32_to_f16(edges[i]), ref_f16(edges[i]));
    uint16_t qn = pc_wire_f32_to_f16(NAN);
    assert_true((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0);
    pc_philox_t g;
    pc_philox_init(&g, 1, 2, 0);
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = pc_philox_next(&g);
        /* Bias exponents into and around the binary16 range. */
        if (i % 2)
            bits = (bits & 0x807fffffu) | ((uint32_t)(100 + (bits >> 23) % 60) << 23);
        float f;
        memcpy(&f, &bits, sizeof(f));
        if (isnan(f))
            continue;
        if (pc_wire_f32_to_f16(f) != ref_f16(f))
            fail_msg("f32 %a (0x%08x): got 0x%04x, want 0x%04x", (double)f, bits,
                     pc_wire_f32_to_f16(f), ref_f16(f));
    }
}

static void test_f16_to_f32_exhaustive(void **state)
{
    (void)state;
    for (uint32_t u = 0; u < 65536; u++) {
        _Float16 h;
        uint16_t hb = (uint16_t)u;
        memcpy(&h, &hb, sizeof(h));
        float want = (float)h, got = pc_wire_f16_to_f32(hb);
        if (isnan(want)) {
            assert_true(isnan(got));
            continue;
        }
        assert_memory_equal(&got, &want, sizeof(float));
        assert_int_equal(pc_wire_f32_to_f16(got), hb); /* exact round trip */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_header_rejections),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_varints),
        cmocka_unit_test(test_f16_matches_compiler),
        cmocka_unit_test(test_f16_to_f32_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
