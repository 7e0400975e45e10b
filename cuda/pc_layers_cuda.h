/* The training engine's layers on a CUDA device (cuda/pc_layers.cu), callable from C
 * (src/engine/pc_model.c). Private to the library.
 *
 * An engine is one device, one stream and one cuBLAS handle bound to that stream. Every
 * launcher makes the engine's device current on the calling thread (and restores the
 * caller's), queues its work on the engine's stream and returns without waiting for it,
 * except where it says it waits. Arrays are device memory, row-major, with the shapes of
 * pc_layers.h, whose functions are the CPU references; the launchers have their arguments
 * (outputs first, then inputs, then sizes).
 *
 * Return values: PC_OK, or a PC_* code (PC_ECUDA, PC_ENOMEM, PC_EINVAL) with the failed call
 * (its cudaError_t or cuBLAS status, file and line: pc_cuda_err.h) kept in the engine,
 * pc_cuda_engine_error; create says it in *cuerr. A launch's own errors are returned at once;
 * an error in a kernel that already runs shows up at the next call that waits
 * (pc_cuda_engine_sync, pc_cuda_softmax_xent_result). Sizes are checked (B >= 1 and so on):
 * PC_EINVAL when not. Memory and copies on the engine's stream: pc_gpu_cuda.h.
 *
 * Deterministic: the same inputs give bitwise the same outputs on every run (on the same
 * GPU model and toolkit): no atomics, every sum in a fixed order, cuBLAS with a workspace
 * of its own and its default math (FP32, no TF32). One thread at a time per engine. */
#ifndef PC_LAYERS_CUDA_H
#define PC_LAYERS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "pc_cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(hidden)

typedef struct pc_cuda_engine pc_cuda_engine_t;

/* An engine on `device`: a non-blocking stream of the device's highest priority, a cuBLAS handle on
 * it with its own 32 MiB workspace, and the pinned word the loss comes back through. *out owns them
 * (pc_cuda_engine_destroy). */
int pc_cuda_engine_create(int device, pc_cuda_engine_t **out, pc_cuda_err_t *cuerr);
/* Wait for the stream, then free everything the engine holds (NULL is accepted). Device
 * memory on the engine's device must be freed first. */
void pc_cuda_engine_destroy(pc_cuda_engine_t *e);
/* The engine's stream (a cudaStream_t). */
void *pc_cuda_engine_stream(const pc_cuda_engine_t *e);
/* The last failed call of a launcher on e (code 0: none yet). One thread at a time. */
const pc_cuda_err_t *pc_cuda_engine_error(const pc_cuda_engine_t *e);

/* Device and pinned host memory for the engine's buffers, and the copies on its stream,
 * are pc_gpu's (cuda/pc_gpu_cuda.h, through src/gpu/gpu_mem.h), on the engine's device. */
/* Wait for everything queued on the stream; returns the first error of its work. */
int pc_cuda_engine_sync(pc_cuda_engine_t *e);

/* out (B, OC) = inp (B, C) . weight (OC, C)^T + bias (OC) */
int pc_cuda_linear_forward(pc_cuda_engine_t *e, float *out, const float *inp, const float *weight,
                           const float *bias, int B, int C, int OC);
/* dinp (B, C) (NULL: not computed), dweight (OC, C), dbias (OC) from dout (B, OC). */
int pc_cuda_linear_backward(pc_cuda_engine_t *e, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int B, int C,
                            int OC);

/* The per-image sizes of a convolution's scratch: col holds CKK x (chunk x H x W) floats
 * (C*K*K rows, one column per output pixel of `chunk` images), tmp holds OC x (chunk x H x W)
 * floats (a GEMM's result before its transpose to NCHW). A convolution runs over its
 * batch `chunk` images at a time: one im2col and one GEMM per chunk. */
size_t pc_cuda_conv2d_col_floats(int C, int H, int W, int K);
size_t pc_cuda_conv2d_tmp_floats(int H, int W, int OC);

