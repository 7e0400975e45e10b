// pc_codec.cu: the codecs' compress and decode-add paths as CUDA kernels, giving the bytes
// of the CPU codecs (src/codec/codec_dense.c, src/codec/codec_sparse.c), which are the reference.
//
// Equal bits: float arithmetic goes through the _rn intrinsics (never contracted into a
// fused multiply-add, as the C code is compiled without contraction); reductions follow
// the canonical order (codec_impl.h, pc_codec__sum); random draws come from cuRAND's
// Philox, curand_init(seed, subsequence(iteration, chunk), offset), the stream pc_philox
// computes on the CPU; selection is exact (the k-th largest key, ties to the lower index).
//
// Top-k without sorting the input: a radix select on the magnitude keys (the float's bits
// with the sign cleared), most significant digit first, 11 + 11 + 9 bits. Pass 1 reads the
// chunk once for the first digit's histogram (fused with the error-feedback fold); pass 2
// reads it again and keeps, in one go, the indices above the boundary bin (all selected)
// and the keys in it (the candidates), building the next digit's histogram of the
// candidates; the last two digits run over the candidates only. Ties at the k-th key are
// resolved by index. The k indices are then put in index order by CUB's radix sort of k
// keys (not of n). About two reads of the input on typical data, as AIR top-k.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <math.h>
#include <string.h>

#include <new>

extern "C" {
#include "codec/codec_impl.h"
#include "pipecompress/pc_philox.h"
}
#include "pc_codec_cuda.h"
#include "pc_device.cuh"

namespace
{

constexpr int TPB = 256; // threads per block everywhere
constexpr unsigned KEY_NONFINITE = 0x7f800000u;
constexpr int L1_SHIFT = 20, L2_SHIFT = 9; // digits: bits 30..20, 19..9, 8..0
constexpr int L1_BINS = 2048, L2_BINS = 2048, L3_BINS = 512;
constexpr int PACK_TILE = 1024;          // elements per block of the bit-packing kernels
constexpr unsigned NO_HIT = 0xffffffffu; // randomk: no step drew this index

// Device-side bookkeeping of one compress call (zeroed at its start).
struct dstate {
    unsigned bad;              // a non-finite value was seen
    unsigned maxkey;           // terngrad: largest key
    unsigned nsel, ncand, neq; // list lengths (selected, candidates, ties at the k-th key)
    unsigned digit[3];         // the boundary bin of each level
    unsigned kleft;            // how many are still to be selected below the levels found
    unsigned binsize[3];       // the count in each level's boundary bin
    unsigned key;              // the k-th key, once the three digits are known
    unsigned count;            // DeviceSelect's count
    unsigned vbytes;           // delta encoding: bytes of the index section
    double sum;                // canonical sum
};

__device__ __forceinline__ unsigned key_of(float x)
{
    return __float_as_uint(x) & 0x7fffffffu;
}

__device__ __forceinline__ bool nonfinite(float x)
{
    return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

// curand_uniform's formula, as pc_philox_uniform: x * 2^-32 + 2^-33 (the product is exact).
__device__ __forceinline__ float uniform_of(unsigned x)
{
    return __fadd_rn(__fmul_rn(__uint2float_rn(x), 2.3283064365386963e-10f),
                     1.1641532182693481e-10f);
}

__device__ __forceinline__ unsigned draw_at(unsigned long long seed, unsigned long long subseq,
                                            unsigned long long offset)
{
    curandStatePhilox4_32_10_t s;
    curand_init(seed, subseq, offset, &s);
    return curand(&s);
}

// The four draws 4 q .. 4 q + 3 of a stream: one Philox block.
__device__ __forceinline__ uint4 draws4(unsigned long long seed, unsigned long long subseq,
                                        unsigned long long q)
{
    curandStatePhilox4_32_10_t s;
    curand_init(seed, subseq, 4 * q, &s);
    return curand4(&s);
}

__device__ __forceinline__ unsigned word_of(uint4 w, int j)
{
    return j == 0 ? w.x : (j == 1 ? w.y : (j == 2 ? w.z : w.w));
}

// Slot in a list for each thread of a warp whose p is true: one atomic per warp. Every
// thread of the warp must call it (the loops below keep warps converged).
__device__ __forceinline__ unsigned warp_append(bool p, unsigned *counter)
{
    unsigned mask = __ballot_sync(0xffffffffu, p);
    if (!mask)
        return 0;
    int lane = threadIdx.x & 31, leader = __ffs(mask) - 1;
    unsigned base = 0;
    if (lane == leader)
        base = atomicAdd(counter, (unsigned)__popc(mask));
    base = __shfl_sync(0xffffffffu, base, leader);
    return base + (unsigned)__popc(mask & ((1u << lane) - 1u));
}

// Slots for each thread's c items of a list: one atomic per block. Every thread of the block
// calls it, the same number of times.
__device__ __forceinline__ unsigned block_append(unsigned c, unsigned *counter)
{
    typedef cub::BlockScan<unsigned, 256> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ unsigned base;
    unsigned off, total;
    scan_t(tmp).ExclusiveSum(c, off, total);
    if (threadIdx.x == 0)
        base = total ? atomicAdd(counter, total) : 0;
    __syncthreads();
    unsigned r = base + off;
    __syncthreads(); // tmp and base are reused by the next call
    return r;
}

__device__ __forceinline__ void flag_bad(bool any, dstate *st)
{
    if (__syncthreads_or(any) && threadIdx.x == 0)
        atomicOr(&st->bad, 1u);
}

__device__ __forceinline__ float clamp_f16(float x)
{
    return x > PC_CODEC_F16_MAX ? PC_CODEC_F16_MAX
                                : (x < -PC_CODEC_F16_MAX ? -PC_CODEC_F16_MAX : x);
}

// v[i], or with g the error-feedback fold v[i] += g[i] written back and returned.
__device__ __forceinline__ float fold_at(float *v, const float *g, size_t i)
{
    float x = v[i];
    if (g) {
        x = __fadd_rn(x, g[i]);
        v[i] = x;
    }
    return x;
}

// A block's shared histogram: cleared before use, added into the global one after.
__device__ __forceinline__ void smem_clear(unsigned *h, int bins)
{
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        h[b] = 0;
    __syncthreads();
}

__device__ __forceinline__ void smem_flush(const unsigned *h, int bins, unsigned *global)
{
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (h[b])
            atomicAdd(&global[b], h[b]);
}

// ---- fold -----------------------------------------------------------------------------

// v += g (g may be NULL: check only); flags non-finite v.
__global__ void fold_kernel(float *v, const float *g, size_t n, dstate *st)
{
    bool bad = false;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        bad |= nonfinite(fold_at(v, g, i));
    }
    flag_bad(bad, st);
}

// The momentum correction: u = m u + f g; v += u (codec_sparse.c, momentum_fold).
__global__ void momentum_kernel(float *u, float *v, const float *g, float f, float m, size_t n,
                                dstate *st)
{
    bool bad = false;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float ui = __fadd_rn(__fmul_rn(m, u[i]), __fmul_rn(f, g[i]));
        u[i] = ui;
        float x = __fadd_rn(v[i], ui);
        v[i] = x;
        bad |= nonfinite(x);
    }
    flag_bad(bad, st);
}

// ---- the canonical sum (codec_impl.h) -------------------------------------------------

__device__ double tree256(double acc)
{
    __shared__ double lane[PC_CODEC_SUM_LANES];
    lane[threadIdx.x] = acc;
    __syncthreads();
    for (int s = PC_CODEC_SUM_LANES / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            lane[threadIdx.x] = __dadd_rn(lane[threadIdx.x], lane[threadIdx.x + s]);
        __syncthreads();
    }
    return lane[0];
}

