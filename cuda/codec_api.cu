// codec_api.cu: the launchers of pc_codec_cuda.h, the codec's scratch, the error-feedback fold, the
// canonical sum and decode-add (the shared parts: codec_impl.cuh).
#include "codec_impl.cuh"

namespace pc_codec_cu
{
namespace
{

// ---- fold -----------------------------------------------------------------------------

// v += g (g may be NULL: check only); flags non-finite v.
__global__ void fold_kernel(float *v, const float *g, size_t n, dstate *st)
{
    bool bad = false;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        bad |= pc_elem_nonfinite(fold_at(v, g, i));
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
        float ui = pc_elem_momentum(u[i], g[i], f, m);
        u[i] = ui;
        float x = pc_elem_fold(v[i], ui);
        v[i] = x;
        bad |= pc_elem_nonfinite(x);
    }
    flag_bad(bad, st);
}

// ---- the canonical sum (codec_internal.h) ---------------------------------------------

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
            val = pc_elem_get_value(a.payload, i, false);
        } else if (a.codec == PC_CODEC_FP16) {
            val = pc_elem_get_value(a.payload, i, true);
        } else {
            bool add;
            val = pc_elem_quant_value(quant_kind(a.codec), pc_elem_unpack(a.payload, i, a.bits),
                                      a.hscale, a.levels, &add);
            if (!add)
                continue; // the CPU adds nothing for terngrad's zero
        }
        dense[i] = pc_elem_add_scaled(dense[i], a.scale, val);
    }
}

__global__ void decode_sparse_kernel(const unsigned *idx, const unsigned char *values, size_t k,
                                     int fp16, float scale, float *dense)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += stride) {
        dense[idx[j]] =
            pc_elem_add_scaled(dense[idx[j]], scale, pc_elem_get_value(values, j, fp16));
    }
}

__global__ void philox_kernel(unsigned long long seed, unsigned long long subseq,
                              unsigned long long offset, unsigned *out, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = pc_elem_draw(seed, subseq, offset + i);
}

} // namespace

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

int canonical_sum(pc_cuda_codec *s, float *x, const float *g, size_t n, int squares, cudaStream_t q,
                  pc_cuda_err_t *cuerr)
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

// The fold every codec but none and the momentum ones starts with: v += g with error
// feedback, a finiteness check of v = g without. PC_ERANGE when not finite.
int fold_check(pc_cuda_codec *s, float *v, const float *g, size_t n, cudaStream_t q,
               pc_cuda_err_t *cuerr)
{
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    fold_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(v, g, n, s->st);
    CK_LAUNCH();
    CK(fetch(s, q));
    return s->st_host->bad ? PC_ERANGE : PC_OK;
}

// codec_sparse.c's momentum_fold.
int momentum_fold(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                  pc_cuda_err_t *cuerr)
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

} // namespace pc_codec_cu

using namespace pc_codec_cu;

extern "C" int pc_cuda_codec_create(int device, pc_cuda_codec_t **out, pc_cuda_err_t *cuerr)
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
        return pc_cuda_fail_at(cuerr, (int)e, __FILE__, __LINE__);
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

int compress_on(pc_cuda_codec_t *s, pc_cuda_job_t *j, pc_cuda_err_t *cuerr)
{
    cudaStream_t q = (cudaStream_t)j->stream;
    const pc_codec_spec_t *spec = pc_codec_spec(j->codec);
    size_t bytes = 0;
    j->entries = 0;
    j->scale = 0.0f;
    j->dgc_path = -1;
    j->bitmap = false;
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

extern "C" int pc_cuda_codec_compress(pc_cuda_codec_t *s, int device, pc_cuda_job_t *j,
                                      pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    CK(dev.err);
    int rc = compress_on(s, j, cuerr);
    if (rc != PC_OK) // nothing queued may still read the gradient or write the state
        (void)cudaStreamSynchronize((cudaStream_t)j->stream);
    return rc;
}

extern "C" int pc_cuda_codec_fold(pc_cuda_codec_t *s, int device, pc_cuda_job_t *j,
                                  pc_cuda_err_t *cuerr)
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
                                  float *dense, void *stream, pc_cuda_err_t *cuerr)
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

extern "C" int pc_cuda_philox_draws(int device, uint64_t seed, uint64_t subsequence,
                                    uint64_t offset, uint32_t *out, size_t n, pc_cuda_err_t *cuerr)
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
