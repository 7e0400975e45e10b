/* pc_plan: how a model's tensors are cut into chunks and which server owns each chunk.
 *
 * Workers register tensors in forward order. A tensor larger than the chunk size is cut
 * into near-equal chunks of at most chunk_elems elements. A small tensor (at most
 * PC_PLAN_GROUP_MAX elements: biases, norms) whose parameter and gradient buffers continue
 * the previous tensor's (one slab per buffer class, as the training engine allocates them)
 * joins that tensor's chunk, so a network of many small tensors does not pay a message per
 * tensor; bigger tensors keep chunks of their own, so a layer's gradient can be compressed
 * as soon as that layer's backward pass is done (grouping two big layers would hold the
 * later one back until the earlier is ready). Chunks are then
 * assigned to servers so that bytes are balanced: largest chunk first to the least loaded
 * server (ties: lowest server), a deterministic greedy plan every rank computes alike.
 * A whole matrix (powersgd) is one chunk on one server: the greedy plan places it first
 * when it is the largest, and the other chunks fill the other servers around it.
 * Pure functions: no MPI. */
#ifndef PC_PLAN_H
#define PC_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest tensor that is grouped with its predecessor: 16 Ki elements (64 KiB), where a
 * message's fixed costs (~ microseconds) start to matter against its transfer time. */
#define PC_PLAN_GROUP_MAX 16384

typedef struct pc_plan_tensor {
    size_t n;           /* elements */
    const float *param; /* for adjacency only; may be NULL (then never grouped) */
    const float *grad;
    /* A matrix that travels whole (powersgd's factors need all of its rows): one chunk of
     * its own whatever its size, never cut, never grouped with another tensor; rows is its
     * first dimension (the chunk's rows). 0: an ordinary tensor. */
    size_t whole_rows;
} pc_plan_tensor_t;

typedef struct pc_plan_chunk {
    uint32_t id;      /* index in the plan, forward order */
    int first_tensor; /* tensors [first_tensor, last_tensor] */
    int last_tensor;
    size_t offset; /* element offset of the chunk in first_tensor */
    size_t n;      /* elements */
    int server;    /* owning server, 0..nservers-1 */
    size_t rows;   /* a whole matrix's rows (pc_plan_tensor_t.whole_rows), else 0 */
} pc_plan_chunk_t;

typedef struct pc_plan {
    int ntensors;
    int nchunks;
    int nservers;
    pc_plan_chunk_t *chunks; /* nchunks, in forward order */
    int *tensor_first_chunk; /* per tensor: its chunks are [first, last] */
    int *tensor_last_chunk;
    size_t *server_elems; /* per server: elements owned */
} pc_plan_t;

/* Plan ntensors tensors into chunks of at most chunk_elems (>= 1) over nservers (>= 1).
 * On success *out owns the plan (pc_plan_destroy). Returns PC_OK, PC_EINVAL (a tensor of
 * 0 elements, bad sizes) or PC_ENOMEM. Thread-safe. */
int pc_plan_create(const pc_plan_tensor_t *tensors, int ntensors, size_t chunk_elems, int nservers,
                   pc_plan_t **out);
/* Free plan (NULL is accepted). */
void pc_plan_destroy(pc_plan_t *plan);

/* Deal the plan's chunks to nthreads compressor threads (1..PC_PLAN_DEAL_MAX), the rule a
 * worker's pool uses (--compressors): in chunk order, balancing work, chunk i, whose work
 * is [S_i, S_i + w_i) of the plan's total W, goes to thread
 * min(nthreads - 1, floor(nthreads (2 S_i + w_i) / 2W)): the thread whose share of W holds
 * the chunk's midpoint. work[i] is chunk i's work (the caller's nchunks entries; a worker
 * passes pc_codec_work's, 2 n for a chunk under --compress-min-bytes), or NULL for its
 * elements, n_i. The threads' chunks are contiguous ranges in order (a
 * thread's may be empty: more threads than chunks, or a chunk bigger than a share).
 * lane[i] (nchunks entries, the caller's) gets chunk i's thread. PC_OK, or PC_EINVAL
 * (nthreads out of range, NULL plan or lane, chunks whose work sums to 0 or over 2^50).
 * Deterministic; thread-safe. */
#define PC_PLAN_DEAL_MAX 1024
int pc_plan_deal(const pc_plan_t *plan, int nthreads, const uint64_t *work, int *lane);

/* Print the plan, one line per chunk and a per-server summary, each line prefixed. */
void pc_plan_print(const pc_plan_t *plan, const char *const *names, FILE *out, const char *prefix);

#ifdef __cplusplus
}
#endif
#endif /* PC_PLAN_H */