// Level 1: block b of 2048 elements -> p[b]. squares: x^2, else |x|. With g, the terms
// are of x + g, which is also written back (the error-feedback fold, fused).
__global__ void sum_blocks_kernel(float *x, const float *g, size_t n, int squares, double *p)
{
    size_t base = (size_t)blockIdx.x * PC_CODEC_SUM_BLOCK;
    double acc = 0.0;
    for (int j = 0; j < PC_CODEC_SUM_BLOCK / PC_CODEC_SUM_LANES; j++) {
        size_t i = base + threadIdx.x + (size_t)j * PC_CODEC_SUM_LANES;
        if (i < n) {
            float xi = fold_at(x, g, i);
            double t = (double)xi;
            acc = __dadd_rn(acc, squares ? __dmul_rn(t, t) : fabs(t));
        }
    }
    double s = tree256(acc);
    if (threadIdx.x == 0)
        p[blockIdx.x] = s;
}

// Level 2: one block over the m partials.
__global__ void sum_top_kernel(const double *p, size_t m, dstate *st)
{
    double acc = 0.0;
    for (size_t j = threadIdx.x; j < m; j += PC_CODEC_SUM_LANES)
        acc = __dadd_rn(acc, p[j]);
    double s = tree256(acc);
    if (threadIdx.x == 0)
        st->sum = s;
}

// The largest key (a NaN's or an infinity's is above every finite one), with the fold of g
// fused when given.
__global__ void maxkey_kernel(float *v, const float *g, size_t n, dstate *st)
{
    unsigned m = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = fold_at(v, g, i);
        m = max(m, key_of(x));
    }
    for (int o = 16; o > 0; o /= 2)
        m = max(m, __shfl_down_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0 && m)
        atomicMax(&st->maxkey, m);
}

// ---- dense codecs ---------------------------------------------------------------------

__global__ void none_kernel(const float *v, size_t n, unsigned *payload, dstate *st)
{
    bool bad = false;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned u = __float_as_uint(v[i]);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
        payload[i] = u; // little-endian device: the wire's byte order
    }
    flag_bad(bad, st);
}

// With error feedback v is the residual, folded and checked before; without, the check of
// v (the gradient) is made here: a non-finite value sets st->bad (the payload is dropped).
__global__ void fp16_kernel(const float *v, float *residual, size_t n, unsigned short *payload,
                            dstate *st)
{
    bool bad = false;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        bad |= nonfinite(v[i]);
        __half h = __float2half_rn(clamp_f16(v[i]));
        payload[i] = __half_as_ushort(h);
        if (residual)
            residual[i] = __fsub_rn(residual[i], __half2float(h));
    }
    flag_bad(bad, st);
}

enum dense_codec { DC_QSGD, DC_TERNGRAD, DC_EFSIGN };

struct quant_args {
    const float *v;
    float *residual; // NULL without error feedback
    size_t n;
    unsigned bits; // code width b
    float scale;   // qsgd: norm; terngrad: max; efsign: mean
    int levels;    // qsgd: s
    unsigned long long seed, subseq;
};

__device__ __forceinline__ float qsgd_value(float norm, int q, int s)
{
    return __fmul_rn(norm, __fdiv_rn((float)q, (float)s));
}

// Code of element i (value x, draw u) and the value it stands for.
template <int C>
__device__ __forceinline__ unsigned quant_code(const quant_args &a, float x, unsigned draw,
                                               float *sent)
{
    if (C == DC_QSGD) {
        int s = a.levels, lev = 0;
        float norm = a.scale;
        if (norm > 0) {
            float r = __fmul_rn(__fdiv_rn(fabsf(x), norm), (float)s);
            float l = floorf(r);
            lev = (int)l + (uniform_of(draw) < __fsub_rn(r, l));
            if (lev > s)
                lev = s;
        }
        unsigned code = (unsigned)(x < 0 ? s - lev : s + lev);
        *sent = qsgd_value(norm, (int)code - s, s);
        return code;
    } else if (C == DC_TERNGRAD) {
        float m = a.scale;
        unsigned code = 0;
        if (m > 0 && uniform_of(draw) <= __fdiv_rn(fabsf(x), m) && x != 0)
            code = x < 0 ? 2u : 1u;
        *sent = code == 1 ? m : (code == 2 ? -m : 0.0f);
        return code;
    } else {
        unsigned neg = x < 0;
        *sent = neg ? -a.scale : a.scale;
        return neg;
    }
}

// One block packs PACK_TILE elements (4 per thread) into PACK_TILE * b / 32 words.
template <int C> __global__ void quant_kernel(quant_args a, unsigned *payload)
{
    __shared__ unsigned words[PACK_TILE * 8 / 32];
    size_t tile0 = (size_t)blockIdx.x * PACK_TILE;
    unsigned nwords = PACK_TILE * a.bits / 32;
    if (threadIdx.x < nwords)
        words[threadIdx.x] = 0;
    __syncthreads();
    size_t i0 = tile0 + 4 * (size_t)threadIdx.x;
    uint4 d = make_uint4(0, 0, 0, 0);
    if (C != DC_EFSIGN && i0 < a.n)
        d = draws4(a.seed, a.subseq, i0 / 4);
    for (int j = 0; j < 4; j++) {
        size_t i = i0 + j;
        if (i >= a.n)
            break;
        float sent;
        unsigned code = quant_code<C>(a, a.v[i], word_of(d, j), &sent);
        unsigned bit = (unsigned)(i - tile0) * a.bits, w = bit / 32, sh = bit % 32;
        atomicOr(&words[w], code << sh);
        if (sh + a.bits > 32)
            atomicOr(&words[w + 1], code >> (32 - sh));
        if (a.residual)
            a.residual[i] = __fsub_rn(a.residual[i], sent);
    }
    __syncthreads();
    // Whole words: the device buffer is padded to a word; pad bits stay zero.
    size_t first = tile0 * a.bits / 32, total = (a.n * a.bits + 31) / 32;
    if (threadIdx.x < nwords && first + threadIdx.x < total)
        payload[first + threadIdx.x] = words[threadIdx.x];
}

// ---- radix select -----------------------------------------------------------------------

// Level 1 histogram of all n keys, with the error-feedback fold when g is given.
__global__ void hist1_kernel(float *v, const float *g, size_t n, unsigned *hist, dstate *st)
{
    __shared__ unsigned h[L1_BINS];
    smem_clear(h, L1_BINS);
    bool bad = false;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = fold_at(v, g, i);
        unsigned k = key_of(x);
        bad |= k >= KEY_NONFINITE;
        atomicAdd(&h[k >> L1_SHIFT], 1u);
    }
    flag_bad(bad, st);
    smem_flush(h, L1_BINS, hist);
}

// Find level `level`'s boundary bin: the largest b with (count of bins >= b) >= kleft.
// One block. Level 0 starts from kleft = k.
__global__ void find_bin_kernel(const unsigned *hist, int nbins, int level, unsigned k, dstate *st)
{
    typedef cub::BlockScan<unsigned, TPB> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    unsigned kleft = level == 0 ? k : st->kleft;
    int per = nbins / TPB;                        // 8 or 2 bins per thread
    int top = nbins - 1 - (int)threadIdx.x * per; // thread t covers bins top .. top - per + 1
    unsigned mine = 0;
    for (int j = 0; j < per; j++)
        mine += hist[top - j];
    unsigned above;
    scan_t(tmp).ExclusiveSum(mine, above);
    if (above < kleft && kleft <= above + mine) {
        for (int j = 0; j < per; j++) {
            unsigned c = hist[top - j];
            if (above + c >= kleft) {
                st->digit[level] = (unsigned)(top - j);
                st->binsize[level] = c;
                st->kleft = kleft - above;
                if (level == 2)
                    st->key = (st->digit[0] << L1_SHIFT) | (st->digit[1] << L2_SHIFT) |
                              (unsigned)(top - j);
                break;
            }
            above += c;
        }
    }
}

