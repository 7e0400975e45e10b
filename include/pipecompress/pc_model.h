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
 * hooks. A model is used by one thread at a time.
 *
 * On a CUDA device (pc_model_create_on with a device number) every slab is in that
 * device's memory and the layers run there (cuda/pc_layers.cu), queued on the model's own
 * stream (pc_model_stream): pc_model_params, pc_model_tensor_param and pc_model_tensor_grad
 * then return DEVICE pointers, and the calls return once their work is queued, except
 * where they say they wait. Inputs, labels, files and the pc_model_params_get/set copies
 * stay on the host. The device's results are deterministic (the same inputs give the same
 * bits on every run) and close to the CPU's, not equal: cuBLAS sums in another order than
 * OpenBLAS (tests/unit/test_model_cuda.c states the tolerance). */
#ifndef PC_MODEL_H
#define PC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_flags.h"

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
#define PC_MODEL_CHOICES (PC_MODEL_TABLE(PC_FLAGS_CHOICE_TEXT) + 1)

typedef struct pc_model pc_model_t;

/* The device number of a model on the CPU. */
#define PC_MODEL_CPU (-1)

typedef struct pc_model_hooks {
    void *ud;
    int (*param_wait)(void *ud, int tensor);
    int (*grad_ready)(void *ud, int tensor);
    /* Optional: called around each layer's forward/backward (for timelines). */
    void (*layer_begin)(void *ud, const char *layer, bool backward);
    void (*layer_end)(void *ud, const char *layer, bool backward);
} pc_model_hooks_t;

/* A model for images of (channels, height, width) into `classes`, for batches of at most
 * max_batch, on the CPU. dropout: the cnn's drop probability. Returns PC_OK, PC_EINVAL (a
 * shape the model cannot take), PC_ENOMEM. Parameters start at zero: call pc_model_init.
 * *out is the caller's (pc_model_destroy). Thread-safe. */
int pc_model_create(pc_model_kind_t kind, int max_batch, int channels, int height, int width,
                    int classes, float dropout, pc_model_t **out);
/* pc_model_create on `device`: PC_MODEL_CPU, or a CUDA device number, which holds every
 * slab (parameters, gradients, activations, scratch) and runs the layers on a stream and a
 * cuBLAS handle of the model's own. Returns PC_OK, PC_EINVAL, PC_ENOMEM (host or device
 * memory), PC_ENODEV when the device is not usable ("no usable CUDA device: " and the CUDA
 * runtime's reason, or "built without CUDA", from pc_cuda_status) or PC_ECUDA, each with a
 * one-line message in err. The device's memory is zeroed before this returns. Thread-safe. */
int pc_model_create_on(pc_model_kind_t kind, int max_batch, int channels, int height, int width,
                       int classes, float dropout, int device, pc_model_t **out, char *err,
                       size_t errlen);
/* Free m, its parameters, gradients and activations, and on a device its stream and cuBLAS
 * handle after waiting for the stream (NULL is accepted). */
void pc_model_destroy(pc_model_t *m);

/* He-uniform weights for layers followed by ReLU, Xavier-uniform for the last, zero biases,
 * all from Philox keyed by seed: computed on the host, the same on every device, then
 * copied to a device model's memory (waits for it). Returns PC_OK, or on a device PC_ENOMEM
 * or PC_ECUDA (pc_model_error). */
int pc_model_init(pc_model_t *m, uint64_t seed);

/* Where m runs: PC_MODEL_CPU or its CUDA device number. Thread-safe. */
int pc_model_device(const pc_model_t *m);
/* The cudaStream_t a device model's work is queued on (NULL on the CPU), for the caller to
 * record events on (in grad_ready: that tensor's gradient is complete once the event has
 * fired) or to make it wait on events (in param_wait: the layer's kernels then read the
 * parameters after the event). Owned by m, valid until pc_model_destroy. Thread-safe. */
void *pc_model_stream(const pc_model_t *m);
/* The last device failure's message ("" when none): of the call on m that returned
 * PC_ECUDA or PC_ENOMEM. Owned by m, overwritten by its next failure. */
const char *pc_model_error(const pc_model_t *m);
/* Wait for every piece of work queued on a device model's stream (PC_OK at once on the
 * CPU). PC_OK, or PC_ECUDA with pc_model_error (an error of a kernel queued earlier). */
int pc_model_sync(pc_model_t *m);

/* Copy all nparams parameters out of m into host (the caller's nparams floats), or from
 * host into m; likewise the gradients out. On a device these wait for the stream (the
 * copy is complete on return; host may be any host memory). PC_OK, or PC_ECUDA with
 * pc_model_error (which even a const m records). One thread at a time per model. */
int pc_model_params_get(const pc_model_t *m, float *host);
int pc_model_params_set(pc_model_t *m, const float *host);
int pc_model_grads_get(const pc_model_t *m, float *host);

