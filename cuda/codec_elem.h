/* codec_elem.h: the codec kernels' per-element arithmetic and decisions (cuda/codec_*.cu),
 * in functions a CPU unit test also compiles (elem_base.h says how): the fold and the
 * finiteness check, the momentum correction, fp16 rounding, the quantisers' codes and bit
 * packing and their decoding, the radix select's digits, boundary-bin search and filter
 * decisions, Floyd's membership walk for randomk, and the sparse messages' varints and
 * value bytes. tests/unit/test_codec_elem.c runs them over whole chunks on the CPU, in the
 * kernels' order, and compares the bytes and the residuals with the CPU codecs
 * (src/codec/codec_dense.c, codec_sparse.c), which are the reference. Private; C and CUDA. */
#ifndef PC_CODEC_ELEM_H
#define PC_CODEC_ELEM_H

#include "elem_base.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <curand_kernel.h>
#endif
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_wire.h"

/* fp16's largest finite value (codec_internal.h's PC_CODEC_F16_MAX). */
#define PC_ELEM_F16_MAX 65504.0f
/* The radix select's digits of a magnitude key: bits 30..20, 19..9, 8..0. */
#define PC_ELEM_L1_SHIFT 20
#define PC_ELEM_L2_SHIFT 9
#define PC_ELEM_L1_BINS  2048
#define PC_ELEM_L2_BINS  2048
#define PC_ELEM_L3_BINS  512
/* The key of NaN and infinity and above: every finite key is below it. */
#define PC_ELEM_KEY_NONFINITE 0x7f800000u
/* randomk: no step drew this index. */
#define PC_ELEM_NO_HIT 0xffffffffu

/* ---- fold, checks, momentum ------------------------------------------------------------ */

/* The magnitude key of x: its bits with the sign cleared (orders |x|, NaN above all). */
PC_ELEM uint32_t pc_elem_key(float x)
{
    return pc_elem_bits(x) & 0x7fffffffu;
}

PC_ELEM bool pc_elem_nonfinite(float x)
{
    return (pc_elem_bits(x) & 0x7f800000u) == 0x7f800000u;
}

/* The error-feedback fold of one element: v + g. */
PC_ELEM float pc_elem_fold(float v, float g)
{
    return PC_FADD(v, g);
}

/* The momentum correction of one element (codec_sparse.c, momentum_fold): u = m u + f g,
 * returned; the caller adds it into v (pc_elem_fold). */
PC_ELEM float pc_elem_momentum(float u, float g, float f, float m)
{
    return PC_FADD(PC_FMUL(m, u), PC_FMUL(f, g));
}

/* ---- fp16 -------------------------------------------------------------------------------- */

PC_ELEM float pc_elem_clamp_f16(float x)
{
    return x > PC_ELEM_F16_MAX ? PC_ELEM_F16_MAX : (x < -PC_ELEM_F16_MAX ? -PC_ELEM_F16_MAX : x);
}

/* The binary16 bits of x clamped to fp16's range, rounded to nearest even: the device's
 * conversion instruction, pc_wire_f32_to_f16 on the host. */
PC_ELEM uint16_t pc_elem_f16(float x)
{
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(pc_elem_clamp_f16(x)));
#else
    return pc_wire_f32_to_f16(pc_elem_clamp_f16(x));
#endif
}

PC_ELEM float pc_elem_f16_value(uint16_t h)
{
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    return pc_wire_f16_to_f32(h);
#endif
}

/* ---- the quantisers ---------------------------------------------------------------------- */

enum { PC_ELEM_QSGD, PC_ELEM_TERNGRAD, PC_ELEM_EFSIGN };

/* The value qsgd's code q (signed level q - s) stands for. */
PC_ELEM float pc_elem_qsgd_value(float norm, int q, int s)
{
    return PC_FMUL(norm, PC_FDIV((float)q, (float)s));
}

/* The code of x for quantiser kind (scale: qsgd's norm, terngrad's max, efsign's mean;
 * levels: qsgd's s; draw: the element's Philox word, unused by efsign) and, in *sent, the
 * value it stands for (what error feedback takes out). */
PC_ELEM uint32_t pc_elem_quant_code(int kind, float x, float scale, int levels, uint32_t draw,
                                    float *sent)
{
    if (kind == PC_ELEM_QSGD) {
        int s = levels, lev = 0;
        if (scale > 0) {
            float r = PC_FMUL(PC_FDIV(fabsf(x), scale), (float)s);
            float l = floorf(r);
            lev = (int)l + (pc_elem_uniform(draw) < PC_FSUB(r, l));
            if (lev > s)
                lev = s;
        }
        uint32_t code = (uint32_t)(x < 0 ? s - lev : s + lev);
        *sent = pc_elem_qsgd_value(scale, (int)code - s, s);
        return code;
    }
    if (kind == PC_ELEM_TERNGRAD) {
        uint32_t code = 0;
        if (scale > 0 && pc_elem_uniform(draw) <= PC_FDIV(fabsf(x), scale) && x != 0)
            code = x < 0 ? 2u : 1u;
        *sent = code == 1 ? scale : (code == 2 ? -scale : 0.0f);
        return code;
    }
    uint32_t neg = x < 0;
    *sent = neg ? -scale : scale;
    return neg;
}