// Pass 2 over all n, FILTER_ITEMS elements per thread per step (one atomic per list per
// step of a block): above the boundary bin -> selected (when sel); in it -> candidates, and
// the level 2 histogram of their keys.
constexpr int FILTER_ITEMS = 8;

__global__ void filter1_kernel(const float *v, size_t n, dstate *st, unsigned *sel, unsigned *ckey,
                               unsigned *cidx, unsigned *hist2)
{
    __shared__ unsigned h[L2_BINS];
    smem_clear(h, L2_BINS);
    unsigned d1 = st->digit[0];
    size_t tile = (size_t)blockDim.x * FILTER_ITEMS;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
        unsigned key[FILTER_ITEMS], ns = 0, nc = 0;
        for (int j = 0; j < FILTER_ITEMS; j++) {
            size_t i = base + (size_t)j * blockDim.x + threadIdx.x;
            key[j] = i < n ? key_of(v[i]) : 0;
            unsigned d = key[j] >> L1_SHIFT;
            ns += i < n && d > d1;
            nc += i < n && d == d1;
        }
        unsigned ps = sel ? block_append(ns, &st->nsel) : 0; // sel is the same for all threads
        unsigned pc = block_append(nc, &st->ncand);
        for (int j = 0; j < FILTER_ITEMS; j++) {
            size_t i = base + (size_t)j * blockDim.x + threadIdx.x;
            unsigned d = key[j] >> L1_SHIFT;
            if (i >= n)
                break;
            if (sel && d > d1) {
                sel[ps++] = (unsigned)i;
            } else if (d == d1) {
                ckey[pc] = key[j];
                cidx[pc++] = (unsigned)i;
                atomicAdd(&h[(key[j] >> L2_SHIFT) & (L2_BINS - 1)], 1u);
            }
        }
    }
    smem_flush(h, L2_BINS, hist2);
}

// Over the candidates: level 2 digit above its boundary -> selected; equal -> the level 3
// histogram.
__global__ void filter2_kernel(const unsigned *ckey, const unsigned *cidx, dstate *st,
                               unsigned *sel, unsigned *hist3)
{
    __shared__ unsigned h[L3_BINS];
    smem_clear(h, L3_BINS);
    unsigned d2 = st->digit[1], m = st->ncand;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t base = (size_t)blockIdx.x * blockDim.x; base < m; base += stride) {
        size_t j = base + threadIdx.x;
        unsigned k = j < m ? ckey[j] : 0, d = (k >> L2_SHIFT) & (L2_BINS - 1);
        bool in = j < m;
        unsigned p = warp_append(sel && in && d > d2, &st->nsel);
        if (sel && in && d > d2)
            sel[p] = cidx[j];
        if (in && d == d2)
            atomicAdd(&h[k & (L3_BINS - 1)], 1u);
    }
    smem_flush(h, L3_BINS, hist3);
}

// Over the candidates with the boundary's first two digits: above the k-th key ->
// selected; equal -> the ties list.
__global__ void filter3_kernel(const unsigned *ckey, const unsigned *cidx, dstate *st,
                               unsigned *sel, unsigned *eq)
{
    unsigned t = st->key, m = st->ncand;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t base = (size_t)blockIdx.x * blockDim.x; base < m; base += stride) {
        size_t j = base + threadIdx.x;
        bool in = j < m;
        unsigned k = in ? ckey[j] : 0;
        bool same = in && (k >> L2_SHIFT) == (t >> L2_SHIFT);
        unsigned p = warp_append(same && k > t, &st->nsel);
        if (same && k > t)
            sel[p] = cidx[j];
        p = warp_append(same && k == t, &st->neq);
        if (same && k == t)
            eq[p] = cidx[j];
    }
}

__global__ void iota_kernel(unsigned *idx, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        idx[i] = (unsigned)i;
}

// out[j] = v[idx[j]] for j < m.
__global__ void gather_idx_kernel(const float *v, const unsigned *idx, size_t m, float *out)
{
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += step)
        out[j] = v[idx[j]];
}

// The sample both sampled selections take: out[j] = v[floor(j * n / ns)] for j < ns.
__global__ void sample_kernel(const float *v, size_t n, size_t ns, float *out)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < ns; j += stride)
        out[j] = v[(size_t)(((unsigned long long)j * n) / ns)]; // pc_codec__dgc_sample_index
}

// ---- randomk: Floyd's algorithm in parallel ------------------------------------------------
// The CPU runs, for j = n-k .. n-1, t_j = (draw (j - (n-k)) * (j + 1)) >> 32; takes t_j
// unless already taken, else j. The set it ends with: every value some step drew, plus each
// j >= n-k that fell back. Step x falls back iff y = t_x was taken before step x: drawn by
// an earlier step (first_hit[y] < x), or y >= n-k and y itself fell back (y < x). Each
// element's membership is decided independently from first_hit (the earliest step that
// drew each value) by walking that chain down.

struct randomk_args {
    unsigned long long seed, subseq;
    unsigned n, k;
};

__device__ __forceinline__ unsigned randomk_t(const randomk_args &a, unsigned j, unsigned draw)
{
    return (unsigned)(((unsigned long long)draw * ((unsigned long long)j + 1)) >> 32);
}

__global__ void randomk_hits_kernel(randomk_args a, unsigned *first_hit)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; 4 * q < a.k; q += stride) {
        uint4 d = draws4(a.seed, a.subseq, q);
        for (int l = 0; l < 4 && 4 * q + l < a.k; l++) {
            unsigned j = a.n - a.k + (unsigned)(4 * q + l);
            atomicMin(&first_hit[randomk_t(a, j, word_of(d, l))], j);
        }
    }
}

struct randomk_member {
    randomk_args a;
    const unsigned *first_hit;
    __device__ bool operator()(unsigned i) const
    {
        if (first_hit[i] != NO_HIT)
            return true;
        unsigned lo = a.n - a.k;
        if (i < lo)
            return false;
        unsigned cur = i;
        for (;;) { // fell back at step cur?
            unsigned y = randomk_t(a, cur, draw_at(a.seed, a.subseq, cur - lo));
            if (y == cur)
                return false;
            if (first_hit[y] < cur)
                return true;
            if (y < lo)
                return false;
            cur = y;
        }
    }
};

struct key_above {
    const float *v;
    unsigned t;
    __device__ bool operator()(unsigned i) const
    {
        return key_of(v[i]) > t;
    }
};

struct key_equal {
    const float *v;
    unsigned t;
    __device__ bool operator()(unsigned i) const
    {
        return key_of(v[i]) == t;
    }
};

struct key_at_least {
    const float *v;
    unsigned t;
    __device__ bool operator()(unsigned i) const
    {
        return key_of(v[i]) >= t;
    }
};

// ---- sparse encoding ----------------------------------------------------------------------

__device__ __forceinline__ unsigned varint_len(unsigned x)
{
    return x < (1u << 7) ? 1 : x < (1u << 14) ? 2 : x < (1u << 21) ? 3 : x < (1u << 28) ? 4 : 5;
}

__device__ __forceinline__ unsigned gap_of(const unsigned *idx, size_t j)
{
    return j == 0 ? idx[0] : idx[j] - idx[j - 1] - 1;
}

__global__ void varint_len_kernel(const unsigned *idx, size_t k, unsigned *len)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += stride)
        len[j] = varint_len(gap_of(idx, j));
}

__global__ void varint_total_kernel(const unsigned *off, const unsigned *len, size_t k, dstate *st)
{
    st->vbytes = k ? off[k - 1] + len[k - 1] : 0;
}

// Indices (u32 or varints at off[j]) and values of the selected elements; error feedback
// takes what was sent out of v; the momentum is masked where values were sent.
struct encode_args {
    const unsigned *idx;
    size_t k;
    float *v; // the values' source: the residual (written when ef) or the gradient
    bool ef, fp16, delta, with_index;
    float *momentum;     // NULL: no masking
    const unsigned *off; // delta: byte offset of each varint
    unsigned char *payload;
    const dstate *st; // delta: vbytes, where the values start
};

