/* pc_philox: the Philox4x32-10 counter-based generator (Salmon et al., SC'11), the CPU
 * reference for every random draw a codec makes.
 *
 * Why Philox: a draw is a pure function of (key, counter), so a sender and a receiver (or a
 * CPU and a GPU) produce the same numbers without sharing state, and any element's draw is
 * computed independently, in any order, by any thread. cuRAND provides the same generator
 * (curand_init(seed, subsequence, offset, &curandStatePhilox4_32_10_t)); the stream layout
 * below follows cuRAND's so that a CUDA codec can reproduce the CPU codecs bit for bit:
 *   key     = (seed low 32 bits, seed high 32 bits)
 *   counter = (j/4 low, j/4 high, subsequence low, subsequence high)
 *   draw j  = word j%4 of philox4x32_10(counter, key)
 * Codecs use subsequence = (iteration << 32) | chunk, so every (iteration, chunk) pair has
 * its own stream. */
#ifndef PC_PHILOX_H
#define PC_PHILOX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Philox4x32-10 on one block: out = philox(ctr, key). Known-answer tests: tests/unit/test_philox.c
 * (Random123's kat_vectors). Pure; thread-safe. */
static inline void pc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0; /* Philox multipliers, from the paper */
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u; /* Weyl key schedule: golden ratio, sqrt(3) - 1 */
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* A stream position: (seed, subsequence) fixed, j the next draw. Plain value type. */
typedef struct pc_philox {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t block[4]; /* outputs of the current counter */
    uint32_t lane;     /* next word of block to hand out; 4 = block not computed */
} pc_philox_t;

/* Position a stream at draw `offset` of (seed, subsequence). */
static inline void pc_philox_init(pc_philox_t *g, uint64_t seed, uint64_t subsequence,
                                  uint64_t offset)
{
    g->key[0] = (uint32_t)seed;
    g->key[1] = (uint32_t)(seed >> 32);
    uint64_t blk = offset / 4;
    g->ctr[0] = (uint32_t)blk;
    g->ctr[1] = (uint32_t)(blk >> 32);
    g->ctr[2] = (uint32_t)subsequence;
    g->ctr[3] = (uint32_t)(subsequence >> 32);
    pc_philox4x32_10(g->ctr, g->key, g->block);
    g->lane = (uint32_t)(offset % 4);
}

/* Next 32-bit draw. */
static inline uint32_t pc_philox_next(pc_philox_t *g)
{
    if (g->lane == 4) {
        /* 64-bit increment of the block counter (words 0 and 1). */
        if (++g->ctr[0] == 0)
            ++g->ctr[1];
        pc_philox4x32_10(g->ctr, g->key, g->block);
        g->lane = 0;
    }
    return g->block[g->lane++];
}

/* A uniform float in (0, 1] from a 32-bit draw, the formula of curand_uniform:
 * x * 2^-32 + 2^-33, rounded to float. */
static inline float pc_philox_uniform(uint32_t x)
{
    return (float)x * 2.3283064365386963e-10f + 1.1641532182693481e-10f;
}

/* The subsequence codecs use for (iteration, chunk). */
static inline uint64_t pc_philox_subsequence(uint64_t iteration, uint32_t chunk)
{
    return (iteration << 32) | chunk;
}

#ifdef __cplusplus
}
#endif
#endif /* PC_PHILOX_H */
