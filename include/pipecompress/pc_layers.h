/* pc_layers: the training engine's layers, as forward/backward function pairs on plain
 * float arrays (after llm.c): outputs first, then inputs, then sizes; every pointer has its
 * shape in a comment. No allocation, no global state: callers own every buffer. These are
 * the CPU reference implementations; a CUDA backend provides the same signatures.
 *
 * Backward functions overwrite (never accumulate into) the parameter gradients they
 * produce, and write dinp when it is not NULL (NULL for a network's first layer). */
#ifndef PC_LAYERS_H
#define PC_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out (B, OC) = inp (B, C) . weight (OC, C)^T + bias (OC) */
void pc_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int B,
                       int C, int OC);
/* dinp (B, C), dweight (OC, C), dbias (OC) from dout (B, OC). */
void pc_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int B, int C, int OC);

/* 2-D convolution, stride 1, "same" zero padding (K odd), NCHW:
 * out (B, OC, H, W) = weight (OC, C*K*K) * im2col(inp (B, C, H, W)) + bias (OC).
 * col is scratch of C*K*K*H*W floats. */
void pc_conv2d_forward(float *out, float *col, const float *inp, const float *weight,
                       const float *bias, int B, int C, int H, int W, int OC, int K);
/* dinp (B, C, H, W), dweight (OC, C*K*K), dbias (OC) from dout (B, OC, H, W); col and dcol
 * are scratch of C*K*K*H*W floats each. */
void pc_conv2d_backward(float *dinp, float *dweight, float *dbias, float *col, float *dcol,
                        const float *dout, const float *inp, const float *weight, int B, int C,
                        int H, int W, int OC, int K);

/* 2x2 max pooling, stride 2 (H, W even): out (B, C, H/2, W/2), argmax (same shape) holds
 * the input index of each maximum (ties: the first). */
void pc_maxpool_forward(float *out, int32_t *argmax, const float *inp, int B, int C, int H, int W);
/* dinp (B, C, H, W) from dout (B, C, H/2, W/2). */
void pc_maxpool_backward(float *dinp, const float *dout, const int32_t *argmax, int B, int C, int H,
                         int W);

/* out (n) = max(0, inp); dinp = dout where out > 0 (in place allowed). */
void pc_relu_forward(float *out, const float *inp, size_t n);
void pc_relu_backward(float *dinp, const float *dout, const float *out, size_t n);

/* Inverted dropout with drop probability p: mask (n) from Philox (seed, stream), out =
 * inp * mask / (1 - p). p = 0 copies. */
void pc_dropout_forward(float *out, uint8_t *mask, const float *inp, size_t n, float p,
                        uint64_t seed, uint64_t stream);
void pc_dropout_backward(float *dinp, const float *dout, const uint8_t *mask, size_t n, float p);

/* Softmax cross-entropy: probs (B, V) from logits (B, V); returns the mean loss over the
 * batch; *correct (may be NULL) gets how many argmaxes equal the labels. */
float pc_softmax_xent_forward(float *probs, int *correct, const float *logits,
                              const uint8_t *labels, int B, int V);
/* dlogits (B, V) = (probs - onehot(labels)) / B. */
void pc_softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B,
                              int V);

#ifdef __cplusplus
}
#endif
#endif /* PC_LAYERS_H */