__global__ void encode_kernel(encode_args a)
{
    size_t values = !a.with_index ? 0 : (a.delta ? a.st->vbytes : 4 * a.k);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < a.k; j += stride) {
        unsigned i = a.idx[j];
        if (a.with_index && a.delta) {
            unsigned x = gap_of(a.idx, j);
            unsigned char *p = a.payload + a.off[j];
            while (x >= 0x80u) {
                *p++ = (unsigned char)(x | 0x80u);
                x >>= 7;
            }
            *p = (unsigned char)x;
        } else if (a.with_index) {
            reinterpret_cast<unsigned *>(a.payload)[j] = i;
        }
        float x = a.v[i];
        if (a.fp16) {
            __half h = __float2half_rn(clamp_f16(x));
            unsigned short u = __half_as_ushort(h);
            unsigned char *p = a.payload + values + 2 * j;
            p[0] = (unsigned char)u;
            p[1] = (unsigned char)(u >> 8);
            if (a.ef)
                a.v[i] = __fsub_rn(x, __half2float(h));
        } else {
            unsigned u = __float_as_uint(x);
            unsigned char *p = a.payload + values + 4 * j;
            p[0] = (unsigned char)u;
            p[1] = (unsigned char)(u >> 8);
            p[2] = (unsigned char)(u >> 16);
            p[3] = (unsigned char)(u >> 24);
            if (a.ef)
                a.v[i] = 0.0f; // v - v
        }
        if (a.momentum)
            a.momentum[i] = 0.0f;
    }
}

// ---- decode-add ------------------------------------------------------------------------------

struct decode_args {
    const unsigned char *payload; // padded with a zero byte
    size_t n;
    unsigned bits;
    int codec;
    int levels;
    float hscale; // the header's scale
    float scale;  // the caller's
};

__global__ void decode_dense_kernel(decode_args a, float *dense)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride) {
        float val;
        if (a.codec == PC_CODEC_NONE) {
            val = __uint_as_float(reinterpret_cast<const unsigned *>(a.payload)[i]);
        } else if (a.codec == PC_CODEC_FP16) {
            val = __half2float(
                __ushort_as_half(reinterpret_cast<const unsigned short *>(a.payload)[i]));
        } else {
            size_t bit = i * a.bits;
            unsigned two = a.payload[bit / 8] | (unsigned)a.payload[bit / 8 + 1] << 8;
            unsigned code = (two >> (bit % 8)) & ((1u << a.bits) - 1u);
            if (a.codec == PC_CODEC_QSGD) {
                val = qsgd_value(a.hscale, (int)code - a.levels, a.levels);
            } else if (a.codec == PC_CODEC_TERNGRAD) {
                if (!code)
                    continue; // the CPU adds nothing for a zero
                val = code == 1 ? a.hscale : -a.hscale;
            } else {
                val = code ? -a.hscale : a.hscale;
            }
        }
        dense[i] = __fadd_rn(dense[i], __fmul_rn(a.scale, val));
    }
}

__global__ void decode_sparse_kernel(const unsigned *idx, const unsigned char *values, size_t k,
                                     int fp16, float scale, float *dense)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += stride) {
        float val;
        if (fp16) {
            unsigned short u = (unsigned short)(values[2 * j] | values[2 * j + 1] << 8);
            val = __half2float(__ushort_as_half(u));
        } else {
            const unsigned char *p = values + 4 * j;
            val = __uint_as_float(p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 |
                                  (unsigned)p[3] << 24);
        }
        dense[idx[j]] = __fadd_rn(dense[idx[j]], __fmul_rn(scale, val));
    }
}

__global__ void philox_kernel(unsigned long long seed, unsigned long long subseq,
                              unsigned long long offset, unsigned *out, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = draw_at(seed, subseq, offset + i);
}

// ---- host side -------------------------------------------------------------------------------

// Blocks for a grid-stride loop over n items: enough to fill the device (8 blocks of 256
// threads per multiprocessor), no more: each block of the histogram kernels pays for
// clearing and flushing its shared bins.
unsigned grid_for(int sms, size_t n)
{
    size_t b = (n + TPB - 1) / TPB, most = (size_t)(sms > 0 ? sms : 1) * 8;
    return (unsigned)(b < 1 ? 1 : (b > most ? most : b));
}

int sm_count(int device)
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        sms = 1;
    return sms;
}

struct buffer {
    void *p = nullptr;
    size_t cap = 0;
};

} // namespace

struct pc_cuda_codec {
    int device;
    int sms; // multiprocessors, for grid_for
    buffer sel, ckey, cidx, eq, sorted, hits, payload, sample, cvals, partial, len, off, cub;
    dstate *st;      // device
    dstate *st_host; // pinned
    unsigned *hist;  // device: L1 + L2 + L3 bins
};

namespace
{

// Grow b to at least bytes (contents are not kept).
cudaError_t reserve(buffer &b, size_t bytes)
{
    if (b.cap >= bytes)
        return cudaSuccess;
    if (b.p)
        cudaFree(b.p);
    b.p = nullptr;
    b.cap = 0;
    cudaError_t e = cudaMalloc(&b.p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        b.cap = bytes;
    return e;
}

template <typename T> T *as(buffer &b)
{
    return static_cast<T *>(b.p);
}

// The state's counters on the host (waits for the stream).
cudaError_t fetch(pc_cuda_codec *s, cudaStream_t q)
{
    cudaError_t e = cudaMemcpyAsync(s->st_host, s->st, sizeof(dstate), cudaMemcpyDeviceToHost, q);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(q);
    return e;
}

#define CK(call)    PC_CUDA_CK(call)
#define CK_LAUNCH() CK(cudaGetLastError())

// Canonical sum of x^2 or |x| into s->st->sum (device).
int canonical_sum(pc_cuda_codec *s, float *x, const float *g, size_t n, int squares, cudaStream_t q,
                  int *cuerr)
{
    size_t m = (n + PC_CODEC_SUM_BLOCK - 1) / PC_CODEC_SUM_BLOCK;
    CK(reserve(s->partial, sizeof(double) * m));
    sum_blocks_kernel<<<(unsigned)m, PC_CODEC_SUM_LANES, 0, q>>>(x, g, n, squares,
                                                                 as<double>(s->partial));
    CK_LAUNCH();
    sum_top_kernel<<<1, PC_CODEC_SUM_LANES, 0, q>>>(as<double>(s->partial), m, s->st);
    CK_LAUNCH();
    return PC_OK;
}

// Sort `count` u32 keys from in to out (values < n).
int sort_u32(pc_cuda_codec *s, const unsigned *in, unsigned *out, size_t count, size_t n,
             cudaStream_t q, int *cuerr)
{
    if (count == 0)
        return PC_OK;
    int end_bit = 1;
    while (end_bit < 32 && ((size_t)1 << end_bit) < n)
        end_bit++;
    size_t bytes = 0;
    int64_t items = (int64_t)count;
    CK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, in, out, items, 0, end_bit, q));
    CK(reserve(s->cub, bytes));
    CK(cub::DeviceRadixSort::SortKeys(s->cub.p, bytes, in, out, items, 0, end_bit, q));
    return PC_OK;
}

// The items of in[0..count) with pred(item), in order, into out; their number into
// st->count (device).
template <typename In, typename P>
int select_from(pc_cuda_codec *s, In in, size_t count, P pred, unsigned *out, cudaStream_t q,
                int *cuerr)
{
    size_t bytes = 0;
    CK(cub::DeviceSelect::If(nullptr, bytes, in, out, &s->st->count, (int64_t)count, pred, q));
    CK(reserve(s->cub, bytes));
    CK(cub::DeviceSelect::If(s->cub.p, bytes, in, out, &s->st->count, (int64_t)count, pred, q));
    return PC_OK;
}

