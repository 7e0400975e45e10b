// pc_layers.cu: the training engine's layers on a CUDA device (pc_layers_cuda.h), against the
// CPU layers of src/engine/pc_layers.c, which are the reference.
//
// GEMMs are cuBLAS SGEMMs on the engine's stream, called with pc_layers.c's row-major
// arguments through gemm_rm (a row-major C = op(A) op(B) is the column-major C^T = op(B)^T
// op(A)^T, so the operands swap and nothing is copied). A convolution runs `chunk` images at
// a time: im2col writes col as (C*K*K, chunk*H*W), one GEMM gives (OC, chunk*H*W), a
// transpose kernel puts it in NCHW and adds the bias; the backward transposes dout the
// other way, so the weight gradient of a chunk is one GEMM whose inner dimension is every
// pixel of every image, and the input gradient one GEMM into col (reused as dcol) and a
// col2im gather. One GEMM per chunk instead of one per image (pc_layers.c's loop) is what
// keeps the device busy: per image, conv2's GEMM is 64 x 196 x 800, far too small to fill a
// GPU.
//
// Deterministic, and as close to the CPU as the arithmetic allows: no atomics anywhere;
// every sum has one fixed order (the bias gradients and the loss are reductions over fixed
// thread strides and a fixed shared-memory tree; col2im adds a pixel's K*K terms in the
// CPU's (ky, kx) order); float arithmetic is spelt with the _rn intrinsics and the file is
// built with -fmad=false, so ReLU, max-pool, dropout, col2im of a given dcol, the linear bias
// gradient and the softmax's backward give the CPU's bits. cuBLAS is deterministic for a
// given GPU, toolkit and problem when each stream has a workspace of its own and atomics are
// off (its documentation, "Results reproducibility"); its summation order differs from
// OpenBLAS's, which is the tolerance the tests allow. The dropout mask is the CPU's, bit for
// bit: draw i of Philox (seed, stream) is word i % 4 of cuRAND's block i / 4, as in
// cuda/codec_impl.cuh.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand_kernel.h>
#include <math_constants.h>

#include <limits.h>

#include <new>

#include "pc_device.cuh"
#include "layers_elem.h"
#include "pc_layers_cuda.h"

namespace
{

constexpr int TPB = 256; // threads per block of the element-wise kernels and the reductions

// cuBLAS's workspace: 32 MiB, what its documentation recommends for Hopper (4 MiB before);
// a workspace of the handle's own is one condition of bitwise reproducible results.
constexpr size_t BLAS_WORKSPACE = (size_t)32 << 20;

struct xent_result {
    float loss;  // mean over the batch
    int correct; // argmax == label
};

} // namespace

struct pc_cuda_engine {
    int device;
    int sms; // multiprocessors, for grid_for
    cudaStream_t stream;
    cublasHandle_t blas;
    void *workspace;       // BLAS_WORKSPACE bytes, device
    xent_result *res_dev;  // the loss and count, device
    xent_result *res_host; // their copy, pinned
    pc_cuda_err_t err;     // the last failed call of a launcher (CK)
};

namespace
{

// The launchers' convention (pc_cuda_err.h): a PC_* code, the failed call kept in the
// engine `e` of the launcher (pc_cuda_engine_error).
#define CK(call) PC_CUDA_CK_TO(&e->err, call)

#define CKB(call)                                                                                  \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return pc_cuda_fail_at(&e->err, PC_CUDA_CUBLAS_BASE + (int)s_, __FILE__, __LINE__);    \
    } while (0)

#define CK_LAUNCH() CK(cudaGetLastError())

// Sizes the launcher refuses: PC_EINVAL, kept as cudaErrorInvalidValue.
#define CK_ARGS(ok)                                                                                \
    do {                                                                                           \
        if (!(ok))                                                                                 \
            return pc_cuda_fail_at(&e->err, (int)cudaErrorInvalidValue, __FILE__, __LINE__);       \
    } while (0)

