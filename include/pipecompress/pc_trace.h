/* pc_trace: a GPU's per-layer compute times, read from a JSON trace file (doc/replay.md).
 *
 * A trace describes one (model, GPU, batch, precision): the layers in forward order, each
 * with the shapes of its parameter tensors and its forward and backward times, and
 * optionally the optimizer step's time. The replay driver (pc_replay.h) holds those times
 * instead of computing, so that the network, the compression and the servers run for real
 * in the regime of a GPU. The format:
 *
 *   {"model": "resnet50", "device": "A100-SXM4-80GB", "batch": 256, "precision": "amp",
 *    "source": "where the times come from, and how they were split across layers",
 *    "layers": [{"name": "conv1", "params": [[64, 3, 7, 7]],
 *                "forward_ms": 0.9, "backward_ms": 1.8}, ...],
 *    "optimizer_ms": 2.5}                                      (optional)
 *
 * Everything is checked at load (the rules are doc/replay.md's "Validation rules"): a
 * malformed file, an unknown or repeated key, a missing field, a bad shape, a negative or
 * non-finite time, a repeated layer name, no layer with parameters: each fails with
 * PC_EFORMAT and one line naming the field and the layer, e.g.
 *     layers[3] (conv1).backward_ms: -1 is negative
 * The JSON is parsed by jansson (Debian libjansson-dev); no jansson type appears here.
 *
 * A loaded trace is immutable: every accessor may be called from any thread at once. */
#ifndef PC_TRACE_H
#define PC_TRACE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_trace pc_trace_t;

/* The largest trace file (and buffer) accepted: 64 MiB. A trace of the largest models is
 * a few hundred KiB (BERT-base: about 200 tensors); the bound keeps a wrong path (a data
 * set, a checkpoint) from being read whole into memory before it is refused. */
#define PC_TRACE_MAX_BYTES (64u << 20)
/* Dimensions of a parameter tensor: 1..8 (torch's tensors of real models have at most 5). */
#define PC_TRACE_MAX_DIMS 8
/* Elements of one parameter tensor: at most 2^31 - 1 (the runtime's chunks and the codecs
 * count in 32 bits; VGG-16's largest tensor, 25088 x 4096, has 102.8 M). */
#define PC_TRACE_MAX_NUMEL 2147483647u
/* Layers of a trace: at most 100000 (BERT-large has about 400), and parameter tensors of
 * one layer: at most 64 (a layer is a module: weight, bias, a norm's two, ...). */
#define PC_TRACE_MAX_LAYERS 100000
#define PC_TRACE_MAX_PARAMS 64
/* A name or descriptive string: at most 16 KiB, no control characters (each is printed on
 * one line of pc-train's configuration; a source that cites its figures and states its
 * rule takes a few KiB). */
#define PC_TRACE_MAX_STRING 16384

/* Read and check the trace file at path. On PC_OK *out is the caller's (pc_trace_destroy).
 * Errors, with one line in err (when err is not NULL and errlen > 0): PC_EIO (cannot open
 * or read: the line names the path and the system's reason), PC_EFORMAT (too big, not
 * JSON, or against a rule: the line names the field and the layer), PC_ENOMEM. On error
 * *out is untouched and nothing is kept. Thread-safe (no shared state). */
int pc_trace_load(const char *path, pc_trace_t **out, char *err, size_t errlen);

/* pc_trace_load on len bytes at buf (not NUL-terminated; the caller keeps buf, which is
 * only read during the call). Errors as pc_trace_load's, without PC_EIO. Thread-safe. */
int pc_trace_parse(const char *buf, size_t len, pc_trace_t **out, char *err, size_t errlen);

/* Free a trace and every string and shape it owns (NULL: no-op). Pointers returned by the
 * accessors die with it. */
void pc_trace_destroy(pc_trace_t *t);

/* The descriptive fields, as in the file (owned by the trace). */
const char *pc_trace_model(const pc_trace_t *t);
const char *pc_trace_device(const pc_trace_t *t);
const char *pc_trace_precision(const pc_trace_t *t);
const char *pc_trace_source(const pc_trace_t *t);
/* Samples per iteration per GPU (>= 1): what the times were measured or published at. */
int pc_trace_batch(const pc_trace_t *t);
/* The optimizer step's milliseconds per iteration, or -1 when the trace has none. */
double pc_trace_optimizer_ms(const pc_trace_t *t);

/* Layers, in forward order: 0 .. pc_trace_nlayers(t) - 1. An index out of range gives
 * NULL, -1 or 0 as the accessor's type allows. */
int pc_trace_nlayers(const pc_trace_t *t);
const char *pc_trace_layer_name(const pc_trace_t *t, int layer);
double pc_trace_forward_ms(const pc_trace_t *t, int layer);
double pc_trace_backward_ms(const pc_trace_t *t, int layer);

/* Parameter tensors of a layer (0 for a layer that only computes), and tensor j's
 * elements (product of its shape, 1..PC_TRACE_MAX_NUMEL). */
int pc_trace_nparams(const pc_trace_t *t, int layer);
size_t pc_trace_param_numel(const pc_trace_t *t, int layer, int j);
/* Tensor j's rows as a matrix: its first dimension when it has two or more (torch's weight
 * (out, in, kh, kw) has rows out: PowerSGD's matrix, pc_worker_set_rows), 0 for a vector. */
size_t pc_trace_param_rows(const pc_trace_t *t, int layer, int j);
/* Tensor j's shape: *dims points at *ndim sizes (owned by the trace). PC_OK, or PC_EINVAL
 * for an index out of range (nothing written). */
int pc_trace_param_shape(const pc_trace_t *t, int layer, int j, const size_t **dims, int *ndim);

/* Elements of every parameter tensor together, and the sum of every layer's forward and
 * backward milliseconds (the optimizer not included): one iteration's compute. */
size_t pc_trace_total_params(const pc_trace_t *t);
double pc_trace_compute_ms(const pc_trace_t *t);

#ifdef __cplusplus
}
#endif
#endif /* PC_TRACE_H */