// Ascending indices i < n with pred(i) into out; the count into st->count (device).
template <typename P>
int select_if(pc_cuda_codec *s, size_t n, P pred, unsigned *out, cudaStream_t q, int *cuerr)
{
    return select_from(s, thrust::counting_iterator<unsigned>(0), n, pred, out, q, cuerr);
}

// The radix select of the k largest keys of v[0..n) (0 < k < n), folding g into v first when
// given. With want_indices, the k indices end up ascending in s->sorted; else only the k-th
// key is wanted (st->key). *bad on the host tells of a non-finite value (nothing selected).
int radix_select(pc_cuda_codec *s, float *v, const float *g, size_t n, size_t k, bool want_indices,
                 cudaStream_t q, bool *bad, int *cuerr)
{
    unsigned *h1 = s->hist, *h2 = s->hist + L1_BINS, *h3 = h2 + L2_BINS;
    CK(cudaMemsetAsync(s->hist, 0, sizeof(unsigned) * (L1_BINS + L2_BINS + L3_BINS), q));
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    hist1_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(v, g, n, h1, s->st);
    CK_LAUNCH();
    find_bin_kernel<<<1, TPB, 0, q>>>(h1, L1_BINS, 0, (unsigned)k, s->st);
    CK_LAUNCH();
    // The boundary bin's count sizes the candidate lists (scratch grows with it, not n).
    CK(fetch(s, q));
    *bad = s->st_host->bad != 0;
    if (*bad)
        return PC_OK;
    size_t ncand = s->st_host->binsize[0];
    CK(reserve(s->ckey, sizeof(unsigned) * ncand));
    CK(reserve(s->cidx, sizeof(unsigned) * ncand));
    unsigned *sel = nullptr;
    if (want_indices) {
        CK(reserve(s->sel, sizeof(unsigned) * k));
        CK(reserve(s->eq, sizeof(unsigned) * ncand));
        CK(reserve(s->sorted, sizeof(unsigned) * (k > ncand ? k : ncand)));
        sel = as<unsigned>(s->sel);
    }
    filter1_kernel<<<grid_for(s->sms, (n + FILTER_ITEMS - 1) / FILTER_ITEMS), TPB, 0, q>>>(
        v, n, s->st, sel, as<unsigned>(s->ckey), as<unsigned>(s->cidx), h2);
    CK_LAUNCH();
    find_bin_kernel<<<1, TPB, 0, q>>>(h2, L2_BINS, 1, 0, s->st);
    CK_LAUNCH();
    unsigned cgrid = grid_for(s->sms, ncand);
    filter2_kernel<<<cgrid, TPB, 0, q>>>(as<unsigned>(s->ckey), as<unsigned>(s->cidx), s->st, sel,
                                         h3);
    CK_LAUNCH();
    find_bin_kernel<<<1, TPB, 0, q>>>(h3, L3_BINS, 2, 0, s->st);
    CK_LAUNCH();
    if (want_indices) {
        filter3_kernel<<<cgrid, TPB, 0, q>>>(as<unsigned>(s->ckey), as<unsigned>(s->cidx), s->st,
                                             sel, as<unsigned>(s->eq));
        CK_LAUNCH();
    }
    CK(fetch(s, q));
    if (!want_indices)
        return PC_OK;
    // Ties at the k-th key: the kleft lowest indices among the neq equal ones.
    size_t nsel = s->st_host->nsel, neq = s->st_host->neq, take = s->st_host->kleft;
    if (nsel + take != k || take > neq)
        return PC_ECUDA; // cannot happen: the counts are exact
    const unsigned *ties = as<unsigned>(s->eq);
    if (take < neq) {
        int rc = sort_u32(s, as<unsigned>(s->eq), as<unsigned>(s->sorted), neq, n, q, cuerr);
        if (rc != PC_OK)
            return rc;
        ties = as<unsigned>(s->sorted);
    }
    CK(cudaMemcpyAsync(sel + nsel, ties, sizeof(unsigned) * take, cudaMemcpyDeviceToDevice, q));
    return sort_u32(s, sel, as<unsigned>(s->sorted), k, n, q, cuerr);
}

// The sampled selections (top-k's fast path, dgc): take_sample puts v[floor(j * n / m)],
// j < m, in s->sample (pc_codec__dgc_sample_index); select_sampled then finds the sample's
// rank-th largest key *t and writes the indices of every key >= *t over all n, ascending,
// into out (room for n), their number into *cnt. PC_ERANGE when the sample holds NaN or
// infinity.
int take_sample(pc_cuda_codec *s, const float *v, size_t n, size_t m, cudaStream_t q, int *cuerr)
{
    CK(reserve(s->sample, sizeof(float) * m));
    sample_kernel<<<grid_for(s->sms, m), TPB, 0, q>>>(v, n, m, as<float>(s->sample));
    CK_LAUNCH();
    return PC_OK;
}

int select_sampled(pc_cuda_codec *s, float *v, size_t n, size_t m, size_t rank, unsigned *out,
                   cudaStream_t q, unsigned *t, size_t *cnt, int *cuerr)
{
    bool bad = false;
    int rc = radix_select(s, as<float>(s->sample), nullptr, m, rank, false, q, &bad, cuerr);
    if (rc != PC_OK || bad)
        return bad ? PC_ERANGE : rc;
    *t = s->st_host->key;
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    rc = select_if(s, n, key_at_least{v, *t}, out, q, cuerr);
    if (rc != PC_OK)
        return rc;
    CK(fetch(s, q));
    *cnt = s->st_host->count;
    return PC_OK;
}

// The sampled path of exact top-k (pc_select's fast path, on the device), for k <= n / 4
// and n >= 65536: a sample's r-th largest key t_lo lies a little below the k-th
// largest of all; one order-keeping pass keeps the indices with keys >= t_lo (about 1.2k
// to 2k of them); the exact k-th key T among those, then one more order-keeping pass over
// them, give the k indices already ascending. *missed when the sample misjudged (fewer
// than k or more than 3k + 4096 candidates): the caller runs the radix path (same result).
int topk_sampled(pc_cuda_codec *s, float *v, size_t n, size_t k, cudaStream_t q,
                 const unsigned **idx, bool *missed, int *cuerr)
{
    *missed = true;
    double dens = (double)k / (double)n;
    size_t m = (size_t)ceil(256.0 / dens); // about 256 sampled hits (pc_select's sizing)
    m = m < 4096 ? 4096 : m;
    m = m > n / 16 ? n / 16 : m;
    double h = dens * (double)m;
    size_t r = (size_t)ceil(h + 3.0 * sqrt(h) + 16.0);
    if (m == 0 || r > m)
        return PC_OK;
    // The sample only chooses the path (the result is exact either way), so it is taken as
    // dgc's is; a NaN or infinity in it is PC_ERANGE, as it would be anywhere.
    CK(reserve(s->hits, sizeof(unsigned) * n)); // the pass's output may hold up to n
    unsigned t_lo;
    size_t cnt;
    int rc = take_sample(s, v, n, m, q, cuerr);
    if (rc == PC_OK)
        rc = select_sampled(s, v, n, m, r, as<unsigned>(s->hits), q, &t_lo, &cnt, cuerr);
    if (rc != PC_OK)
        return rc;
    if (cnt < k || cnt > 3 * k + 4096)
        return PC_OK;
    // The exact k-th key among the candidates' values.
    CK(reserve(s->cvals, sizeof(float) * cnt));
    gather_idx_kernel<<<grid_for(s->sms, cnt), TPB, 0, q>>>(v, as<unsigned>(s->hits), cnt,
                                                            as<float>(s->cvals));
    CK_LAUNCH();
    bool bad = false;
    rc = radix_select(s, as<float>(s->cvals), nullptr, cnt, k, false, q, &bad, cuerr);
    if (rc != PC_OK || bad) // a NaN or infinity is above every threshold: a candidate
        return bad ? PC_ERANGE : rc;
    unsigned t = s->st_host->key;
    size_t take = s->st_host->kleft, neq = s->st_host->binsize[2];
    CK(reserve(s->sorted, sizeof(unsigned) * (k + neq)));
    const unsigned *cand = as<unsigned>(s->hits);
    unsigned *out = as<unsigned>(s->sorted);
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    if (take == neq) { // every key equal to T is taken (no tie to break): one pass
        rc = select_from(s, cand, cnt, key_at_least{v, t}, out, q, cuerr);
        if (rc != PC_OK)
            return rc;
    } else { // above T, then the lowest `take` of those equal to T, then in index order
        CK(reserve(s->sel, sizeof(unsigned) * (k + neq)));
        unsigned *tmp = as<unsigned>(s->sel);
        rc = select_from(s, cand, cnt, key_above{v, t}, tmp, q, cuerr);
        if (rc != PC_OK)
            return rc;
        rc = select_from(s, cand, cnt, key_equal{v, t}, tmp + (k - take), q, cuerr);
        if (rc != PC_OK)
            return rc;
        rc = sort_u32(s, tmp, out, k, n, q, cuerr);
        if (rc != PC_OK)
            return rc;
    }
    *idx = out;
    *missed = false;
    return PC_OK;
}