// Blocks for a grid-stride loop over n >= 1 items: 16 blocks of 256 threads per
// multiprocessor at most (enough to hide latency; more only costs scheduling).
unsigned grid_for(const pc_cuda_engine *e, size_t n)
{
    size_t b = (n + TPB - 1) / TPB, most = (size_t)(e->sms > 0 ? e->sms : 1) * 16;
    return (unsigned)(b < most ? b : most);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

// Row-major C (M, N) = op(A) (M, K) . op(B) (K, N) + beta C, with the leading dimensions a
// row-major (cblas) call takes: cuBLAS is column-major, where the stored C is C^T =
// op(B)^T op(A)^T, so B comes first and the transposes carry over as they are.
cublasStatus_t gemm_rm(cublasHandle_t h, bool ta, bool tb, int M, int N, int K, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const float one = 1.0f;
    return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                       &one, B, ldb, A, lda, &beta, C, ldc);
}

// A block's sum of one value per thread (blockDim.x == TPB) in a fixed tree order, returned
// to every thread. Every thread of the block must call it; it may be called again at once
// (the last barrier keeps the next call's writes after this call's reads).
template <typename T> __device__ T block_sum(T v)
{
    __shared__ T s[TPB];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int k = TPB / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k)
            s[threadIdx.x] = s[threadIdx.x] + s[threadIdx.x + k];
        __syncthreads();
    }
    T r = s[0];
    __syncthreads();
    return r;
}

// ---- linear ---------------------------------------------------------------------------------

// out (B, OC) = bias, row after row (the GEMM then adds into it, as pc_linear_forward).
__global__ void bias_rows_kernel(float *out, const float *bias, size_t total, int OC)
{
    GRID_STRIDE(i, total)
    {
        out[i] = bias[i % (size_t)OC];
    }
}

// dbias (OC) = the column sums of dout (B, OC) for many rows. Block (32, 8): 32 columns,
// each column's rows split over 8 threads (row r to thread r % 8, in row order), whose 8
// partials are then added in order 0 .. 7: a fixed order, not the CPU's.
__global__ void colsum_kernel(float *dbias, const float *dout, int B, int OC)
{
    __shared__ float part[8][33];
    int o = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (o < OC)
        for (int b = threadIdx.y; b < B; b += 8)
            acc = __fadd_rn(acc, dout[(size_t)b * OC + o]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        float s = part[0][threadIdx.x];
        for (int r = 1; r < 8; r++)
            s = __fadd_rn(s, part[r][threadIdx.x]);
        dbias[o] = s;
    }
}

// dbias (OC) = the column sums of dout (B, OC), one thread per column adding the rows in
// order from 0: pc_linear_backward's order, so the same dout gives the CPU's bits.
__global__ void colsum_serial_kernel(float *dbias, const float *dout, int B, int OC)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC)
        return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
        acc = __fadd_rn(acc, dout[(size_t)b * OC + o]);
    dbias[o] = acc;
}

// Column sums of dout (B, OC): serially per column (the CPU's bits) while a column has few
// enough rows for that to be quick, else 8 rows at a time per column. Rows 256 and below:
// a serial pass of 256 loads is about as fast as the split one's launch.
int colsum_launch(pc_cuda_engine *e, float *dbias, const float *dout, int B, int OC)
{
    if (B <= 256) {
        colsum_serial_kernel<<<(unsigned)((OC + TPB - 1) / TPB), TPB, 0, e->stream>>>(dbias, dout,
                                                                                      B, OC);
    } else {
        dim3 block(32, 8);
        colsum_kernel<<<(unsigned)((OC + 31) / 32), block, 0, e->stream>>>(dbias, dout, B, OC);
    }
    CK_LAUNCH();
    return 0;
}

// ---- convolution ----------------------------------------------------------------------------

// The convolution's rearrangements run on 2-D grids: blockIdx.y walks the rows of the
// (rows, N) matrix side (a col row, a channel) and x the N = nb*H*W columns, so that what
// depends on the row is computed once per thread and the column index is 32-bit (N fits
// an int: it is a GEMM dimension). MAX_GRID_Y is CUDA's limit of gridDim.y.
constexpr unsigned MAX_GRID_Y = 65535;

dim3 grid_2d(int rows, int N)
{
    return dim3((unsigned)((N + TPB - 1) / TPB),
                (unsigned)(rows < (int)MAX_GRID_Y ? rows : MAX_GRID_Y));
}

