/* Launchers of the codec kernels (cuda/codec_*.cu, defined in codec_api.cu), callable from C
 * (src/gpu/pc_devcodec.c). Private to the library. Every call makes its device current on the
 * calling thread, runs on the given stream (a cudaStream_t) and returns PC_OK or a PC_* code;
 * on a CUDA failure *cuerr says which call failed (pc_cuda_err.h). Memory and copies are
 * pc_gpu_cuda.h's. */
#ifndef PC_CODEC_CUDA_H
#define PC_CODEC_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_cuda_err.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(hidden)

/* A codec's device scratch, grown on demand and kept; one thread at a time. */
typedef struct pc_cuda_codec pc_cuda_codec_t;

int pc_cuda_codec_create(int device, pc_cuda_codec_t **out, pc_cuda_err_t *cuerr);
void pc_cuda_codec_destroy(pc_cuda_codec_t *s);

/* One compress call: the inputs, then what the kernels produced. */
typedef struct pc_cuda_job {
    const pc_codec_t *codec; /* the spec and the schedule helpers (codec_internal.h) */
    float *residual;         /* n, device; NULL without error feedback */
    float *momentum;         /* n, device; NULL without the momentum correction */
    const float *grad;       /* n, device; NULL: folded already (pc_cuda_codec_fold) */
    size_t n;
    uint32_t chunk;
    uint64_t iteration;
    uint64_t steps;   /* compress calls made with this state before */
    void *stream;     /* cudaStream_t */
    uint8_t *payload; /* host, where the payload goes */
    size_t cap;       /* its size (the codec's max payload) */
    uint32_t entries; /* out: header fields */
    uint32_t bytes;   /* out: payload bytes */
    float scale;      /* out */
    int dgc_path;     /* out: 0 sampled, 1 adapted, 2 exact top-k, -1 none (dgc only) */
    bool bitmap;      /* out: the indices went as a bitmap (PC_WIRE_F_BITMAP) */
} pc_cuda_job_t;

/* Compress job->grad into job->payload with the state's arrays. PC_OK, PC_ERANGE (non-finite
 * values; the residual holds them), PC_ENOMEM, PC_ECUDA. */
int pc_cuda_codec_compress(pc_cuda_codec_t *s, int device, pc_cuda_job_t *job,
                           pc_cuda_err_t *cuerr);

/* The fold alone (error feedback required): residual += grad, or the momentum correction
 * when job->momentum; PC_ERANGE when the result is not finite. */
int pc_cuda_codec_fold(pc_cuda_codec_t *s, int device, pc_cuda_job_t *job, pc_cuda_err_t *cuerr);

/* Add scale * the values of a message that pc_codec__check accepted into dense (device):
 * payload (host, h->payload bytes); idx (host, h->entries ascending indices) for a
 * sparsifier, else NULL. */
int pc_cuda_decode_add(int device, const pc_codec_t *c, const pc_wire_header_t *h,
                       const uint8_t *payload, const uint32_t *idx, float scale, float *dense,
                       void *stream, pc_cuda_err_t *cuerr);

/* Draws offset .. offset + n - 1 of cuRAND's device Philox stream curand_init(seed,
 * subsequence, offset) into out (host): the device side of pc_philox's layout check. */
int pc_cuda_philox_draws(int device, uint64_t seed, uint64_t subsequence, uint64_t offset,
                         uint32_t *out, size_t n, pc_cuda_err_t *cuerr);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* PC_CODEC_CUDA_H */