// Encode k selected indices (ascending, device) with their values from v into the payload.
int encode(pc_cuda_codec *s, const pc_codec_spec_t *spec, const unsigned *idx, size_t k, float *v,
           bool ef, float *momentum, bool with_index, cudaStream_t q, size_t *bytes, int *cuerr)
{
    bool delta = with_index && spec->index == PC_INDEX_DELTA;
    size_t vb = spec->values == PC_VALUES_FP16 ? 2 : 4;
    size_t ib = 0;
    if (delta && k) {
        CK(reserve(s->len, sizeof(unsigned) * k));
        CK(reserve(s->off, sizeof(unsigned) * k));
        varint_len_kernel<<<grid_for(s->sms, k), TPB, 0, q>>>(idx, k, as<unsigned>(s->len));
        CK_LAUNCH();
        size_t tb = 0;
        CK(cub::DeviceScan::ExclusiveSum(nullptr, tb, as<unsigned>(s->len), as<unsigned>(s->off),
                                         (int64_t)k, q));
        CK(reserve(s->cub, tb));
        CK(cub::DeviceScan::ExclusiveSum(s->cub.p, tb, as<unsigned>(s->len), as<unsigned>(s->off),
                                         (int64_t)k, q));
        varint_total_kernel<<<1, 1, 0, q>>>(as<unsigned>(s->off), as<unsigned>(s->len), k, s->st);
        CK_LAUNCH();
        CK(fetch(s, q));
        ib = s->st_host->vbytes;
    } else if (with_index) {
        ib = 4 * k;
    }
    *bytes = ib + vb * k;
    CK(reserve(s->payload, *bytes + 4));
    if (k) {
        encode_args a = {idx,
                         k,
                         v,
                         ef,
                         spec->values == PC_VALUES_FP16,
                         delta,
                         with_index,
                         momentum,
                         as<unsigned>(s->off),
                         as<unsigned char>(s->payload),
                         s->st};
        encode_kernel<<<grid_for(s->sms, k), TPB, 0, q>>>(a);
        CK_LAUNCH();
    }
    return PC_OK;
}

// The fold every codec but none and the momentum ones starts with: v += g with error
// feedback, a finiteness check of v = g without. PC_ERANGE when not finite.
int fold_check(pc_cuda_codec *s, float *v, const float *g, size_t n, cudaStream_t q, int *cuerr)
{
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    fold_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(v, g, n, s->st);
    CK_LAUNCH();
    CK(fetch(s, q));
    return s->st_host->bad ? PC_ERANGE : PC_OK;
}

// codec_sparse.c's momentum_fold.
int momentum_fold(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                  int *cuerr)
{
    float f = 1.0f;
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    if (spec->clip > 0) {
        int rc = canonical_sum(s, const_cast<float *>(j->grad), nullptr, j->n, 1, q, cuerr);
        if (rc != PC_OK)
            return rc;
        CK(fetch(s, q));
        double norm = sqrt(s->st_host->sum);
        if (!isfinite(norm))
            return PC_ERANGE;
        if (norm > spec->clip)
            f = (float)(spec->clip / norm);
    }
    momentum_kernel<<<grid_for(s->sms, j->n), TPB, 0, q>>>(j->momentum, j->residual, j->grad, f,
                                                           (float)spec->momentum, j->n, s->st);
    CK_LAUNCH();
    CK(fetch(s, q));
    return s->st_host->bad ? PC_ERANGE : PC_OK;
}

// Exact top-k of v (ascending indices in *idx, device scratch); *got the count. g folded
// first when given. PC_ERANGE when v holds NaN or infinity.
int topk_indices(pc_cuda_codec *s, float *v, const float *g, size_t n, size_t k, cudaStream_t q,
                 const unsigned **idx, size_t *got, int *cuerr)
{
    if (k > n)
        k = n;
    *got = k;
    bool sampled = n >= 65536 && k > 0 && k <= n / 4; // pc_select's fast path's range
    if (k == 0 || k == n || (sampled && g)) {
        // Fold (and check) first. Without a fold the sampled path needs no check of its
        // own: a NaN's or an infinity's key is above any threshold, so it is a candidate,
        // and the candidates' select reports it.
        int rc = fold_check(s, v, g, n, q, cuerr);
        if (rc != PC_OK)
            return rc;
        g = nullptr;
    }
    if (k == 0 || k == n) {
        CK(reserve(s->sorted, sizeof(unsigned) * (n ? n : 1)));
        if (k == n) {
            iota_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(as<unsigned>(s->sorted), n);
            CK_LAUNCH();
        }
        *idx = as<unsigned>(s->sorted);
        return PC_OK;
    }
    if (sampled) {
        bool missed = true;
        int rc = topk_sampled(s, v, n, k, q, idx, &missed, cuerr);
        if (rc != PC_OK || !missed)
            return rc;
    }
    bool bad = false;
    int rc = radix_select(s, v, g, n, k, true, q, &bad, cuerr);
    if (rc != PC_OK)
        return rc;
    if (bad)
        return PC_ERANGE;
    *idx = as<unsigned>(s->sorted);
    return PC_OK;
}

int compress_topk(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                  size_t *bytes, int *cuerr)
{
    bool ef = spec->ef;
    float *v = ef ? j->residual : const_cast<float *>(j->grad); // only written when ef
    const float *g = ef ? j->grad : nullptr;
    if (j->momentum && j->grad) {
        int rc = momentum_fold(s, spec, j, q, cuerr);
        if (rc != PC_OK)
            return rc;
        g = nullptr;
    }
    const unsigned *idx;
    size_t got;
    int rc = topk_indices(s, v, g, j->n, pc_codec__k(spec->ratio, j->n), q, &idx, &got, cuerr);
    if (rc != PC_OK)
        return rc;
    j->entries = (uint32_t)got;
    return encode(s, spec, idx, got, v, ef, j->momentum, true, q, bytes, cuerr);
}

int compress_threshold(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j,
                       cudaStream_t q, size_t *bytes, int *cuerr)
{
    bool ef = spec->ef;
    float *v = ef ? j->residual : const_cast<float *>(j->grad);
    int rc = fold_check(s, v, ef ? j->grad : nullptr, j->n, q, cuerr);
    if (rc != PC_OK)
        return rc;
    CK(reserve(s->sel, sizeof(unsigned) * j->n));
    float tau = (float)spec->tau;
    unsigned t = 0;
    memcpy(&t, &tau, sizeof(t));
    rc = select_if(s, j->n, key_at_least{v, t & 0x7fffffffu}, as<unsigned>(s->sel), q, cuerr);
    if (rc != PC_OK)
        return rc;
    CK(fetch(s, q));
    j->entries = s->st_host->count;
    return encode(s, spec, as<unsigned>(s->sel), j->entries, v, ef, nullptr, true, q, bytes, cuerr);
}