/* Host memory for a batch: on a device model page-locked (cudaHostAlloc), so that
 * pc_model_forward's copy to the device is a real asynchronous DMA; malloc on the CPU.
 * *out is the caller's, freed with pc_model_host_free on the same model before
 * pc_model_destroy (NULL is accepted). PC_OK, PC_ENOMEM (no message: m is not touched) or
 * PC_EINVAL. Thread-safe. */
int pc_model_host_alloc(const pc_model_t *m, size_t bytes, void **out);
void pc_model_host_free(const pc_model_t *m, void *p);

/* The kind's flag spelling ("mlp"), or "?" for a value outside the table. Static string;
 * thread-safe. */
const char *pc_model_kind_name(pc_model_kind_t kind);
/* Parameters of m (all tensors). Thread-safe. */
size_t pc_model_nparams(const pc_model_t *m);
/* The parameter slab, nparams floats, m's (device memory on a device model). */
float *pc_model_params(pc_model_t *m);
int pc_model_ntensors(const pc_model_t *m);
const char *pc_model_tensor_name(const pc_model_t *m, int t);
size_t pc_model_tensor_size(const pc_model_t *m, int t);
/* Tensor t's rows as a matrix: a weight's output features or channels (its first
 * dimension; the columns are the rest), 0 for a bias (pc_worker_set_rows). */
size_t pc_model_tensor_rows(const pc_model_t *m, int t);
/* Tensor t's parameters and gradient inside the slabs (device pointers on a device). */
float *pc_model_tensor_param(pc_model_t *m, int t);
float *pc_model_tensor_grad(pc_model_t *m, int t);

/* Forward a batch x (B, channels*height*width) with labels (B): *loss (mean), *correct.
 * train: dropout on, with masks from Philox (seed, noise). hooks may be NULL. Returns PC_OK,
 * PC_EINVAL (B outside 1..max_batch) or the first hook error.
 *
 * On a device: x and labels are HOST pointers, copied once per call to the device on the
 * model's stream (from page-locked memory when they come from pc_model_host_alloc, which
 * makes the copy asynchronous); every layer is queued on that stream, and the hooks run
 * between layers exactly as on the CPU, without this call waiting for the device. loss and
 * correct, when requested, make it wait for the stream at the end (one small copy back);
 * passing NULL for both avoids that wait, and then page-locked x and labels must stay
 * unchanged until the stream has passed the copies (pc_model_sync, or an event recorded on
 * pc_model_stream); pageable ones may be reused on return. PC_ECUDA or PC_ENOMEM with
 * pc_model_error on a CUDA failure (perhaps of work queued earlier). */
int pc_model_forward(pc_model_t *m, const float *x, const uint8_t *labels, int B, bool train,
                     uint64_t seed, uint64_t noise, const pc_model_hooks_t *hooks, float *loss,
                     int *correct);

/* Backward of the last forward (train mode), writing every parameter gradient and calling
 * grad_ready per tensor, last layer first. Returns PC_OK, PC_EINVAL (B outside
 * 1..max_batch) or the first hook error. On a device labels is a host pointer copied as
 * pc_model_forward's, and the call returns without waiting for the device: grad_ready(t)
 * means that tensor t's gradient is queued on pc_model_stream, complete (and t's
 * parameters free to be overwritten) once the stream has got there; PC_ECUDA with
 * pc_model_error on a CUDA failure. */
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
 * layers than max_layers) or PC_ENOMEM (PC_ECUDA on a device). On a device its hooks wait for
 * the stream before reading the clock, so that each layer's time is its kernels'. Not
 * thread-safe on m (one thread per model). */
int pc_model_profile(pc_model_t *m, const float *x, const uint8_t *labels, int B, int reps,
                     pc_cost_layer_t *layers, int max_layers, int *nlayers, int *tensor_layer);

/* Model files (doc/model-format.md): a 48-byte little-endian header (magic "PCMODEL1",
 * version, kind, input shape, classes, parameter count, CRC-32 of the parameters, CRC-32 of
 * the header) and the parameters as binary32. pc_model_save writes a temporary file,
 * fsyncs it and renames it over path (then fsyncs the directory): a crash leaves the old
 * file or the new one, never half of one. pc_model_load checks everything against m's
 * architecture and both CRCs before touching m's parameters. PC_EIO / PC_EFORMAT with a
 * message naming the file. A device model's parameters travel through host memory (same file).
 * pc_model_save may also fail with PC_ECUDA/PC_ENOMEM, pc_model_load with PC_ECUDA after all
 * its checks (err says why). */
int pc_model_save(const pc_model_t *m, const char *path, char *err, size_t errlen);
int pc_model_load(pc_model_t *m, const char *path, char *err, size_t errlen);

/* The architecture a model file holds (to build a model for it). */
int pc_model_file_info(const char *path, pc_model_kind_t *kind, int *channels, int *height,
                       int *width, int *classes, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_MODEL_H */
