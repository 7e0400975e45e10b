/* model_impl.h: the model object, shared by the files of the engine's pc_model (private
 * to the library): pc_model.c (layer lists, slabs, the forward and backward drivers),
 * model_profile.c (per-layer times for pc_cost) and model_file.c (the model file format,
 * doc/model-format.md). Thread-safety as pc_model.h says: one thread per model. */
#ifndef PC_MODEL_IMPL_H
#define PC_MODEL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_model.h"

#include "../../cuda/pc_layers_cuda.h" /* pc_cuda_engine_t */

#pragma GCC visibility push(hidden)

enum ltype { L_LINEAR, L_CONV, L_POOL, L_RELU, L_DROPOUT };

typedef struct layer {
    enum ltype type;
    char name[16];
    int c, h, w;    /* input shape (linear: c = features, h = w = 1) */
    int oc, oh, ow; /* output shape */
    int k;          /* conv kernel */
    float p;        /* dropout */
    int wt, bt;     /* tensor ids of weight and bias, -1 if none */
    size_t out_off; /* offset of this layer's output in the activation slabs */
    size_t aux_off; /* argmax (pool) or mask (dropout) offset in their slabs */
} layer_t;

#define MAX_LAYERS  16
#define MAX_TENSORS 16

/* A device convolution's im2col buffer holds at most this many bytes (then the batch goes
 * in chunks of images): 128 MiB is about 200 images of the cnn's conv2 (627 KB each), so a
 * training batch is one chunk, one GEMM with every pixel of it, while --batch 4096 does not
 * ask for gigabytes of scratch. */
#define COL_MAX_BYTES ((size_t)128 << 20)

/* A device model's allocations, in pc_model_t's slab[]. */
enum {
    S_PARAMS,
    S_GRADS,
    S_ACTS,
    S_DACTS,
    S_PROBS,
    S_ARGMAX,
    S_MASK,
    S_COL,
    S_CTMP,
    S_X,
    S_LABELS,
    S_ROWS,
    NSLABS
};

struct pc_model {
    pc_model_kind_t kind;
    int in_c, in_h, in_w;
    int nlayers, ntensors, max_batch, classes;
    layer_t layers[MAX_LAYERS];
    char tname[MAX_TENSORS][24];
    size_t toff[MAX_TENSORS], tsize[MAX_TENSORS];
    size_t trows[MAX_TENSORS]; /* a weight's first dimension, 0 for a bias */
    size_t nparams, nacts;
    float *params, *grads;
    float *acts, *dacts; /* per sample sizes * max_batch */
    float *probs;
    int32_t *argmax;
    uint8_t *mask;
    float *col, *dcol;
    size_t col_size, argmax_size, mask_size;
    const float *last_x;
    int device;            /* PC_MODEL_CPU, or the CUDA device holding the slabs above */
    char err[256];         /* the last device failure's message (pc_model_error) */
    void *slab[NSLABS];    /* every device allocation (the pointers above and below) */
    pc_cuda_engine_t *eng; /* stream, cuBLAS handle */
    float *x_dev;          /* (max_batch, in_c*in_h*in_w): the batch's copy */
    uint8_t *labels_dev;   /* (max_batch) */
    float *ctmp;           /* conv_chunk images of a convolution's GEMM result */
    void *rows;            /* the softmax's per-row scratch */
    int conv_chunk;        /* images per im2col */
};

/* Whether m's slabs are on a CUDA device (not PC_MODEL_CPU). */
bool pc_model__on_device(const pc_model_t *m);

#pragma GCC visibility pop

#endif /* PC_MODEL_IMPL_H */