int compress_randomk(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j,
                     cudaStream_t q, size_t *bytes, int *cuerr)
{
    bool ef = spec->ef;
    float *v = ef ? j->residual : const_cast<float *>(j->grad);
    int rc = j->momentum && j->grad ? momentum_fold(s, spec, j, q, cuerr)
                                    : fold_check(s, v, ef ? j->grad : nullptr, j->n, q, cuerr);
    if (rc != PC_OK)
        return rc;
    size_t n = j->n, k = pc_codec__k(spec->ratio, n);
    CK(reserve(s->hits, sizeof(unsigned) * n));
    CK(reserve(s->sel, sizeof(unsigned) * (k ? k : 1)));
    CK(cudaMemsetAsync(s->hits.p, 0xff, sizeof(unsigned) * n, q));
    randomk_args a = {spec->seed, pc_philox_subsequence(j->iteration, j->chunk), (unsigned)n,
                      (unsigned)k};
    if (k) {
        randomk_hits_kernel<<<grid_for(s->sms, (k + 3) / 4), TPB, 0, q>>>(a, as<unsigned>(s->hits));
        CK_LAUNCH();
        rc = select_if(s, n, randomk_member{a, as<unsigned>(s->hits)}, as<unsigned>(s->sel), q,
                       cuerr);
        if (rc != PC_OK)
            return rc;
        CK(fetch(s, q));
        if (s->st_host->count != k)
            return PC_ECUDA; // Floyd's algorithm always yields k: a kernel is wrong
    }
    j->entries = (uint32_t)k;
    return encode(s, spec, as<unsigned>(s->sel), k, v, ef, j->momentum, false, q, bytes, cuerr);
}

int compress_dgc(pc_cuda_codec *s, const pc_codec_t *c, pc_cuda_job_t *j, cudaStream_t q,
                 size_t *bytes, int *cuerr)
{
    const pc_codec_spec_t *spec = pc_codec_spec(c);
    float *v = j->residual;
    size_t n = j->n;
    int rc = j->grad ? momentum_fold(s, spec, j, q, cuerr) : PC_OK;
    if (rc != PC_OK)
        return rc;
    pc_codec_dgc_plan_t pl;
    pc_codec__dgc_plan(c, j->steps, n, &pl);
    size_t got = 0, ks = pl.ks;
    bool done = pl.k == 0;
    const unsigned *idx = nullptr;
    j->dgc_path = -1;
    if (!done && pl.k < n) {
        CK(reserve(s->sel, sizeof(unsigned) * n));
        if ((rc = take_sample(s, v, n, pl.ns, q, cuerr)) != PC_OK)
            return rc;
        for (int attempt = 0; attempt < 2 && !done; attempt++) {
            // The ks-th largest sampled key (pc_select_kth_magnitude; 0 selects everything).
            // A non-finite sample (a residual no fold checked: state_set) is PC_ERANGE.
            unsigned t;
            size_t cnt;
            rc = select_sampled(s, v, n, pl.ns, ks, as<unsigned>(s->sel), q, &t, &cnt, cuerr);
            if (rc != PC_OK)
                return rc;
            if (cnt >= pl.lo && cnt <= pl.hi && cnt <= pl.cap) {
                got = cnt;
                done = true;
                idx = as<unsigned>(s->sel);
                j->dgc_path = attempt;
            } else {
                ks = pc_codec__dgc_reaim(ks, pl.k, cnt, pl.ns);
            }
        }
    }
    if (!done) {
        rc = topk_indices(s, v, nullptr, n, pl.k, q, &idx, &got, cuerr);
        if (rc != PC_OK)
            return rc;
        if (pl.k > 0 && pl.k < n)
            j->dgc_path = 2;
    }
    j->entries = (uint32_t)got;
    return encode(s, spec, idx, got, v, true, j->momentum, true, q, bytes, cuerr);
}

unsigned qsgd_bits(int levels)
{
    unsigned b = 1;
    while ((1u << b) < (unsigned)(2 * levels + 1))
        b++;
    return b;
}

int compress_dense(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                   size_t *bytes, int *cuerr)
{
    size_t n = j->n;
    bool ef = spec->ef;
    float *v = ef ? j->residual : const_cast<float *>(j->grad);
    if (spec->id == PC_CODEC_NONE) {
        // As the CPU's none: no fold (it has no error feedback), a finiteness check.
        CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
        CK(reserve(s->payload, 4 * n + 4));
        none_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(v, n, as<unsigned>(s->payload), s->st);
        CK_LAUNCH();
        CK(fetch(s, q));
        if (s->st_host->bad)
            return PC_ERANGE;
        j->entries = (uint32_t)n;
        *bytes = 4 * n;
        return PC_OK;
    }
    // The fold (error feedback) and the finiteness check ride on the pass each codec makes
    // anyway (fp16 with error feedback folds first: on PC_ERANGE the residual must hold the
    // folded values and nothing else, as on the CPU).
    const float *g = ef ? j->grad : nullptr;
    int rc;
    j->entries = (uint32_t)n;
    if (spec->id == PC_CODEC_FP16) {
        if (ef && (rc = fold_check(s, v, g, n, q, cuerr)) != PC_OK)
            return rc;
        CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
        CK(reserve(s->payload, 2 * n + 4));
        fp16_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(v, ef ? j->residual : nullptr, n,
                                                        as<unsigned short>(s->payload), s->st);
        CK_LAUNCH();
        CK(fetch(s, q));
        if (s->st_host->bad)
            return PC_ERANGE;
        *bytes = 2 * n;
        return PC_OK;
    }
    quant_args a = {v,          ef ? j->residual : nullptr,
                    n,          0,
                    0.0f,       spec->levels,
                    spec->seed, pc_philox_subsequence(j->iteration, j->chunk)};
    if (spec->id == PC_CODEC_QSGD || spec->id == PC_CODEC_EFSIGN) {
        // A non-finite value makes the sum non-finite: the check.
        bool q_ = spec->id == PC_CODEC_QSGD;
        a.bits = q_ ? qsgd_bits(spec->levels) : 1;
        CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
        rc = canonical_sum(s, v, g, n, q_ ? 1 : 0, q, cuerr);
        if (rc != PC_OK)
            return rc;
        CK(fetch(s, q));
        double sum = s->st_host->sum;
        if (!isfinite(sum))
            return PC_ERANGE;
        a.scale = q_ ? (float)sqrt(sum) : (float)(sum / (double)n);
        if (!isfinite(a.scale))
            return PC_ERANGE;
    } else { // terngrad: a non-finite value has the largest key
        a.bits = 2;
        CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
        maxkey_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(v, g, n, s->st);
        CK_LAUNCH();
        CK(fetch(s, q));
        unsigned m = s->st_host->maxkey;
        if (m >= KEY_NONFINITE)
            return PC_ERANGE;
        memcpy(&a.scale, &m, sizeof(m));
    }
    j->scale = a.scale;
    *bytes = (n * a.bits + 7) / 8;
    CK(reserve(s->payload, (n * a.bits + 31) / 32 * 4));
    unsigned tiles = (unsigned)((n + PACK_TILE - 1) / PACK_TILE);
    unsigned *out = as<unsigned>(s->payload);
    if (spec->id == PC_CODEC_QSGD)
        quant_kernel<DC_QSGD><<<tiles, TPB, 0, q>>>(a, out);
    else if (spec->id == PC_CODEC_TERNGRAD)
        quant_kernel<DC_TERNGRAD><<<tiles, TPB, 0, q>>>(a, out);
    else
        quant_kernel<DC_EFSIGN><<<tiles, TPB, 0, q>>>(a, out);
    CK_LAUNCH();
    return PC_OK;
}

} // namespace

