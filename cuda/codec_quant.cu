// codec_quant.cu: the dense codecs: none, fp16 and the quantisers qsgd, terngrad and efsign with
// their bit packing (the shared parts: codec_impl.cuh).
#include "codec_impl.cuh"

namespace pc_codec_cu
{
namespace
{

// The largest key (a NaN's or an infinity's is above every finite one), with the fold of g
// fused when given.
__global__ void maxkey_kernel(float *v, const float *g, size_t n, dstate *st)
{
    unsigned m = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = fold_at(v, g, i);
        m = max(m, pc_elem_key(x));
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
        bad |= pc_elem_nonfinite(v[i]);
        payload[i] = pc_elem_bits(v[i]); // little-endian device: the wire's byte order
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
        bad |= pc_elem_nonfinite(v[i]);
        unsigned short h = pc_elem_f16(v[i]);
        payload[i] = h;
        if (residual)
            residual[i] = PC_FSUB(residual[i], pc_elem_f16_value(h));
    }
    flag_bad(bad, st);
}

struct quant_args {
    const float *v;
    float *residual; // NULL without error feedback
    size_t n;
    unsigned bits; // code width b
    float scale;   // qsgd: norm; terngrad: max; efsign: mean
    int levels;    // qsgd: s
    unsigned long long seed, subseq;
};

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
    if (C != PC_ELEM_EFSIGN && i0 < a.n)
        d = draws4(a.seed, a.subseq, i0 / 4);
    for (int j = 0; j < 4; j++) {
        size_t i = i0 + j;
        if (i >= a.n)
            break;
        float sent;
        unsigned code = pc_elem_quant_code(C, a.v[i], a.scale, a.levels, word_of(d, j), &sent);
        pc_elem_pack(words, (unsigned)(i - tile0) * a.bits, code, a.bits);
        if (a.residual)
            a.residual[i] = PC_FSUB(a.residual[i], sent);
    }
    __syncthreads();
    // Whole words: the device buffer is padded to a word; pad bits stay zero.
    size_t first = tile0 * a.bits / 32, total = (a.n * a.bits + 31) / 32;
    if (threadIdx.x < nwords && first + threadIdx.x < total)
        payload[first + threadIdx.x] = words[threadIdx.x];
}

} // namespace

unsigned qsgd_bits(int levels)
{
    unsigned b = 1;
    while ((1u << b) < (unsigned)(2 * levels + 1))
        b++;
    return b;
}

int compress_dense(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                   size_t *bytes, pc_cuda_err_t *cuerr)
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
        quant_kernel<PC_ELEM_QSGD><<<tiles, TPB, 0, q>>>(a, out);
    else if (spec->id == PC_CODEC_TERNGRAD)
        quant_kernel<PC_ELEM_TERNGRAD><<<tiles, TPB, 0, q>>>(a, out);
    else
        quant_kernel<PC_ELEM_EFSIGN><<<tiles, TPB, 0, q>>>(a, out);
    CK_LAUNCH();
    return PC_OK;
}

} // namespace pc_codec_cu
