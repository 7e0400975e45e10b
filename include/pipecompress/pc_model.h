/* pc_model: the networks pc-train trains, built from pc_layers, with one slab per buffer
 * class (parameters, gradients, activations, activation gradients, scratch) carved by an
 * offset table, as llm.c does.
 *
 *   mlp   784-256-128-10 with ReLU                                      (~235 k parameters)
 *   cnn   conv 5x5x32, pool, conv 5x5x64, pool, fc 1024, dropout, fc 10 (~3.3 M)
 *   wide  784-4096-4096-4096-10 with ReLU                               (~36.9 M)
 *
 * Forward and backward call hooks around each parameterised layer: param_wait(tensor)
 * before the layer reads its parameters, grad_ready(tensor) as soon as the layer's
 * parameter gradients are complete and its parameters no longer needed in this iteration
 * (after computing the input gradient). The runtime plugs in there; evaluation passes no
 * hooks. A model is used by one thread at a time. */
#ifndef PC_MODEL_H
#define PC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_opt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in networks: X(NAME, "flag spelling"), in enum order (PC_MODEL_MLP = 0, ...). */
#define PC_MODEL_TABLE(X) X(MLP, "mlp") X(CNN, "cnn") X(WIDE, "wide")

typedef enum pc_model_kind {
#define PC_MODEL_ENUM(name, text) PC_MODEL_##name,
    PC_MODEL_TABLE(PC_MODEL_ENUM)
#undef PC_MODEL_ENUM
} pc_model_kind_t;

/* "mlp|cnn|wide", for pc-train's --model flag (from the table). */
#define PC_MODEL_CHOICES (PC_MODEL_TABLE(PC_OPT_CHOICE_TEXT) + 1)

typedef struct pc_model pc_model_t;

typedef struct pc_model_hooks {
    void *ud;
    int (*param_wait)(void *ud, int tensor);
    int (*grad_ready)(void *ud, int tensor);
    /* Optional: called around each layer's forward/backward (for timelines). */
    void (*layer_begin)(void *ud, const char *layer, bool backward);
    void (*layer_end)(void *ud, const char *layer, bool backward);
} pc_model_hooks_t;

/* A model for images of (channels, height, width) into `classes`, for batches of at most
 * max_batch. dropout: the cnn's drop probability. Returns PC_OK, PC_EINVAL (a shape the
 * model cannot take), PC_ENOMEM. Parameters start at zero: call pc_model_init. */
int pc_model_create(pc_model_kind_t kind, int max_batch, int channels, int height, int width,
                    int classes, float dropout, pc_model_t **out);
/* Free m, its parameters, gradients and activations (NULL is accepted). */
void pc_model_destroy(pc_model_t *m);

/* He-uniform weights for layers followed by ReLU, Xavier-uniform for the last, zero biases,
 * all from Philox keyed by seed. */
void pc_model_init(pc_model_t *m, uint64_t seed);

/* The kind's flag spelling ("mlp"), or "?" for a value outside the table. Static string;
 * thread-safe. */
const char *pc_model_kind_name(pc_model_kind_t kind);
/* Parameters of m (all tensors). Thread-safe. */
size_t pc_model_nparams(const pc_model_t *m);
float *pc_model_params(pc_model_t *m); /* the parameter slab, nparams floats */
int pc_model_ntensors(const pc_model_t *m);
const char *pc_model_tensor_name(const pc_model_t *m, int t);
size_t pc_model_tensor_size(const pc_model_t *m, int t);
float *pc_model_tensor_param(pc_model_t *m, int t);
float *pc_model_tensor_grad(pc_model_t *m, int t);

/* Forward a batch x (B, channels*height*width) with labels (B): *loss (mean), *correct.
 * train: dropout on, with masks from Philox (seed, noise). hooks may be NULL. Returns PC_OK
 * or the first hook error. */
int pc_model_forward(pc_model_t *m, const float *x, const uint8_t *labels, int B, bool train,
                     uint64_t seed, uint64_t noise, const pc_model_hooks_t *hooks, float *loss,
                     int *correct);

/* Backward of the last forward (train mode), writing every parameter gradient and calling
 * grad_ready per tensor, last layer first. */
int pc_model_backward(pc_model_t *m, const uint8_t *labels, int B, const pc_model_hooks_t *hooks);

/* Time one forward and backward pass of the batch (x, labels, B) reps times, after an
 * untimed one, with hooks of its own (dropout on, Philox seed 1): per parameterised layer l
 * (forward order; with the unparameterised layers after it) the median forward time from
 * its param_wait to layer l+1's (the last layer: to the end of the forward, loss
 * included) and backward time from layer l+1's grad_ready (the last layer: the start of
 * the backward) to its own (the first layer: to the end of the backward), as pc_cost
 * wants them. layers gets *nlayers entries (room for max_layers), tensor_layer one per
 * tensor: its layer. The gradients are overwritten (a real backward: the caller may then
 * time codecs on them). Returns PC_OK, PC_EINVAL (reps < 1, B outside 1..max_batch, more
 * layers than max_layers) or PC_ENOMEM. Not thread-safe on m (one thread per model). */
int pc_model_profile(pc_model_t *m, const float *x, const uint8_t *labels, int B, int reps,
                     pc_cost_layer_t *layers, int max_layers, int *nlayers, int *tensor_layer);

/* Model files (doc/model-format.md): a 48-byte little-endian header (magic "PCMODEL1",
 * version, kind, input shape, classes, parameter count, CRC-32 of the parameters, CRC-32 of
 * the header) and the parameters as binary32. pc_model_save writes a temporary file,
 * fsyncs it and renames it over path (then fsyncs the directory): a crash leaves the old
 * file or the new one, never half of one. pc_model_load checks everything against m's
 * architecture and both CRCs before touching m's parameters. PC_EIO / PC_EFORMAT with a
 * message naming the file. */
int pc_model_save(const pc_model_t *m, const char *path, char *err, size_t errlen);
int pc_model_load(pc_model_t *m, const char *path, char *err, size_t errlen);

/* The architecture a model file holds (to build a model for it). */
int pc_model_file_info(const char *path, pc_model_kind_t *kind, int *channels, int *height,
                       int *width, int *classes, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_MODEL_H */