extern "C" int pc_cuda_codec_create(int device, pc_cuda_codec_t **out, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    pc_cuda_codec *s = new (std::nothrow) pc_cuda_codec();
    if (!s)
        return PC_ENOMEM;
    s->device = device;
    s->sms = sm_count(device);
    cudaError_t e = cudaMalloc((void **)&s->st, sizeof(dstate));
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&s->st_host, sizeof(dstate));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&s->hist, sizeof(unsigned) * (L1_BINS + L2_BINS + L3_BINS));
    if (e != cudaSuccess) {
        pc_cuda_codec_destroy(s);
        *cuerr = (int)e;
        return e == cudaErrorMemoryAllocation ? PC_ENOMEM : PC_ECUDA;
    }
    *out = s;
    return PC_OK;
}

extern "C" void pc_cuda_codec_destroy(pc_cuda_codec_t *s)
{
    if (!s)
        return;
    device_scope dev(s->device);
    buffer *all[] = {&s->sel,    &s->ckey,  &s->cidx,    &s->eq,  &s->sorted, &s->hits, &s->payload,
                     &s->sample, &s->cvals, &s->partial, &s->len, &s->off,    &s->cub};
    for (buffer *b : all)
        if (b->p)
            cudaFree(b->p);
    if (s->st)
        cudaFree(s->st);
    if (s->st_host)
        cudaFreeHost(s->st_host);
    if (s->hist)
        cudaFree(s->hist);
    delete s;
}

namespace
{

int compress_on(pc_cuda_codec_t *s, pc_cuda_job_t *j, int *cuerr)
{
    cudaStream_t q = (cudaStream_t)j->stream;
    const pc_codec_spec_t *spec = pc_codec_spec(j->codec);
    size_t bytes = 0;
    j->entries = 0;
    j->scale = 0.0f;
    j->dgc_path = -1;
    int rc;
    switch (spec->id) {
    case PC_CODEC_TOPK:
        rc = compress_topk(s, spec, j, q, &bytes, cuerr);
        break;
    case PC_CODEC_DGC:
        rc = compress_dgc(s, j->codec, j, q, &bytes, cuerr);
        break;
    case PC_CODEC_RANDOMK:
        rc = compress_randomk(s, spec, j, q, &bytes, cuerr);
        break;
    case PC_CODEC_THRESHOLD:
        rc = compress_threshold(s, spec, j, q, &bytes, cuerr);
        break;
    default:
        rc = compress_dense(s, spec, j, q, &bytes, cuerr);
        break;
    }
    if (rc != PC_OK)
        return rc;
    if (bytes > j->cap)
        return PC_EINVAL;
    j->bytes = (uint32_t)bytes;
    if (bytes)
        CK(cudaMemcpyAsync(j->payload, s->payload.p, bytes, cudaMemcpyDeviceToHost, q));
    CK(cudaStreamSynchronize(q));
    return PC_OK;
}

} // namespace

extern "C" int pc_cuda_codec_compress(pc_cuda_codec_t *s, int device, pc_cuda_job_t *j, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    int rc = compress_on(s, j, cuerr);
    if (rc != PC_OK) // nothing queued may still read the gradient or write the state
        (void)cudaStreamSynchronize((cudaStream_t)j->stream);
    return rc;
}

extern "C" int pc_cuda_codec_fold(pc_cuda_codec_t *s, int device, pc_cuda_job_t *j, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    cudaStream_t q = (cudaStream_t)j->stream;
    int rc = j->momentum ? momentum_fold(s, pc_codec_spec(j->codec), j, q, cuerr)
                         : fold_check(s, j->residual, j->grad, j->n, q, cuerr);
    if (rc != PC_OK)
        (void)cudaStreamSynchronize(q);
    return rc;
}

extern "C" int pc_cuda_decode_add(int device, const pc_codec_t *c, const pc_wire_header_t *h,
                                  const uint8_t *payload, const uint32_t *idx, float scale,
                                  float *dense, void *stream, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    cudaStream_t q = (cudaStream_t)stream;
    int sms = sm_count(device);
    const pc_codec_spec_t *spec = pc_codec_spec(c);
    size_t k = h->entries, ib = idx ? sizeof(uint32_t) * k : 0;
    // Indices first (4-byte aligned), then the payload (or its value section), a zero after.
    size_t vbytes = h->payload;
    const uint8_t *vsrc = payload;
    if (idx) {
        size_t vb = spec->values == PC_VALUES_FP16 ? 2 : 4;
        vbytes = vb * k;
        vsrc = payload + h->payload - vbytes;
    }
    size_t total = ib + vbytes + 4;
    unsigned char *d = nullptr;
    CK(cudaMallocAsync((void **)&d, total, q));
    cudaError_t e = cudaSuccess;
    if (ib)
        e = cudaMemcpyAsync(d, idx, ib, cudaMemcpyHostToDevice, q);
    if (e == cudaSuccess && vbytes)
        e = cudaMemcpyAsync(d + ib, vsrc, vbytes, cudaMemcpyHostToDevice, q);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(d + ib + vbytes, 0, 4, q);
    if (e == cudaSuccess) {
        if (idx) {
            if (k)
                decode_sparse_kernel<<<grid_for(sms, k), TPB, 0, q>>>(
                    reinterpret_cast<const unsigned *>(d), d + ib, k,
                    spec->values == PC_VALUES_FP16, scale, dense);
        } else {
            decode_args a = {d, h->n, 0, spec->id, spec->levels, h->scale, scale};
            a.bits = spec->id == PC_CODEC_QSGD ? qsgd_bits(spec->levels)
                                               : (spec->id == PC_CODEC_TERNGRAD ? 2 : 1);
            decode_dense_kernel<<<grid_for(sms, h->n), TPB, 0, q>>>(a, dense);
        }
        e = cudaGetLastError();
    }
    cudaError_t f = cudaFreeAsync(d, q);
    if (e == cudaSuccess)
        e = f;
    cudaError_t w = cudaStreamSynchronize(q); // also on an error: nothing left running
    if (e == cudaSuccess)
        e = w;
    CK(e);
    return PC_OK;
}

extern "C" int pc_cuda_alloc(int device, size_t bytes, void **out, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    CK(cudaMalloc(out, bytes ? bytes : 1));
    return PC_OK;
}

extern "C" void pc_cuda_free(int device, void *p)
{
    if (!p)
        return;
    device_scope dev(device);
    cudaFree(p);
}

extern "C" int pc_cuda_host_alloc(int device, size_t bytes, void **out, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    CK(cudaMallocHost(out, bytes ? bytes : 1));
    return PC_OK;
}

extern "C" void pc_cuda_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" int pc_cuda_copy(int device, void *dst, const void *src, size_t bytes, int to_device,
                            void *stream, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    cudaStream_t q = (cudaStream_t)stream;
    CK(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                       q));
    CK(cudaStreamSynchronize(q));
    return PC_OK;
}

extern "C" int pc_cuda_zero(int device, void *p, size_t bytes, void *stream, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    cudaStream_t q = (cudaStream_t)stream;
    CK(cudaMemsetAsync(p, 0, bytes, q));
    CK(cudaStreamSynchronize(q));
    return PC_OK;
}

extern "C" int pc_cuda_philox_draws(int device, uint64_t seed, uint64_t subsequence,
                                    uint64_t offset, uint32_t *out, size_t n, int *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    unsigned *d = nullptr;
    CK(cudaMalloc((void **)&d, sizeof(unsigned) * (n ? n : 1)));
    philox_kernel<<<grid_for(sm_count(device), n), TPB>>>(seed, subsequence, offset, d, n);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpy(out, d, sizeof(unsigned) * n, cudaMemcpyDeviceToHost);
    cudaFree(d);
    CK(e);
    return PC_OK;
}
