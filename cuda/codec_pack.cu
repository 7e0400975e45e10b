// codec_pack.cu: the sparse messages' encoding: u32 or delta-varint indices, f32 or f16 values (the
// shared parts: codec_impl.cuh).
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

// Encode k selected indices (ascending, device) with their values from v into the payload.
int encode(pc_cuda_codec *s, const pc_codec_spec_t *spec, const unsigned *idx, size_t k, float *v,
           bool ef, float *momentum, bool with_index, cudaStream_t q, size_t *bytes,
           pc_cuda_err_t *cuerr)
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

} // namespace pc_codec_cu
