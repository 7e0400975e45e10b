/* pc_replay: a GPU trainer replayed on a worker's backprop thread (doc/replay.md).
 *
 * The GPU's compute is not run but held: each layer's forward and backward time from a
 * trace (pc_trace.h), times the dilation K, is slept to an absolute deadline
 * (clock_nanosleep with TIMER_ABSTIME; never a spin, since a GPU computing leaves the
 * host's cores to the compressor and the servers). Everything else is the real runtime: the
 * hand-over of each gradient, the codecs, the compressor thread, the servers, MPI, the
 * metrics and the timeline. One iteration (pc_replay_iteration):
 *
 *   forward, layers in order:   param_wait(the layer's tensors); hold forward_ms x K
 *   backward, in reverse:       hold backward_ms x K; then for each tensor of the layer:
 *                               its device-to-host copy on the copy engine (one engine,
 *                               FIFO: start = max(the layer's end, the engine free), end =
 *                               start + bytes / pcie_gbps x K), and
 *                               pc_worker_grad_ready_view(tensor, view, end)
 *   pc_worker_iteration_end
 *
 * A hold's deadline is max(the previous deadline, now less the previous wake-up's
 * lateness) + its time: on schedule while nothing blocks the backprop thread (a late
 * wake-up is absorbed by the next hold, not added up), and slipping only when the thread
 * itself is held up (a param_wait, back-pressure, inline
 * compression, which a real trainer serialises with its GPU work the same way). The copy
 * is never time on the backprop thread: the runtime does not read a gradient before its
 * copy's end (the compressor thread sleeps until then; inline, the backprop thread does).
 *
 * Gradients are views of one pool per worker, filled once at create: Laplace-distributed
 * values (heavy-tailed, as real gradients are) times a per-tensor scale, drawn with Philox
 * from (seed, rank); tensor t's view in iteration i starts at t's place in the pool plus a
 * shift drawn from (seed, rank, i): it changes every iteration, differs between workers,
 * is the same in every run, and costs no copy. One shift per iteration keeps the views of
 * neighbouring tensors end to end, as a copy engine's host buffer would be, so that the
 * runtime reads a chunk of several small tensors in place.
 *
 * Threads: one replay is driven from its worker's backprop thread only. */
#ifndef PC_REPLAY_H
#define PC_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_runtime.h"
#include "pipecompress/pc_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_replay pc_replay_t;

/* The host copy's rate by default, in GB/s (1e9 bytes/s): PCIe 4.0 x16 as pinned
 * cudaMemcpy achieves it from device to host (about 24-26 GB/s of the link's 31.5; a
 * pageable copy reaches about half). */
#define PC_REPLAY_PCIE_GBPS 24.0
/* The optimizer step's rule when a trace has no optimizer_ms (--mode allreduce): one fused
 * SGD-with-momentum pass over fp32 state, 20 bytes an element (the parameter and the
 * momentum read and written, the gradient read), at an A100's HBM bandwidth (the 40 GB
 * card's 1555 GB/s, as 1.5e12 bytes/s). */
#define PC_REPLAY_STEP_BYTES 20.0
#define PC_REPLAY_HBM_BPS    1.5e12

typedef struct pc_replay_opts {
    double dilate;    /* K >= 1 (--dilate): every held time and copy is K times the trace's */
    double pcie_gbps; /* the host copy's rate, GB/s; 0: PC_REPLAY_PCIE_GBPS */
    uint64_t seed;    /* the gradient pool's and the shifts' draws (--seed) */
    int rank;         /* this worker's rank: each worker's gradients differ */
    bool device_step; /* --mode allreduce: the optimizer step is held as device time
                         (pc_worker_set_device_step), not run on the CPU */
} pc_replay_opts_t;

/* Register one tensor per parameter tensor of the trace on w ("LAYER.j": layer conv1's
 * weight is conv1.0, its bias conv1.1), in forward order, with its matrix rows
 * (pc_worker_set_rows); allocate the parameters (zeros) and the gradient pool (filled
 * here, once); with device_step, pc_worker_set_device_step (the trace's optimizer_ms, or
 * the rule above, times K); set the calling thread's timer slack to 1 ns (prctl
 * PR_SET_TIMERSLACK: Linux's default 50 us would make every hold wake that much late). Call
 * before pc_worker_start, from the backprop thread. tr is borrowed and must outlive the
 * replay. w is borrowed, and the replay, which owns the registered buffers, must outlive it:
 * destroy the replay after pc_worker_destroy (pc_replay_report and pc_replay_destroy are
 * the calls left once w is gone). On PC_OK *out is the caller's. Errors: PC_EINVAL (bad
 * opts), PC_ENOMEM, or a registration's (the worker's message), with one line in err; the
 * tensors registered before a failure stay registered (the worker is unusable then:
 * destroy it). */
int pc_replay_create(const pc_trace_t *tr, pc_worker_t *w, const pc_replay_opts_t *o,
                     pc_replay_t **out, char *err, size_t errlen);

/* One iteration (the module's comment), after pc_worker_start: the worker's iteration
 * number (pc_worker_iteration) picks the shift. *stop as pc_worker_iteration_end's (may be
 * NULL). PC_OK, or a worker call's error with one line in err naming the call and the
 * tensor ("param_wait(conv1.0): ..."). Backprop thread. */
int pc_replay_iteration(pc_replay_t *r, bool *stop, char *err, size_t errlen);

/* What the replay measured over its iterations (the first one left out when there are
 * more: it holds the start-up's waits). Times in milliseconds, overshoots in microseconds. */
typedef struct pc_replay_report {
    int64_t iterations;        /* iterations the figures cover */
    double iter_mean_ms;       /* pc_replay_iteration's wall time, mean */
    double iter_p50_ms;        /* and median */
    double trace_ms;           /* the trace's compute (forward + backward) x K */
    double ratio;              /* iter_p50_ms / trace_ms */
    double optimizer_ms;       /* the device step held per iteration (x K; 0 without one) */
    bool optimizer_from_trace; /* true: the trace's optimizer_ms; false: the rule */
    double copy_ms;            /* the copy engine's busy time per iteration (x K) */
    int64_t holds;             /* holds that slept (a hold already past is not one) */
    double overshoot_p50_us;   /* wake-up minus deadline over those holds: median */
    double overshoot_p99_us;   /* and 99th percentile */
    double overshoot_max_us;
} pc_replay_report_t;

/* Fill *out (the figures so far). Backprop thread, or any thread once iterations stop. */
void pc_replay_report(const pc_replay_t *r, pc_replay_report_t *out);

/* Free the replay, its parameters and its pool (NULL: no-op). After pc_worker_destroy (the
 * runtime reads the registered buffers until then). */
void pc_replay_destroy(pc_replay_t *r);

#ifdef __cplusplus
}
#endif
#endif /* PC_REPLAY_H */