#define COLUMNS(j, N)                                                                              \
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < (N); j += gridDim.x * blockDim.x)

// col (C*K*K, nb*H*W): row (c, ky, kx), column (b, y, x) holds img[b, c, y + ky - pad,
// x + kx - pad], zero outside; img (nb, C, H, W).
__global__ void im2col_kernel(float *col, const float *img, int nb, int C, int H, int W, int K)
{
    int pad = K / 2, HW = H * W, N = nb * HW, rows = C * K * K;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        int kx = r % K, t = r / K, ky = t % K, c = t / K;
        float *dst = col + (size_t)r * N;
        COLUMNS(j, N)
        {
            int b = j / HW, hw = j - b * HW, y = hw / W, x = hw - y * W;
            int iy = y + ky - pad, ix = x + kx - pad;
            dst[j] = (iy >= 0 && iy < H && ix >= 0 && ix < W)
                         ? img[((size_t)b * C + c) * HW + (size_t)iy * W + ix]
                         : 0.0f;
        }
    }
}

// The adjoint of im2col as a gather: img (nb, C, H, W) pixel (b, c, y, x) is the sum of the
// col entries that read it, row (c, ky, kx) at column (b, y - ky + pad, x - kx + pad), added
// from 0 in (ky, kx) order: pc_layers.c's col2im adds them in that order too.
__global__ void col2im_kernel(float *img, const float *col, int nb, int C, int H, int W, int K)
{
    int pad = K / 2, HW = H * W, N = nb * HW;
    for (int c = blockIdx.y; c < C; c += gridDim.y) {
        COLUMNS(j, N)
        {
            int b = j / HW, hw = j - b * HW, y = hw / W, x = hw - y * W;
            float acc = 0.0f;
            for (int ky = 0; ky < K; ky++) {
                int oy = y - ky + pad;
                if (oy < 0 || oy >= H)
                    continue;
                const float *row = col + (size_t)((c * K + ky) * K) * N + (size_t)b * HW + oy * W;
                for (int kx = 0; kx < K; kx++) {
                    int ox = x - kx + pad;
                    if (ox >= 0 && ox < W)
                        acc = __fadd_rn(acc, row[(size_t)kx * N + ox]);
                }
            }
            img[((size_t)b * C + c) * HW + hw] = acc;
        }
    }
}

// out (nb, OC, HW) = tmp (OC, nb*HW) transposed per image, plus bias (OC).
__global__ void to_nchw_bias_kernel(float *out, const float *tmp, const float *bias, int nb, int OC,
                                    int HW)
{
    int N = nb * HW;
    for (int oc = blockIdx.y; oc < OC; oc += gridDim.y) {
        float bo = bias[oc];
        COLUMNS(j, N)
        {
            int b = j / HW, hw = j - b * HW;
            out[((size_t)b * OC + oc) * HW + hw] = __fadd_rn(tmp[(size_t)oc * N + j], bo);
        }
    }
}

// tmp (OC, nb*HW) = dout (nb, OC, HW), the inverse of to_nchw's transpose.
__global__ void from_nchw_kernel(float *tmp, const float *dout, int nb, int OC, int HW)
{
    int N = nb * HW;
    for (int oc = blockIdx.y; oc < OC; oc += gridDim.y) {
        COLUMNS(j, N)
        {
            int b = j / HW, hw = j - b * HW;
            tmp[(size_t)oc * N + j] = dout[((size_t)b * OC + oc) * HW + hw];
        }
    }
}

// dbias (OC) = the sum of dout (B, OC, HW) over B and HW: one block per channel, thread t
// adding pixels t, t + 256, ... of each image in image order, then the block's tree.
__global__ void channel_sum_kernel(float *dbias, const float *dout, int B, int OC, int HW)
{
    int oc = blockIdx.x;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) {
        const float *p = dout + ((size_t)b * OC + oc) * HW;
        for (int hw = threadIdx.x; hw < HW; hw += TPB)
            acc = __fadd_rn(acc, p[hw]);
    }
    float s = block_sum(acc);
    if (threadIdx.x == 0)
        dbias[oc] = s;
}

