/* pc_select: radix selection of the largest magnitudes (see pc_select.h for the method). */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_select.h"

/* Key bits: 31 (sign cleared). Level 1: bits 30..20 (11 bits: exponent and 3 mantissa
 * bits, 1/8-octave bins). Level 2: bits 19..9. Level 3: bits 8..0. */
#define L1_SHIFT 20
#define L1_BINS 2048
#define L2_SHIFT 9
#define L2_BINS 2048
#define L3_BINS 512
/* Keys at or above this are infinities or NaNs (exponent all ones). */
#define KEY_NONFINITE 0x7f800000u
/* Interleaved histogram copies in pass 1: gradients crowd into few bins, and one copy
 * would make every increment wait for the previous one to the same bin. */
#define HCOPIES 4
/* Block of the skip test in pass 2: 16 keys = one 64-byte line of floats. */
#define BLOCK 16

struct pc_select {
    uint32_t *cand; /* candidate indices (keys in the boundary bin) */
    size_t cand_cap;
    uint32_t *def;  /* indices certainly selected */
    size_t def_cap;
    uint32_t hist[HCOPIES][L1_BINS];
};

int pc_select_create(pc_select_t **out)
{
    pc_select_t *s = calloc(1, sizeof(*s));
    if (!s)
        return PC_ENOMEM;
    *out = s;
    return PC_OK;
}

void pc_select_destroy(pc_select_t *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->def);
    free(s);
}

static inline uint32_t key_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u & 0x7fffffffu;
}

static int reserve(uint32_t **buf, size_t *cap, size_t want)
{
    if (*cap >= want)
        return PC_OK;
    uint32_t *p = realloc(*buf, sizeof(uint32_t) * (want ? want : 1));
    if (!p)
        return PC_ENOMEM;
    *buf = p;
    *cap = want;
    return PC_OK;
}

/* Pass 1: level-1 histogram into hist[0] (summed copies), optionally folding x += g. */
static void histogram_l1(pc_select_t *s, float *x, const float *g, size_t n)
{
    memset(s->hist, 0, sizeof(s->hist));
    size_t i = 0;
    if (g) {
        for (; i + HCOPIES <= n; i += HCOPIES)
            for (int c = 0; c < HCOPIES; c++) {
                float v = x[i + c] + g[i + c];
                x[i + c] = v;
                s->hist[c][key_of(v) >> L1_SHIFT]++;
            }
        for (; i < n; i++) {
            x[i] += g[i];
            s->hist[0][key_of(x[i]) >> L1_SHIFT]++;
        }
    } else {
        for (; i + HCOPIES <= n; i += HCOPIES)
            for (int c = 0; c < HCOPIES; c++)
                s->hist[c][key_of(x[i + c]) >> L1_SHIFT]++;
        for (; i < n; i++)
            s->hist[0][key_of(x[i]) >> L1_SHIFT]++;
    }
    for (int b = 0; b < L1_BINS; b++)
        for (int c = 1; c < HCOPIES; c++)
            s->hist[0][b] += s->hist[c][b];
}

/* The bin holding the k-th largest (1 <= k <= total): scanning from the top, the first bin
 * where the running count reaches k. *above gets the count in higher bins. */
static int find_bin(const uint32_t *hist, int bins, size_t k, size_t *above)
{
    size_t acc = 0;
    for (int b = bins - 1; b >= 0; b--) {
        if (acc + hist[b] >= k) {
            *above = acc;
            return b;
        }
        acc += hist[b];
    }
    *above = acc;
    return 0;
}

/* Within candidates whose keys share level-1 bin, find the exact k-th largest key T
 * (1 <= k <= ncand); *above_t gets how many candidates have keys > T. */
static uint32_t exact_key(const float *x, const uint32_t *cand, size_t ncand, size_t k,
                          size_t *above_t)
{
    uint32_t h2[L2_BINS], h3[L3_BINS];
    memset(h2, 0, sizeof(h2));
    for (size_t j = 0; j < ncand; j++)
        h2[(key_of(x[cand[j]]) >> L2_SHIFT) & (L2_BINS - 1)]++;
    size_t above2;
    uint32_t b2 = (uint32_t)find_bin(h2, L2_BINS, k, &above2);
    memset(h3, 0, sizeof(h3));
    for (size_t j = 0; j < ncand; j++) {
        uint32_t key = key_of(x[cand[j]]);
        if (((key >> L2_SHIFT) & (L2_BINS - 1)) == b2)
            h3[key & (L3_BINS - 1)]++;
    }
    size_t above3;
    uint32_t b3 = (uint32_t)find_bin(h3, L3_BINS, k - above2, &above3);
    uint32_t t = (key_of(x[cand[0]]) >> L1_SHIFT << L1_SHIFT) | b2 << L2_SHIFT | b3;
    *above_t = above2 + above3;
    return t;
}