/* Put the bits-wide code of the element at bit position `bit` of a word array, which is
 * shared memory on the device (two threads may share a word: atomicOr) and plain memory
 * on the host. */
PC_ELEM void pc_elem_pack(uint32_t *words, uint32_t bit, uint32_t code, uint32_t bits)
{
    uint32_t w = bit / 32, sh = bit % 32;
#if defined(__CUDA_ARCH__)
    atomicOr(&words[w], code << sh);
    if (sh + bits > 32)
        atomicOr(&words[w + 1], code >> (32 - sh));
#else
    words[w] |= code << sh;
    if (sh + bits > 32)
        words[w + 1] |= code >> (32 - sh);
#endif
}

/* Element i's code of a packed little-endian payload (followed by one readable zero byte). */
PC_ELEM uint32_t pc_elem_unpack(const uint8_t *payload, size_t i, uint32_t bits)
{
    size_t bit = i * bits;
    uint32_t two = payload[bit / 8] | (uint32_t)payload[bit / 8 + 1] << 8;
    return (two >> (bit % 8)) & ((1u << bits) - 1u);
}

/* What a dense quantiser's code stands for on the receiving side (hscale: the header's
 * scale); *add false where the CPU adds nothing (terngrad's zero). */
PC_ELEM float pc_elem_quant_value(int kind, uint32_t code, float hscale, int levels, bool *add)
{
    *add = true;
    if (kind == PC_ELEM_QSGD)
        return pc_elem_qsgd_value(hscale, (int)code - levels, levels);
    if (kind == PC_ELEM_TERNGRAD) {
        *add = code != 0;
        return code == 1 ? hscale : -hscale;
    }
    return code ? -hscale : hscale;
}

/* ---- the radix select -------------------------------------------------------------------- */

/* The level's digit of a key: its bin in that level's histogram. */
PC_ELEM uint32_t pc_elem_digit(uint32_t key, int level)
{
    return level == 0   ? key >> PC_ELEM_L1_SHIFT
           : level == 1 ? (key >> PC_ELEM_L2_SHIFT) & (PC_ELEM_L2_BINS - 1)
                        : key & (PC_ELEM_L3_BINS - 1);
}

/* The boundary bin among bins top, top - 1, ..., top - per + 1 of a histogram, `above`
 * keys being in bins above them: the largest b with (keys in bins >= b) >= kleft. On
 * success *bin, *binsize (its count) and *kleft_out (how many of it are still to be
 * selected) are set and true returned; false when the boundary is not in these bins.
 * A kernel thread scans its own bins with the keys above them from a block scan; the CPU
 * calls it once over all bins (top = nbins - 1, per = nbins, above = 0). */
PC_ELEM bool pc_elem_find_bin(const uint32_t *hist, int top, int per, uint32_t above,
                              uint32_t kleft, uint32_t *bin, uint32_t *binsize, uint32_t *kleft_out)
{
    for (int j = 0; j < per; j++) {
        uint32_t c = hist[top - j];
        if (above < kleft && above + c >= kleft) {
            *bin = (uint32_t)(top - j);
            *binsize = c;
            *kleft_out = kleft - above;
            return true;
        }
        above += c;
    }
    return false;
}

/* The k-th key from the three boundary digits. */
PC_ELEM uint32_t pc_elem_key_of_digits(const uint32_t digit[3])
{
    return digit[0] << PC_ELEM_L1_SHIFT | digit[1] << PC_ELEM_L2_SHIFT | digit[2];
}

enum { PC_ELEM_BELOW = -1, PC_ELEM_IN = 0, PC_ELEM_ABOVE = 1, PC_ELEM_DECIDED = 2 };

/* Where a key falls at `level` against the boundary digits found so far (digit[0..level]):
 * PC_ELEM_ABOVE (selected), PC_ELEM_IN (in the boundary bin: a candidate for the next level,
 * or at level 2 a tie at the k-th key), PC_ELEM_BELOW, or PC_ELEM_DECIDED when an earlier
 * level already put it above or below (only candidates of the level before reach a level). */
