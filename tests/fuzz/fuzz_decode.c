/* fuzz_decode: libFuzzer target for everything that parses untrusted bytes: message headers,
 * every codec's payload validation and decode, varints, and compressor spec strings.
 *
 * Input layout: byte 0 picks the mode and the receiver's codec configuration.
 *  - bit 7 clear: the rest is a raw message, decoded as it is;
 *  - bit 7 set, bit 6 clear: the rest supplies the header's variable fields (codec, flags,
 *    n, entries, scale) and the payload, and the harness writes a well-formed magic,
 *    version and payload length around them, so the fuzzer spends its time in the payload
 *    validators rather than rediscovering the magic;
 *  - bits 7 and 6 set: the rest is a compressor spec string.
 * Invariants checked (abort on violation): a rejected message leaves the dense buffer
 * bit-for-bit untouched; an accepted one writes only finite values. ASan and UBSan catch
 * the rest. Built by `make fuzz` (clang -fsanitize=fuzzer,address,undefined). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Receivers: every codec and every flag combination it accepts. */
static const char *const specs[] = {
    "none",
    "fp16",
    "topk:ratio=0.01",
    "topk:ratio=0.25,index=delta,values=fp16",
    "threshold:tau=1e30",
    "dgc:ratio=0.01",
    "dgc:ratio=0.1,warmup=3,index=delta",
    "randomk:ratio=0.05",
    "randomk:ratio=0.5,values=fp16",
    "threshold:tau=0.1",
    "threshold:tau=0.1,index=delta,values=fp16",
    "qsgd:levels=16",
    "qsgd:levels=1",
    "qsgd:levels=127",
    "terngrad",
    "efsign",
    "powersgd:rank=2",
    "powersgd:rank=1,ef=off",
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))
/* Largest n the harness decodes into (keeps each run fast); bigger ones must be rejected
 * by the expectation check anyway. */
#define MAX_N 4096

static void decode_one(const pc_codec_t *c, const uint8_t *msg, size_t len)
{
    pc_wire_header_t h;
    char err[256];
    /* Expect what the header claims (so deeper checks are reached), bounded. */
    uint32_t n = len >= PC_WIRE_HEADER_BYTES ? pc_wire_get_u32(msg + 12) : 1;
    uint32_t chunk = len >= PC_WIRE_HEADER_BYTES ? pc_wire_get_u32(msg + 8) : 0;
    if (n == 0 || n > MAX_N)
        n = 1 + n % MAX_N;
    static float dense[MAX_N], before[MAX_N];
    for (uint32_t i = 0; i < n; i++)
        dense[i] = before[i] = (float)i * 0.5f - 3.0f;
    pc_codec_expect_t want = {.chunk = chunk, .n = n, .any_iteration = true};
    if (pc_codec_spec(c)->id == PC_CODEC_POWERSGD && len >= PC_WIRE_HEADER_BYTES) {
        /* powersgd: the round the flag names (the other one for odd chunks: out of turn)
         * and the header's entries, bounded (a factor is summed into dense[0..entries)). */
        int r2 = (pc_wire_get_u16(msg + 6) & PC_WIRE_F_ROUND2) != 0;
        want.round = (r2 ^ (int)(chunk & 1)) ? 2 : 1;
        want.entries = pc_wire_get_u32(msg + 24);
        if (want.entries == 0 || want.entries > n)
            want.entries = 1 + want.entries % n;
    }
    int rc = pc_codec_decode_add(c, msg, len, &want, 0.5f, dense, &h, err, sizeof(err));
    if (rc != PC_OK) {
        if (memcmp(dense, before, sizeof(float) * n) != 0)
            abort(); /* a rejected message wrote to the buffer */
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite(dense[i]))
            abort(); /* an accepted message produced a non-finite value */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    const uint8_t *rest = data + 1;
    size_t len = size - 1;
    if ((mode & 0xc0) == 0xc0) {
        char text[600];
        size_t m = len < sizeof(text) - 1 ? len : sizeof(text) - 1;
        memcpy(text, rest, m);
        text[m] = '\0';
        pc_codec_spec_t spec;
        char err[256];
        if (pc_codec_spec_parse(text, &spec, err, sizeof(err)) == PC_OK) {
            char buf[512];
            pc_codec_spec_format(&spec, buf, sizeof(buf));
            pc_codec_spec_t again;
            /* The canonical form parses back to the same configuration. */
            if (pc_codec_spec_parse(buf, &again, err, sizeof(err)) != PC_OK ||
                again.id != spec.id || again.ef != spec.ef || again.levels != spec.levels ||
                again.rank != spec.rank)
                abort();
        }
        return 0;
    }
    pc_codec_spec_t spec;
    char err[256];
    if (pc_codec_spec_parse(specs[(mode & 0x3f) % NSPECS], &spec, err, sizeof(err)) != PC_OK)
        abort();
    spec.seed = 7;
    pc_codec_t *c;
    if (pc_codec_create(&spec, &c) != PC_OK)
        return 0;
    if (mode & 0x80) {
        /* Structured: codec(1) flags(2) n(2) entries(2) scale(4), then the payload. */
        if (len >= 11) {
            uint8_t *msg = malloc(PC_WIRE_HEADER_BYTES + len - 11);
            if (msg) {
                pc_wire_header_t h = {.magic = PC_WIRE_MAGIC, .version = PC_WIRE_VERSION};
                h.codec = rest[0] % PC_CODEC_COUNT;
                h.flags = pc_wire_get_u16(rest + 1) & PC_WIRE_F_KNOWN;
                h.n = 1 + pc_wire_get_u16(rest + 3) % MAX_N;
                h.entries = pc_wire_get_u16(rest + 5) % (h.n + 1);
                uint32_t sb = pc_wire_get_u32(rest + 7);
                memcpy(&h.scale, &sb, sizeof(h.scale));
                h.payload = (uint32_t)(len - 11);
                pc_wire_header_write(&h, msg);
                memcpy(msg + PC_WIRE_HEADER_BYTES, rest + 11, len - 11);
                decode_one(c, msg, PC_WIRE_HEADER_BYTES + len - 11);
                free(msg);
            }
        }
    } else {
        decode_one(c, rest, len);
        uint32_t v;
        (void)pc_wire_varint_get(rest, rest + len, &v);
    }
    pc_codec_destroy(c);
    return 0;
}