/* 2-D convolution, stride 1, "same" zero padding (K odd), NCHW, as pc_conv2d_forward:
 * out (B, OC, H, W) = weight (OC, C*K*K) * im2col(inp (B, C, H, W)) + bias (OC). col and tmp:
 * scratch for `chunk` images (sizes above). */
int pc_cuda_conv2d_forward(pc_cuda_engine_t *e, float *out, float *col, float *tmp,
                           const float *inp, const float *weight, const float *bias, int B, int C,
                           int H, int W, int OC, int K, int chunk);
/* dinp (B, C, H, W) (NULL: not computed), dweight (OC, C*K*K), dbias (OC) from dout
 * (B, OC, H, W). col (which also holds dcol) and tmp: scratch for `chunk` images. col2im
 * is a gather: each input element sums its K*K contributions in (ky, kx) order, as the CPU
 * adds them. */
int pc_cuda_conv2d_backward(pc_cuda_engine_t *e, float *dinp, float *dweight, float *dbias,
                            float *col, float *tmp, const float *dout, const float *inp,
                            const float *weight, int B, int C, int H, int W, int OC, int K,
                            int chunk);

/* 2x2 max pooling, stride 2: out (B, C, H/2, W/2), argmax (same shape): the input index of
 * each maximum within its (H, W) plane, ties to the first (as pc_maxpool_forward). */
int pc_cuda_maxpool_forward(pc_cuda_engine_t *e, float *out, int32_t *argmax, const float *inp,
                            int B, int C, int H, int W);
/* dinp (B, C, H, W) from dout (B, C, H/2, W/2): a gather (windows do not overlap). */
int pc_cuda_maxpool_backward(pc_cuda_engine_t *e, float *dinp, const float *dout,
                             const int32_t *argmax, int B, int C, int H, int W);

/* out (n) = max(0, inp); dinp = dout where out > 0 (in place allowed in both). */
int pc_cuda_relu_forward(pc_cuda_engine_t *e, float *out, const float *inp, size_t n);
int pc_cuda_relu_backward(pc_cuda_engine_t *e, float *dinp, const float *dout, const float *out,
                          size_t n);

/* Inverted dropout, the mask drawn as pc_dropout_forward draws it (draw i of Philox
 * (seed, stream) through cuRAND's device generator): bit for bit the CPU's mask and out. */
int pc_cuda_dropout_forward(pc_cuda_engine_t *e, float *out, uint8_t *mask, const float *inp,
                            size_t n, float p, uint64_t seed, uint64_t stream);
int pc_cuda_dropout_backward(pc_cuda_engine_t *e, float *dinp, const float *dout,
                             const uint8_t *mask, size_t n, float p);

/* Bytes of the per-row scratch pc_cuda_softmax_xent_forward needs for B rows. */
size_t pc_cuda_softmax_rows_bytes(int B);
/* Softmax cross-entropy: probs (B, V) from logits (B, V) and labels (B, device); the mean
 * loss and the count of argmaxes equal to their label are reduced on the device in a fixed
 * order into the engine's result, read by pc_cuda_softmax_xent_result. rows: scratch of
 * pc_cuda_softmax_rows_bytes(B). A label >= V makes the loss NaN (never read out of
 * bounds). */
int pc_cuda_softmax_xent_forward(pc_cuda_engine_t *e, float *probs, void *rows, const float *logits,
                                 const uint8_t *labels, int B, int V);
/* The loss and count of the last pc_cuda_softmax_xent_forward: one small copy back, waits
 * for the stream. loss or correct may be NULL. */
int pc_cuda_softmax_xent_result(pc_cuda_engine_t *e, float *loss, int *correct);
/* dlogits (B, V) = (probs - onehot(labels)) / B. */
int pc_cuda_softmax_xent_backward(pc_cuda_engine_t *e, float *dlogits, const float *probs,
                                  const uint8_t *labels, int B, int V);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* PC_LAYERS_CUDA_H */
