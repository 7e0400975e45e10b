/* pc_wire: the compressed-gradient message format (see doc/wire-format.md).
 *
 * Every message is a fixed 40-byte little-endian header followed by a codec-specific
 * payload. The header is self-describing (which codec, which chunk of which iteration, how
 * many elements and entries, how many payload bytes), so an empty message (k = 0) is still
 * a valid message, and a receiver can route, check and reject a message before touching
 * any memory of its own. Fields are encoded byte by byte: the format does not depend on the
 * host's endianness or struct padding. */
#ifndef PC_WIRE_H
#define PC_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PC_WIRE_MAGIC        0x315A4350u /* "PCZ1" read as little-endian bytes */
#define PC_WIRE_VERSION      1
#define PC_WIRE_HEADER_BYTES 40

/* Header flags. */
#define PC_WIRE_F_FP16   0x0001u /* values are IEEE binary16, else binary32 */
#define PC_WIRE_F_DELTA  0x0002u /* indices are delta + LEB128 varints, else u32 */
#define PC_WIRE_F_ROUND2 0x0004u /* powersgd: the second round's factor (Q_w), else P_w */
#define PC_WIRE_F_BITMAP 0x0008u /* indices are a bitmap of n bits, else a list (the smaller) */
#define PC_WIRE_F_KNOWN  (PC_WIRE_F_FP16 | PC_WIRE_F_DELTA | PC_WIRE_F_ROUND2 | PC_WIRE_F_BITMAP)

typedef struct pc_wire_header {
    uint32_t magic;     /* PC_WIRE_MAGIC */
    uint8_t version;    /* PC_WIRE_VERSION */
    uint8_t codec;      /* pc_codec_id_t */
    uint16_t flags;     /* PC_WIRE_F_* */
    uint32_t chunk;     /* chunk id (the sender's and receiver's shared plan) */
    uint32_t n;         /* elements in the chunk */
    uint64_t iteration; /* training iteration the gradient belongs to */
    uint32_t entries;   /* codec-specific count: selected elements, or n for dense codecs */
    uint32_t payload;   /* bytes after the header */
    float scale;        /* codec-specific scale (norm, mean magnitude); 0 when unused */
    uint32_t reserved;  /* must be 0 */
} pc_wire_header_t;

/* Write h into out[0..PC_WIRE_HEADER_BYTES). Thread-safe. */
void pc_wire_header_write(const pc_wire_header_t *h, uint8_t *out);

/* Read and check the codec-independent parts of a header from msg[0..len): length at
 * least a header, magic, version, known flags, reserved zero, payload == len - header,
 * finite non-negative scale. Returns PC_OK or PC_EFORMAT with a message in err; *h is
 * filled either way when len allows (for error messages). Thread-safe. */
int pc_wire_header_read(const void *msg, size_t len, pc_wire_header_t *h, char *err, size_t errlen);

/* LEB128 varint of a 32-bit value: 1..5 bytes. Returns bytes written (out needs 5). */
size_t pc_wire_varint_put(uint8_t *out, uint32_t v);

/* Bytes of v's LEB128 varint: 1..5. Pure. */
static inline size_t pc_wire_varint_len(uint32_t v)
{
    return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

/* Decode one varint from p[0..end): returns bytes consumed, or 0 when truncated, longer
 * than 5 bytes or over 32 bits. */
size_t pc_wire_varint_get(const uint8_t *p, const uint8_t *end, uint32_t *v);

/* IEEE binary16 conversions: round to nearest, ties to even; subnormals, infinities and
 * NaN handled. Exact in the other direction. */
uint16_t pc_wire_f32_to_f16(float f);
float pc_wire_f16_to_f32(uint16_t h);

/* Little-endian scalar loads and stores, byte by byte (any alignment, any host byte
 * order). p must hold the value's size (2, 4 or 8 bytes). Thread-safe. */
static inline void pc_wire_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t pc_wire_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A u64 is its low u32, then its high u32. */
static inline void pc_wire_put_u64(uint8_t *p, uint64_t v)
{
    pc_wire_put_u32(p, (uint32_t)v);
    pc_wire_put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t pc_wire_get_u64(const uint8_t *p)
{
    return (uint64_t)pc_wire_get_u32(p) | (uint64_t)pc_wire_get_u32(p + 4) << 32;
}

/* n floats to and from the wire (little-endian IEEE-754): a copy on little-endian hosts.
 * dst and src do not overlap; dst holds 4 n bytes (put) or n floats (get). Thread-safe. */
static inline void pc_wire_put_f32s(uint8_t *dst, const float *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, 4 * n);
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        pc_wire_put_u32(dst + 4 * i, u);
    }
#endif
}

static inline void pc_wire_get_f32s(float *dst, const uint8_t *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, 4 * n);
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u = pc_wire_get_u32(src + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
#endif
}

static inline void pc_wire_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline uint16_t pc_wire_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

#ifdef __cplusplus
}
#endif
#endif /* PC_WIRE_H */
