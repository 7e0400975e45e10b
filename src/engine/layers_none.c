/* layers_none: the engine's CUDA launchers (cuda/pc_layers_cuda.h) in a build without
 * CUDA, as src/gpu/cuda_none.c is for the rest of cuda/: each answers PC_ENODEV (create
 * with NO_CUDA as the CUDA error, pc_cuda_err.h, whose text is "built without CUDA"), sizes
 * are 0 and handles NULL. No device model can exist without CUDA (pc_model_create_on finds no
 * device), so none of these is reached past that check; they let pc_model.c compile the same in
 * both builds. Thread-safe: nothing here has state. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "../../cuda/pc_layers_cuda.h"
#include "pipecompress/pc_error.h"

/* The CUDA error this build reports: cudaErrorNoDevice's number ("no CUDA-capable device"). */
#define NO_CUDA 100

int pc_cuda_engine_create(int device, pc_cuda_engine_t **out, pc_cuda_err_t *cuerr)
{
    (void)device;
    *out = NULL;
    if (cuerr) {
        cuerr->code = NO_CUDA;
        cuerr->file = __FILE__;
        cuerr->line = __LINE__;
    }
    return PC_ENODEV;
}

void pc_cuda_engine_destroy(pc_cuda_engine_t *e)
{
    (void)e;
}

void *pc_cuda_engine_stream(const pc_cuda_engine_t *e)
{
    (void)e;
    return NULL;
}

const pc_cuda_err_t *pc_cuda_engine_error(const pc_cuda_engine_t *e)
{
    (void)e;
    return NULL;
}

int pc_cuda_engine_sync(pc_cuda_engine_t *e)
{
    (void)e;
    return PC_ENODEV;
}

int pc_cuda_linear_forward(pc_cuda_engine_t *e, float *out, const float *inp, const float *weight,
                           const float *bias, int B, int C, int OC)
{
    (void)e, (void)out, (void)inp, (void)weight, (void)bias, (void)B, (void)C, (void)OC;
    return PC_ENODEV;
}

int pc_cuda_linear_backward(pc_cuda_engine_t *e, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int B, int C,
                            int OC)
{
    (void)e, (void)dinp, (void)dweight, (void)dbias, (void)dout, (void)inp, (void)weight;
    (void)B, (void)C, (void)OC;
    return PC_ENODEV;
}

size_t pc_cuda_conv2d_col_floats(int C, int H, int W, int K)
{
    (void)C, (void)H, (void)W, (void)K;
    return 0;
}

size_t pc_cuda_conv2d_tmp_floats(int H, int W, int OC)
{
    (void)H, (void)W, (void)OC;
    return 0;
}

int pc_cuda_conv2d_forward(pc_cuda_engine_t *e, float *out, float *col, float *tmp,
                           const float *inp, const float *weight, const float *bias, int B, int C,
                           int H, int W, int OC, int K, int chunk)
{
    (void)e, (void)out, (void)col, (void)tmp, (void)inp, (void)weight, (void)bias, (void)B;
    (void)C, (void)H, (void)W, (void)OC, (void)K, (void)chunk;
    return PC_ENODEV;
}

int pc_cuda_conv2d_backward(pc_cuda_engine_t *e, float *dinp, float *dweight, float *dbias,
                            float *col, float *tmp, const float *dout, const float *inp,
                            const float *weight, int B, int C, int H, int W, int OC, int K,
                            int chunk)
{
    (void)e, (void)dinp, (void)dweight, (void)dbias, (void)col, (void)tmp, (void)dout;
    (void)inp, (void)weight, (void)B, (void)C, (void)H, (void)W, (void)OC, (void)K, (void)chunk;
    return PC_ENODEV;
}

int pc_cuda_maxpool_forward(pc_cuda_engine_t *e, float *out, int32_t *argmax, const float *inp,
                            int B, int C, int H, int W)
{
    (void)e, (void)out, (void)argmax, (void)inp, (void)B, (void)C, (void)H, (void)W;
    return PC_ENODEV;
}

int pc_cuda_maxpool_backward(pc_cuda_engine_t *e, float *dinp, const float *dout,
                             const int32_t *argmax, int B, int C, int H, int W)
{
    (void)e, (void)dinp, (void)dout, (void)argmax, (void)B, (void)C, (void)H, (void)W;
    return PC_ENODEV;
}

int pc_cuda_relu_forward(pc_cuda_engine_t *e, float *out, const float *inp, size_t n)
{
    (void)e, (void)out, (void)inp, (void)n;
    return PC_ENODEV;
}

int pc_cuda_relu_backward(pc_cuda_engine_t *e, float *dinp, const float *dout, const float *out,
                          size_t n)
{
    (void)e, (void)dinp, (void)dout, (void)out, (void)n;
    return PC_ENODEV;
}

int pc_cuda_dropout_forward(pc_cuda_engine_t *e, float *out, uint8_t *mask, const float *inp,
                            size_t n, float p, uint64_t seed, uint64_t stream)
{
    (void)e, (void)out, (void)mask, (void)inp, (void)n, (void)p, (void)seed, (void)stream;
    return PC_ENODEV;
}

int pc_cuda_dropout_backward(pc_cuda_engine_t *e, float *dinp, const float *dout,
                             const uint8_t *mask, size_t n, float p)
{
    (void)e, (void)dinp, (void)dout, (void)mask, (void)n, (void)p;
    return PC_ENODEV;
}

size_t pc_cuda_softmax_rows_bytes(int B)
{
    (void)B;
    return 0;
}

int pc_cuda_softmax_xent_forward(pc_cuda_engine_t *e, float *probs, void *rows, const float *logits,
                                 const uint8_t *labels, int B, int V)
{
    (void)e, (void)probs, (void)rows, (void)logits, (void)labels, (void)B, (void)V;
    return PC_ENODEV;
}

int pc_cuda_softmax_xent_result(pc_cuda_engine_t *e, float *loss, int *correct)
{
    (void)e, (void)loss, (void)correct;
    return PC_ENODEV;
}

int pc_cuda_softmax_xent_backward(pc_cuda_engine_t *e, float *dlogits, const float *probs,
                                  const uint8_t *labels, int B, int V)
{
    (void)e, (void)dlogits, (void)probs, (void)labels, (void)B, (void)V;
    return PC_ENODEV;
}
