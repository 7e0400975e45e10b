// codec_impl.cuh: what the codec kernels' files share (C++ only, private to cuda/):
// the constants of the radix select and the bit packing, the device-side bookkeeping of a
// compress call, the warp and block helpers, the codec's scratch and the host-side steps one
// file runs for another. The files: codec_api.cu (the launchers of pc_codec_cuda.h, scratch,
// the fold, the canonical sum, decode-add), codec_select.cu (radix select, sampled top-k,
// randomk; the sparsifiers' compress), codec_quant.cu (none, fp16, qsgd, terngrad, efsign),
// codec_pack.cu (the sparse messages' encoding).
//
// The codecs' compress and decode-add paths as CUDA kernels give the bytes
// of the CPU codecs (src/codec/codec_dense.c, src/codec/codec_sparse.c), which are the reference.
//
// Equal bits: float arithmetic goes through the _rn intrinsics (never contracted into a
// fused multiply-add, as the C code is compiled without contraction); reductions follow
// the canonical order (codec_internal.h, pc_codec__sum); random draws come from cuRAND's
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
#ifndef PC_CODEC_IMPL_CUH
#define PC_CODEC_IMPL_CUH

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
#include "codec/codec_internal.h"
#include "pipecompress/pc_philox.h"
}
#include "codec_elem.h"
#include "pc_codec_cuda.h"
#include "pc_device.cuh"

namespace pc_codec_cu
{

constexpr int TPB = 256; // threads per block everywhere
// The radix select's digits and bins and randomk's marker: codec_elem.h's.
constexpr unsigned KEY_NONFINITE = PC_ELEM_KEY_NONFINITE;
constexpr int L1_BINS = PC_ELEM_L1_BINS, L2_BINS = PC_ELEM_L2_BINS, L3_BINS = PC_ELEM_L3_BINS;
constexpr int PACK_TILE = 1024; // elements per block of the bit-packing kernels
constexpr unsigned NO_HIT = PC_ELEM_NO_HIT;
static_assert(PC_ELEM_F16_MAX == PC_CODEC_F16_MAX, "codec_elem.h and codec_internal.h agree");

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

// v[i], or with g the error-feedback fold v[i] += g[i] written back and returned.
__device__ __forceinline__ float fold_at(float *v, const float *g, size_t i)
{
    float x = v[i];
    if (g) {
        x = pc_elem_fold(x, g[i]);
        v[i] = x;
    }
    return x;
}

// The quantiser kind of codec_elem.h for a dense codec's id.
__host__ __device__ __forceinline__ int quant_kind(int codec_id)
{
    return codec_id == PC_CODEC_QSGD       ? PC_ELEM_QSGD
           : codec_id == PC_CODEC_TERNGRAD ? PC_ELEM_TERNGRAD
                                           : PC_ELEM_EFSIGN;
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

// ---- host side -------------------------------------------------------------------------------

// Blocks for a grid-stride loop over n items: enough to fill the device (8 blocks of 256
// threads per multiprocessor), no more: each block of the histogram kernels pays for
// clearing and flushing its shared bins.
unsigned grid_for(int sms, size_t n);
int sm_count(int device);

struct buffer {
    void *p = nullptr;
    size_t cap = 0;
};

} // namespace pc_codec_cu

struct pc_cuda_codec {
    int device;
    int sms; // multiprocessors, for grid_for
    pc_codec_cu::buffer sel, ckey, cidx, eq, sorted, hits, payload, sample, cvals, partial, len,
        off, cub;
    pc_codec_cu::dstate *st;      // device
    pc_codec_cu::dstate *st_host; // pinned
    unsigned *hist;               // device: L1 + L2 + L3 bins
};

namespace pc_codec_cu
{

// Grow b to at least bytes (contents are not kept).
inline cudaError_t reserve(buffer &b, size_t bytes)
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
inline cudaError_t fetch(pc_cuda_codec *s, cudaStream_t q)
{
    cudaError_t e = cudaMemcpyAsync(s->st_host, s->st, sizeof(dstate), cudaMemcpyDeviceToHost, q);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(q);
    return e;
}

#define CK(call)    PC_CUDA_CK(call)
#define CK_LAUNCH() CK(cudaGetLastError())

// Canonical sum of x^2 or |x| into s->st->sum (device): codec_api.cu.
int canonical_sum(pc_cuda_codec *s, float *x, const float *g, size_t n, int squares, cudaStream_t q,
                  pc_cuda_err_t *cuerr);
// The fold every codec but none and the momentum ones starts with (codec_api.cu).
int fold_check(pc_cuda_codec *s, float *v, const float *g, size_t n, cudaStream_t q,
               pc_cuda_err_t *cuerr);
int momentum_fold(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                  pc_cuda_err_t *cuerr);
// Encode k selected indices of n with their values; *bitmap: the indices as a bitmap
// (codec_pack.cu).
int encode(pc_cuda_codec *s, const pc_codec_spec_t *spec, const unsigned *idx, size_t k, size_t n,
           float *v, bool ef, float *momentum, bool with_index, bool *bitmap, cudaStream_t q,
           size_t *bytes, pc_cuda_err_t *cuerr);
// The sparsifiers (codec_select.cu) and the dense codecs (codec_quant.cu): compress j into
// s->payload, *bytes its size.
int compress_topk(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                  size_t *bytes, pc_cuda_err_t *cuerr);
int compress_threshold(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j,
                       cudaStream_t q, size_t *bytes, pc_cuda_err_t *cuerr);
int compress_randomk(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j,
                     cudaStream_t q, size_t *bytes, pc_cuda_err_t *cuerr);
int compress_dgc(pc_cuda_codec *s, const pc_codec_t *c, pc_cuda_job_t *j, cudaStream_t q,
                 size_t *bytes, pc_cuda_err_t *cuerr);
int compress_dense(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                   size_t *bytes, pc_cuda_err_t *cuerr);
// The code width of qsgd with `levels` levels (codec_quant.cu).
unsigned qsgd_bits(int levels);

} // namespace pc_codec_cu

#endif // PC_CODEC_IMPL_CUH
