/* pc_wire: header encoding and checking, varints, binary16 conversion. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_wire.h"

void pc_wire_header_write(const pc_wire_header_t *h, uint8_t *out)
{
    uint32_t scale_bits;
    memcpy(&scale_bits, &h->scale, sizeof(scale_bits));
    pc_wire_put_u32(out + 0, h->magic);
    out[4] = h->version;
    out[5] = h->codec;
    pc_wire_put_u16(out + 6, h->flags);
    pc_wire_put_u32(out + 8, h->chunk);
    pc_wire_put_u32(out + 12, h->n);
    pc_wire_put_u64(out + 16, h->iteration);
    pc_wire_put_u32(out + 24, h->entries);
    pc_wire_put_u32(out + 28, h->payload);
    pc_wire_put_u32(out + 32, scale_bits);
    pc_wire_put_u32(out + 36, h->reserved);
}

int pc_wire_header_read(const void *msg, size_t len, pc_wire_header_t *h, char *err, size_t errlen)
{
    const uint8_t *p = msg;
    memset(h, 0, sizeof(*h));
    if (!msg || len < PC_WIRE_HEADER_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "message of %zu bytes is shorter than its %d-byte header", len,
                            PC_WIRE_HEADER_BYTES);
    uint32_t scale_bits = pc_wire_get_u32(p + 32);
    h->magic = pc_wire_get_u32(p);
    h->version = p[4];
    h->codec = p[5];
    h->flags = pc_wire_get_u16(p + 6);
    h->chunk = pc_wire_get_u32(p + 8);
    h->n = pc_wire_get_u32(p + 12);
    h->iteration = pc_wire_get_u64(p + 16);
    h->entries = pc_wire_get_u32(p + 24);
    h->payload = pc_wire_get_u32(p + 28);
    memcpy(&h->scale, &scale_bits, sizeof(h->scale));
    h->reserved = pc_wire_get_u32(p + 36);
    if (h->magic != PC_WIRE_MAGIC)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "bad magic 0x%08x (not a PipeCompress message)", h->magic);
    if (h->version != PC_WIRE_VERSION)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "wire version %u, this build reads version %d",
                            h->version, PC_WIRE_VERSION);
    if (h->flags & ~PC_WIRE_F_KNOWN)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "unknown flags 0x%04x", h->flags);
    if (h->reserved != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "reserved header field is %u, not 0",
                            h->reserved);
    if ((uint64_t)h->payload != (uint64_t)(len - PC_WIRE_HEADER_BYTES))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "header announces %u payload bytes, message carries %zu", h->payload,
                            len - PC_WIRE_HEADER_BYTES);
    if (!isfinite(h->scale) || h->scale < 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "scale %g is not a finite non-negative number",
                            (double)h->scale);
    if (h->entries > h->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%u entries for a chunk of %u elements",
                            h->entries, h->n);
    return PC_OK;
}

size_t pc_wire_varint_put(uint8_t *out, uint32_t v)
{
    size_t i = 0;
    while (v >= 0x80) {
        out[i++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[i++] = (uint8_t)v;
    return i;
}

size_t pc_wire_varint_get(const uint8_t *p, const uint8_t *end, uint32_t *v)
{
    uint32_t x = 0;
    for (size_t i = 0; i < 5; i++) {
        if (p + i >= end)
            return 0;
        uint8_t b = p[i];
        if (i == 4 && b > 0x0f)
            return 0; /* bits beyond 32, or a continuation past 5 bytes */
        x |= (uint32_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

uint16_t pc_wire_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* inf stays inf; NaN stays a (quiet) NaN */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f)
        return (uint16_t)(sign | 0x7c00u); /* overflow to infinity */
    if (e <= 0) {
        /* Subnormal half (or zero): shift the full significand into place, round to even. */
        if (e < -10)
            return sign;
        uint32_t m = man | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = (uint32_t)e << 10 | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++; /* may carry into the exponent: correct, up to infinity */
    return (uint16_t)(sign | half);
}

float pc_wire_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {
            /* Subnormal: normalise. */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
        }
    } else if (exp == 0x1f) {
        x = sign | 0x7f800000u | man << 13;
    } else {
        x = sign | (exp - 15 + 127) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}
