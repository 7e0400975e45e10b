// codec_pack.cu: the sparse messages' encoding: u32 or delta-varint indices, or a bitmap of n
// bits where that is smaller (as the CPU codec chooses: codec_sparse.c), f32 or f16 values
// (the shared parts: codec_impl.cuh).
#include "codec_impl.cuh"

namespace pc_codec_cu
{
namespace
{

// ---- sparse encoding ----------------------------------------------------------------------

__global__ void varint_len_kernel(const unsigned *idx, size_t k, unsigned *len)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += stride)
        len[j] = pc_elem_varint_len(pc_elem_gap(idx, j));
}

__global__ void varint_total_kernel(const unsigned *off, const unsigned *len, size_t k, dstate *st)
{
    st->vbytes = k ? off[k - 1] + len[k - 1] : 0;
}

// The bitmap form's bits: index i is bit i % 32 of the little-endian word i / 32 of the
// payload (bit i % 8 of byte i / 8), zeroed before.
__global__ void bitmap_kernel(const unsigned *idx, size_t k, unsigned *words)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += stride)
        atomicOr(&words[idx[j] >> 5], 1u << (idx[j] & 31));
}

// Indices (u32 or varints at off[j]; none here for the bitmap form) and values of the
// selected elements; error feedback takes what was sent out of v; the momentum is masked
// where values were sent.
struct encode_args {
    const unsigned *idx;
    size_t k;
    float *v; // the values' source: the residual (written when ef) or the gradient
    bool ef, fp16, delta, with_index;
    float *momentum;     // NULL: no masking
    const unsigned *off; // delta: byte offset of each varint
    unsigned char *payload;
    size_t values; // where the values start: the index section's bytes
};

__global__ void encode_kernel(encode_args a)
{
    size_t values = a.values;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < a.k; j += stride) {
        unsigned i = a.idx[j];
        if (a.with_index && a.delta)
            pc_elem_varint_put(a.payload + a.off[j], pc_elem_gap(a.idx, j));
        else if (a.with_index)
            reinterpret_cast<unsigned *>(a.payload)[j] = i;
        float left = pc_elem_put_value(a.payload + values, j, a.v[i], a.fp16);
        if (a.ef)
            a.v[i] = left;
        if (a.momentum)
            a.momentum[i] = 0.0f;
    }
}

} // namespace

// Encode k selected indices of n (ascending, device) with their values from v into the
// payload; *bitmap: whether the indices went as a bitmap (PC_WIRE_F_BITMAP).
int encode(pc_cuda_codec *s, const pc_codec_spec_t *spec, const unsigned *idx, size_t k, size_t n,
           float *v, bool ef, float *momentum, bool with_index, bool *bitmap, cudaStream_t q,
           size_t *bytes, pc_cuda_err_t *cuerr)
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
    size_t nb = (n + 7) / 8;
    *bitmap = with_index && nb < ib; // strictly smaller, as the CPU codec's rule
    if (*bitmap)
        ib = nb;
    *bytes = ib + vb * k;
    CK(reserve(s->payload, *bytes + 4)); // the bitmap's last word: at most 3 bytes past nb
    if (*bitmap) {
        CK(cudaMemsetAsync(s->payload.p, 0, nb, q));
        bitmap_kernel<<<grid_for(s->sms, k), TPB, 0, q>>>(idx, k, as<unsigned>(s->payload));
        CK_LAUNCH();
    }
    if (k) {
        encode_args a = {idx,
                         k,
                         v,
                         ef,
                         spec->values == PC_VALUES_FP16,
                         delta && !*bitmap,
                         with_index && !*bitmap,
                         momentum,
                         as<unsigned>(s->off),
                         as<unsigned char>(s->payload),
                         ib};
        encode_kernel<<<grid_for(s->sms, k), TPB, 0, q>>>(a);
        CK_LAUNCH();
    }
    return PC_OK;
}

} // namespace pc_codec_cu