PC_ELEM int pc_elem_classify(uint32_t key, int level, const uint32_t digit[3])
{
    for (int l = 0; l < level; l++)
        if (pc_elem_digit(key, l) != digit[l])
            return PC_ELEM_DECIDED;
    uint32_t d = pc_elem_digit(key, level);
    return d > digit[level] ? PC_ELEM_ABOVE : d == digit[level] ? PC_ELEM_IN : PC_ELEM_BELOW;
}

/* ---- randomk: Floyd's algorithm, element by element -------------------------------------- */

/* Draw `offset` of the Philox stream (seed, subsequence): cuRAND's device generator, or
 * pc_philox on the host (the same stream, checked by pc_cuda_philox_check). */
PC_ELEM uint32_t pc_elem_draw(uint64_t seed, uint64_t subseq, uint64_t offset)
{
#if defined(__CUDA_ARCH__)
    curandStatePhilox4_32_10_t s;
    curand_init(seed, subseq, offset, &s);
    return curand(&s);
#else
    pc_philox_t g;
    pc_philox_init(&g, seed, subseq, offset);
    return pc_philox_next(&g);
#endif
}

/* Floyd's step j's value from its draw: draw mod (j + 1), by multiply-shift. */
PC_ELEM uint32_t pc_elem_randomk_t(uint32_t j, uint32_t draw)
{
    return (uint32_t)(((uint64_t)draw * ((uint64_t)j + 1)) >> 32);
}

/* Whether index i is in the set Floyd's algorithm ends with, for steps j = n - k .. n - 1
 * drawing from (seed, subseq) from offset 0, given first_hit (for each value, the earliest
 * step that drew it, or PC_ELEM_NO_HIT). The set: every value some step drew, plus each
 * j >= n - k that fell back; step x falls back iff y = t_x was taken before step x: drawn by
 * an earlier step (first_hit[y] < x), or y >= n - k and y itself fell back (y < x), which
 * this walks down. */
PC_ELEM bool pc_elem_randomk_member(uint32_t i, uint32_t n, uint32_t k, uint64_t seed,
                                    uint64_t subseq, const uint32_t *first_hit)
{
    if (first_hit[i] != PC_ELEM_NO_HIT)
        return true;
    uint32_t lo = n - k;
    if (i < lo)
        return false;
    uint32_t cur = i;
    for (;;) { /* fell back at step cur? */
        uint32_t y = pc_elem_randomk_t(cur, pc_elem_draw(seed, subseq, cur - lo));
        if (y == cur)
            return false;
        if (first_hit[y] < cur)
            return true;
        if (y < lo)
            return false;
        cur = y;
    }
}

/* ---- sparse messages --------------------------------------------------------------------- */

/* Bytes of x as a LEB128 varint. */
PC_ELEM uint32_t pc_elem_varint_len(uint32_t x)
{
    return x < (1u << 7) ? 1 : x < (1u << 14) ? 2 : x < (1u << 21) ? 3 : x < (1u << 28) ? 4 : 5;
}

/* The delta encoding's gap before the j-th of ascending indices. */
PC_ELEM uint32_t pc_elem_gap(const uint32_t *idx, size_t j)
{
    return j == 0 ? idx[0] : idx[j] - idx[j - 1] - 1;
}

/* Write x as a varint at p (pc_elem_varint_len(x) bytes). */
PC_ELEM void pc_elem_varint_put(uint8_t *p, uint32_t x)
{
    while (x >= 0x80u) {
        *p++ = (uint8_t)(x | 0x80u);
        x >>= 7;
    }
    *p = (uint8_t)x;
}

/* Write the j-th selected value x into the value section (fp16: 2 bytes, else 4, little
 * endian) and return what error feedback leaves in the residual: x minus what was sent. */
PC_ELEM float pc_elem_put_value(uint8_t *values, size_t j, float x, bool fp16)
{
    if (fp16) {
        uint16_t u = pc_elem_f16(x);
        values[2 * j] = (uint8_t)u;
        values[2 * j + 1] = (uint8_t)(u >> 8);
        return PC_FSUB(x, pc_elem_f16_value(u));
    }
    uint32_t u = pc_elem_bits(x);
    uint8_t *p = values + 4 * j;
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
    return 0.0f; /* x - x */
}

/* The j-th value of a value section. */
PC_ELEM float pc_elem_get_value(const uint8_t *values, size_t j, bool fp16)
{
    if (fp16)
        return pc_elem_f16_value((uint16_t)(values[2 * j] | values[2 * j + 1] << 8));
    const uint8_t *p = values + 4 * j;
    return pc_elem_float(p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* What decode-add writes: dense + scale * value. */
PC_ELEM float pc_elem_add_scaled(float dense, float scale, float value)
{
    return PC_FADD(dense, PC_FMUL(scale, value));
}

#endif /* PC_CODEC_ELEM_H */