// ---- pooling, ReLU, dropout -----------------------------------------------------------------

// One thread per output: pc_maxpool_forward's comparisons in its order (ties to the first).
__global__ void maxpool_kernel(float *out, int32_t *argmax, const float *inp, size_t BC, int H,
                               int W)
{
    int OH = H / 2, OW = W / 2;
    size_t total = BC * OH * OW;
    GRID_STRIDE(o, total)
    {
        size_t bc = o / ((size_t)OH * OW);
        int rem = (int)(o - bc * OH * OW), y = rem / OW, x = rem - y * OW;
        const float *in = inp + bc * H * W;
        int best = pc_elem_maxpool_arg(in, W, y, x);
        out[o] = in[best];
        argmax[o] = best;
    }
}

// One thread per input: its window's gradient when it was the window's maximum, else 0
// (0 + dout, as the CPU's zeroing then adding gives: -0 becomes +0 the same way).
__global__ void maxpool_back_kernel(float *dinp, const float *dout, const int32_t *argmax,
                                    size_t BC, int H, int W)
{
    size_t total = BC * H * W;
    GRID_STRIDE(idx, total)
    {
        dinp[idx] = pc_elem_maxpool_grad(idx, H, W, argmax, dout);
    }
}

__global__ void relu_kernel(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        out[i] = pc_elem_relu(inp[i]);
    }
}

__global__ void relu_back_kernel(float *dinp, const float *dout, const float *out, size_t n)
{
    GRID_STRIDE(i, n)
    {
        dinp[i] = pc_elem_relu_back(dout[i], out[i]);
    }
}

// Thread q: elements 4q .. 4q+3 from draws 4q .. 4q+3 of Philox (seed, stream), one cuRAND
// block (codec_impl.cuh's draws4): mask = uniform <= keep, out = mask ? inp * scale : 0.
__global__ void dropout_kernel(float *out, uint8_t *mask, const float *inp, size_t n, float keep,
                               float scale, unsigned long long seed, unsigned long long stream)
{
    size_t nq = (n + 3) / 4;
    GRID_STRIDE(q, nq)
    {
        curandStatePhilox4_32_10_t s;
        curand_init(seed, stream, 4 * (unsigned long long)q, &s);
        uint4 w = curand4(&s);
        const unsigned words[4] = {w.x, w.y, w.z, w.w};
        for (int j = 0; j < 4; j++) {
            size_t i = 4 * q + (size_t)j;
            if (i >= n)
                break;
            bool kept = pc_elem_dropout_kept(words[j], keep);
            mask[i] = kept;
            out[i] = pc_elem_dropout(inp[i], kept, scale);
        }
    }
}

// p = 0: out = inp, every mask byte 1 (pc_dropout_forward's copy).
__global__ void dropout_copy_kernel(float *out, uint8_t *mask, const float *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        out[i] = inp[i];
        mask[i] = 1;
    }
}

__global__ void dropout_back_kernel(float *dinp, const float *dout, const uint8_t *mask, size_t n,
                                    float scale)
{
    GRID_STRIDE(i, n)
    {
        dinp[i] = pc_elem_dropout(dout[i], mask[i] != 0, scale);
    }
}

// ---- softmax cross-entropy --------------------------------------------------------------------

// One thread per row, pc_softmax_xent_forward's steps in its order: the first maximum, the
// exponentials summed in double, the probabilities rounded from double; the row's term of
// the loss (-log p[label], in double) and whether the argmax is the label go to rows.
__global__ void softmax_rows_kernel(float *probs, double *term, int *ok, const float *logits,
                                    const uint8_t *labels, int B, int V)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B)
        return;
    const float *l = logits + (size_t)b * V;
    float *p = probs + (size_t)b * V;
    float mx = l[0];
    int arg = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > mx) {
            mx = l[v];
            arg = v;
        }
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        float x = expf(__fsub_rn(l[v], mx));
        p[v] = x;
        sum = __dadd_rn(sum, (double)x);
    }
    for (int v = 0; v < V; v++)
        p[v] = __double2float_rn(__ddiv_rn((double)p[v], sum));
    int lab = labels[b];
    term[b] = lab < V ? -log(fmax((double)p[lab], 1e-30)) : CUDART_NAN;
    ok[b] = lab == arg;
}