/* Pass 2: indices with key >= hi into def (ascending), with lo <= key < hi into cand. */
static void collect(const float *x, size_t n, uint32_t lo, uint32_t hi, uint32_t *def,
                    size_t *ndef, uint32_t *cand, size_t *ncand)
{
    size_t nd = 0, nc = 0, i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t m = 0;
        for (int j = 0; j < BLOCK; j++) { /* vectorisable: max of the block's keys */
            uint32_t key = key_of(x[i + (size_t)j]);
            m = key > m ? key : m;
        }
        if (m < lo)
            continue;
        for (int j = 0; j < BLOCK; j++) {
            uint32_t key = key_of(x[i + (size_t)j]);
            if (key >= hi)
                def[nd++] = (uint32_t)(i + (size_t)j);
            else if (key >= lo)
                cand[nc++] = (uint32_t)(i + (size_t)j);
        }
    }
    for (; i < n; i++) {
        uint32_t key = key_of(x[i]);
        if (key >= hi)
            def[nd++] = (uint32_t)i;
        else if (key >= lo)
            cand[nc++] = (uint32_t)i;
    }
    *ndef = nd;
    *ncand = nc;
}

long pc_select_topk(pc_select_t *s, float *x, const float *g, size_t n, size_t k, uint32_t *idx)
{
    if (k > n)
        k = n;
    histogram_l1(s, x, g, n);
    for (int b = (int)(KEY_NONFINITE >> L1_SHIFT); b < L1_BINS; b++)
        if (s->hist[0][b])
            return PC_ERANGE;
    if (k == 0)
        return 0;
    if (k == n) {
        for (size_t i = 0; i < n; i++)
            idx[i] = (uint32_t)i;
        return (long)n;
    }
    size_t above;
    uint32_t b1 = (uint32_t)find_bin(s->hist[0], L1_BINS, k, &above);
    size_t in_bin = s->hist[0][b1];
    if (reserve(&s->cand, &s->cand_cap, in_bin) != PC_OK ||
        reserve(&s->def, &s->def_cap, above) != PC_OK)
        return PC_ENOMEM;
    size_t ndef, ncand;
    collect(x, n, b1 << L1_SHIFT, (b1 + 1) << L1_SHIFT, s->def, &ndef, s->cand, &ncand);
    size_t need = k - ndef; /* 1..ncand */
    /* Keep candidates with key > t, and key == t while ties are still needed. */
    size_t above_t = 0;
    uint32_t t = need == ncand ? 0 : exact_key(x, s->cand, ncand, need, &above_t);
    size_t ties = need - above_t;
    size_t nsel = 0;
    for (size_t j = 0; j < ncand; j++) {
        uint32_t key = key_of(x[s->cand[j]]);
        if (key > t || (key == t && ties > 0)) {
            if (key == t && need != ncand)
                ties--;
            s->cand[nsel++] = s->cand[j]; /* compact in place: still ascending */
        }
    }
    /* Merge the two ascending lists. */
    size_t a = 0, c = 0, o = 0;
    while (a < ndef && c < nsel)
        idx[o++] = s->def[a] < s->cand[c] ? s->def[a++] : s->cand[c++];
    while (a < ndef)
        idx[o++] = s->def[a++];
    while (c < nsel)
        idx[o++] = s->cand[c++];
    return (long)o;
}

size_t pc_select_above(const float *x, size_t n, float t, uint32_t *idx, size_t cap)
{
    uint32_t lo = key_of(t);
    size_t count = 0, i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t m = 0;
        for (int j = 0; j < BLOCK; j++) {
            uint32_t key = key_of(x[i + (size_t)j]);
            m = key > m ? key : m;
        }
        if (m < lo)
            continue;
        for (int j = 0; j < BLOCK; j++)
            if (key_of(x[i + (size_t)j]) >= lo) {
                if (count < cap)
                    idx[count] = (uint32_t)(i + (size_t)j);
                count++;
            }
    }
    for (; i < n; i++)
        if (key_of(x[i]) >= lo) {
            if (count < cap)
                idx[count] = (uint32_t)i;
            count++;
        }
    return count;
}

float pc_select_kth_magnitude(pc_select_t *s, const float *x, size_t n, size_t k)
{
    if (k == 0 || n == 0)
        return 0.0f;
    if (k > n)
        k = n;
    histogram_l1(s, (float *)(uintptr_t)x, NULL, n); /* no fold: x is only read */
    size_t above;
    uint32_t b1 = (uint32_t)find_bin(s->hist[0], L1_BINS, k, &above);
    if (reserve(&s->cand, &s->cand_cap, s->hist[0][b1]) != PC_OK ||
        reserve(&s->def, &s->def_cap, above) != PC_OK)
        return 0.0f;
    size_t ndef, ncand;
    collect(x, n, b1 << L1_SHIFT, (b1 + 1) << L1_SHIFT, s->def, &ndef, s->cand, &ncand);
    size_t above_t;
    uint32_t t = exact_key(x, s->cand, ncand, k - ndef, &above_t);
    float f;
    memcpy(&f, &t, sizeof(f));
    return f;
}