// One block: the mean of the B terms (thread t adds rows t, t + 256, ... in order, then the
// block's tree) and the count of correct rows.
__global__ void xent_reduce_kernel(xent_result *res, const double *term, const int *ok, int B)
{
    double s = 0.0;
    int c = 0;
    for (int b = threadIdx.x; b < B; b += TPB) {
        s = __dadd_rn(s, term[b]);
        c += ok[b];
    }
    double total = block_sum(s);
    int count = block_sum(c);
    if (threadIdx.x == 0) {
        res->loss = __double2float_rn(__ddiv_rn(total, (double)B));
        res->correct = count;
    }
}

// dlogits = (probs - onehot(labels)) * (1/B), pc_softmax_xent_backward's arithmetic.
__global__ void xent_back_kernel(float *dlogits, const float *probs, const uint8_t *labels,
                                 size_t total, int V, float inv)
{
    GRID_STRIDE(i, total)
    {
        size_t b = i / (size_t)V;
        int v = (int)(i - b * V);
        dlogits[i] = pc_elem_xent_back(probs[i], v == labels[b], inv);
    }
}

} // namespace

// ---- the engine -----------------------------------------------------------------------------

extern "C" int pc_cuda_engine_create(int device, pc_cuda_engine_t **out, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    pc_cuda_engine *e = new (std::nothrow) pc_cuda_engine();
    if (!e)
        return PC_ENOMEM;
    e->device = device;
    int rc = 0; // the failed call's cudaError_t or cuBLAS code
    int line = 0;
    cudaError_t c = cudaDeviceGetAttribute(&e->sms, cudaDevAttrMultiProcessorCount, device);
    // The training's stream at the device's highest priority: the runtime's device codec
    // runs on a stream of the lowest (pc_gpu), so the training's kernels go first.
    int least = 0, greatest = 0;
    if (c == cudaSuccess)
        c = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (c == cudaSuccess)
        c = cudaStreamCreateWithPriority(&e->stream, cudaStreamNonBlocking, greatest);
    if (c == cudaSuccess)
        c = cudaMalloc(&e->workspace, BLAS_WORKSPACE);
    if (c == cudaSuccess)
        c = cudaMalloc((void **)&e->res_dev, sizeof(xent_result));
    if (c == cudaSuccess)
        c = cudaHostAlloc((void **)&e->res_host, sizeof(xent_result), cudaHostAllocPortable);
    if (c != cudaSuccess) {
        rc = (int)c;
        line = __LINE__;
    }
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (!rc) {
        s = cublasCreate(&e->blas);
        if (s != CUBLAS_STATUS_SUCCESS)
            e->blas = nullptr;
    }
    // The stream first: cublasSetStream resets the handle's workspace to the default pool.
    if (!rc && s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetStream(e->blas, e->stream);
    if (!rc && s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetWorkspace(e->blas, e->workspace, BLAS_WORKSPACE);
    // FP32 throughout: the default math of SGEMM uses no TF32 (only CUBLAS_TF32_TENSOR_OP_MATH
    // would); pedantic math would also forbid split reductions that are deterministic
    // anyway, at some speed. Atomics off: no reduction order left to chance.
    if (!rc && s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetMathMode(e->blas, CUBLAS_DEFAULT_MATH);
    if (!rc && s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetAtomicsMode(e->blas, CUBLAS_ATOMICS_NOT_ALLOWED);
    if (!rc && s != CUBLAS_STATUS_SUCCESS) {
        rc = PC_CUDA_CUBLAS_BASE + (int)s;
        line = __LINE__;
    }
    if (rc) {
        pc_cuda_engine_destroy(e);
        return pc_cuda_fail_at(cuerr, rc, __FILE__, line);
    }
    *out = e;
    return PC_OK;
}

extern "C" void pc_cuda_engine_destroy(pc_cuda_engine_t *e)
{
    if (!e)
        return;
    device_scope dev(e->device);
    if (e->stream)
        cudaStreamSynchronize(e->stream);
    if (e->blas)
        cublasDestroy(e->blas);
    if (e->workspace)
        cudaFree(e->workspace);
    if (e->res_dev)
        cudaFree(e->res_dev);
    if (e->res_host)
        cudaFreeHost(e->res_host);
    if (e->stream)
        cudaStreamDestroy(e->stream);
    (void)cudaGetLastError(); // nothing of this engine's teardown may fail a later call
    delete e;
}

extern "C" void *pc_cuda_engine_stream(const pc_cuda_engine_t *e)
{
    return (void *)e->stream;
}

extern "C" const pc_cuda_err_t *pc_cuda_engine_error(const pc_cuda_engine_t *e)
{
    return &e->err;
}

extern "C" int pc_cuda_engine_sync(pc_cuda_engine_t *e)
{
    device_scope dev(e->device);
    CK(dev.err);
    CK(cudaStreamSynchronize(e->stream));
    return PC_OK;
}

// ---- linear ---------------------------------------------------------------------------------

extern "C" int pc_cuda_linear_forward(pc_cuda_engine_t *e, float *out, const float *inp,
                                      const float *weight, const float *bias, int B, int C, int OC)
{
    CK_ARGS(B >= 1 && C >= 1 && OC >= 1);
    device_scope dev(e->device);
    CK(dev.err);
    size_t total = (size_t)B * OC;
    bias_rows_kernel<<<grid_for(e, total), TPB, 0, e->stream>>>(out, bias, total, OC);
    CK_LAUNCH();
    // out (B, OC) += inp (B, C) . weight (OC, C)^T
    CKB(gemm_rm(e->blas, false, true, B, OC, C, inp, C, weight, C, 1.0f, out, OC));
    return 0;
}

extern "C" int pc_cuda_linear_backward(pc_cuda_engine_t *e, float *dinp, float *dweight,
                                       float *dbias, const float *dout, const float *inp,
                                       const float *weight, int B, int C, int OC)
{
    CK_ARGS(B >= 1 && C >= 1 && OC >= 1);
    device_scope dev(e->device);
    CK(dev.err);
    // dweight (OC, C) = dout^T (OC, B) . inp (B, C)
    CKB(gemm_rm(e->blas, true, false, OC, C, B, dout, OC, inp, C, 0.0f, dweight, C));
    int rc = colsum_launch(e, dbias, dout, B, OC);
    if (rc)
        return rc;
    // dinp (B, C) = dout (B, OC) . weight (OC, C)
    if (dinp)
        CKB(gemm_rm(e->blas, false, false, B, C, OC, dout, OC, weight, C, 0.0f, dinp, C));
    return 0;
}

// ---- convolution ----------------------------------------------------------------------------

extern "C" size_t pc_cuda_conv2d_col_floats(int C, int H, int W, int K)
{
    return (size_t)C * K * K * H * W;
}

extern "C" size_t pc_cuda_conv2d_tmp_floats(int H, int W, int OC)
{
    return (size_t)OC * H * W;
}

// The sizes a convolution takes: positive, K odd, and every GEMM dimension an int.
static bool conv_args(int B, int C, int H, int W, int OC, int K, int chunk)
{
    return B >= 1 && C >= 1 && H >= 1 && W >= 1 && OC >= 1 && K >= 1 && K % 2 == 1 && chunk >= 1 &&
           (size_t)C * K * K <= INT_MAX && (size_t)(chunk < B ? chunk : B) * H * W <= INT_MAX;
}

extern "C" int pc_cuda_conv2d_forward(pc_cuda_engine_t *e, float *out, float *col, float *tmp,
                                      const float *inp, const float *weight, const float *bias,
                                      int B, int C, int H, int W, int OC, int K, int chunk)
{
    CK_ARGS(conv_args(B, C, H, W, OC, K, chunk));
    device_scope dev(e->device);
    CK(dev.err);
    int HW = H * W, CKK = C * K * K;
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int nb = B - b0 < chunk ? B - b0 : chunk, N = nb * HW;
        im2col_kernel<<<grid_2d(CKK, N), TPB, 0, e->stream>>>(col, inp + (size_t)b0 * C * HW, nb, C,
                                                              H, W, K);
        CK_LAUNCH();
        // tmp (OC, N) = weight (OC, CKK) . col (CKK, N)
        CKB(gemm_rm(e->blas, false, false, OC, N, CKK, weight, CKK, col, N, 0.0f, tmp, N));
        to_nchw_bias_kernel<<<grid_2d(OC, N), TPB, 0, e->stream>>>(out + (size_t)b0 * OC * HW, tmp,
                                                                   bias, nb, OC, HW);
        CK_LAUNCH();
    }
    return 0;
}

extern "C" int pc_cuda_conv2d_backward(pc_cuda_engine_t *e, float *dinp, float *dweight,
                                       float *dbias, float *col, float *tmp, const float *dout,
                                       const float *inp, const float *weight, int B, int C, int H,
                                       int W, int OC, int K, int chunk)
{
    CK_ARGS(conv_args(B, C, H, W, OC, K, chunk));
    device_scope dev(e->device);
    CK(dev.err);
    int HW = H * W, CKK = C * K * K;
    channel_sum_kernel<<<(unsigned)OC, TPB, 0, e->stream>>>(dbias, dout, B, OC, HW);
    CK_LAUNCH();
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int nb = B - b0 < chunk ? B - b0 : chunk, N = nb * HW;
        im2col_kernel<<<grid_2d(CKK, N), TPB, 0, e->stream>>>(col, inp + (size_t)b0 * C * HW, nb, C,
                                                              H, W, K);
        CK_LAUNCH();
        from_nchw_kernel<<<grid_2d(OC, N), TPB, 0, e->stream>>>(tmp, dout + (size_t)b0 * OC * HW,
                                                                nb, OC, HW);
        CK_LAUNCH();
        // dweight (OC, CKK) (+)= tmp (OC, N) . col^T (N, CKK); chunks in order
        CKB(gemm_rm(e->blas, false, true, OC, CKK, N, tmp, N, col, N, b0 ? 1.0f : 0.0f, dweight,
                    CKK));
        if (!dinp)
            continue;
        // dcol (CKK, N) = weight^T (CKK, OC) . tmp (OC, N), into col (read above, in stream
        // order before this overwrites it)
        CKB(gemm_rm(e->blas, true, false, CKK, N, OC, weight, CKK, tmp, N, 0.0f, col, N));
        col2im_kernel<<<grid_2d(C, N), TPB, 0, e->stream>>>(dinp + (size_t)b0 * C * HW, col, nb, C,
                                                            H, W, K);
        CK_LAUNCH();
    }
    return 0;
}

// ---- pooling, ReLU, dropout -----------------------------------------------------------------

extern "C" int pc_cuda_maxpool_forward(pc_cuda_engine_t *e, float *out, int32_t *argmax,
                                       const float *inp, int B, int C, int H, int W)
{
    CK_ARGS(B >= 1 && C >= 1 && H >= 2 && W >= 2);
    device_scope dev(e->device);
    CK(dev.err);
    size_t BC = (size_t)B * C, total = BC * (H / 2) * (W / 2);
    maxpool_kernel<<<grid_for(e, total), TPB, 0, e->stream>>>(out, argmax, inp, BC, H, W);
    CK_LAUNCH();
    return 0;
}

extern "C" int pc_cuda_maxpool_backward(pc_cuda_engine_t *e, float *dinp, const float *dout,
                                        const int32_t *argmax, int B, int C, int H, int W)
{
    CK_ARGS(B >= 1 && C >= 1 && H >= 2 && W >= 2);
    device_scope dev(e->device);
    CK(dev.err);
    size_t BC = (size_t)B * C, total = BC * H * W;
    maxpool_back_kernel<<<grid_for(e, total), TPB, 0, e->stream>>>(dinp, dout, argmax, BC, H, W);
    CK_LAUNCH();
    return 0;
}

extern "C" int pc_cuda_relu_forward(pc_cuda_engine_t *e, float *out, const float *inp, size_t n)
{
    if (!n)
        return 0;
    device_scope dev(e->device);
    CK(dev.err);
    relu_kernel<<<grid_for(e, n), TPB, 0, e->stream>>>(out, inp, n);
    CK_LAUNCH();
    return 0;
}

extern "C" int pc_cuda_relu_backward(pc_cuda_engine_t *e, float *dinp, const float *dout,
                                     const float *out, size_t n)
{
    if (!n)
        return 0;
    device_scope dev(e->device);
    CK(dev.err);
    relu_back_kernel<<<grid_for(e, n), TPB, 0, e->stream>>>(dinp, dout, out, n);
    CK_LAUNCH();
    return 0;
}

extern "C" int pc_cuda_dropout_forward(pc_cuda_engine_t *e, float *out, uint8_t *mask,
                                       const float *inp, size_t n, float p, uint64_t seed,
                                       uint64_t stream)
{
    if (!n)
        return 0;
    device_scope dev(e->device);
    CK(dev.err);
    if (p <= 0) {
        dropout_copy_kernel<<<grid_for(e, n), TPB, 0, e->stream>>>(out, mask, inp, n);
    } else {
        // keep and scale computed as pc_dropout_forward computes them (host floats).
        float keep = 1.0f - p, scale = 1.0f / keep;
        dropout_kernel<<<grid_for(e, (n + 3) / 4), TPB, 0, e->stream>>>(out, mask, inp, n, keep,
                                                                        scale, seed, stream);
    }
    CK_LAUNCH();
    return 0;
}

extern "C" int pc_cuda_dropout_backward(pc_cuda_engine_t *e, float *dinp, const float *dout,
                                        const uint8_t *mask, size_t n, float p)
{
    if (!n)
        return 0;
    device_scope dev(e->device);
    CK(dev.err);
    float scale = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
    dropout_back_kernel<<<grid_for(e, n), TPB, 0, e->stream>>>(dinp, dout, mask, n, scale);
    CK_LAUNCH();
    return 0;
}

// ---- softmax cross-entropy --------------------------------------------------------------------

extern "C" size_t pc_cuda_softmax_rows_bytes(int B)
{
    return (size_t)(B > 0 ? B : 0) * (sizeof(double) + sizeof(int));
}

extern "C" int pc_cuda_softmax_xent_forward(pc_cuda_engine_t *e, float *probs, void *rows,
                                            const float *logits, const uint8_t *labels, int B,
                                            int V)
{
    CK_ARGS(B >= 1 && V >= 1);
    device_scope dev(e->device);
    CK(dev.err);
    double *term = static_cast<double *>(rows);
    int *ok = reinterpret_cast<int *>(term + B);
    softmax_rows_kernel<<<(unsigned)((B + 127) / 128), 128, 0, e->stream>>>(probs, term, ok, logits,
                                                                            labels, B, V);
    CK_LAUNCH();
    xent_reduce_kernel<<<1, TPB, 0, e->stream>>>(e->res_dev, term, ok, B);
    CK_LAUNCH();
    return 0;
}

extern "C" int pc_cuda_softmax_xent_result(pc_cuda_engine_t *e, float *loss, int *correct)
{
    device_scope dev(e->device);
    CK(dev.err);
    CK(cudaMemcpyAsync(e->res_host, e->res_dev, sizeof(xent_result), cudaMemcpyDeviceToHost,
                       e->stream));
    CK(cudaStreamSynchronize(e->stream));
    if (loss)
        *loss = e->res_host->loss;
    if (correct)
        *correct = e->res_host->correct;
    return 0;
}

extern "C" int pc_cuda_softmax_xent_backward(pc_cuda_engine_t *e, float *dlogits,
                                             const float *probs, const uint8_t *labels, int B,
                                             int V)
{
    CK_ARGS(B >= 1 && V >= 1);
    device_scope dev(e->device);
    CK(dev.err);
    size_t total = (size_t)B * V;
    float inv = 1.0f / (float)B; // pc_softmax_xent_backward's
    xent_back_kernel<<<grid_for(e, total), TPB, 0, e->stream>>>(dlogits, probs, labels, total, V,
                                                                inv);
    CK_LAUNCH();
    return 0;
}
