/* pc_runtime: the parameter-server runtime: roles, the worker pipeline, the server loop.
 *
 * Under mpirun -np N (or srun) with --servers S, the last S ranks are servers and ranks
 * 0..N-S-1 workers (rank 0 reports). A worker's training code, on its "backprop thread":
 *
 *     pc_runtime_create(&cfg, MPI_COMM_WORLD, log, &rt, err, len);     every rank
 *     if (pc_runtime_role(rt) == PC_ROLE_SERVER)
 *         return pc_server_run(rt, err, len);                          servers: that's all
 *     pc_worker_create(rt, &w, err, len);
 *     for each parameter tensor, in forward order:
 *         pc_worker_register(w, "fc1.weight", param, grad, n);
 *     pc_worker_start(w);                  plan chunks, share initial parameters, spawn
 *                                          the pinned compressor thread
 *     for each iteration:
 *         for each layer L forward:  pc_worker_param_wait(w, L's tensors) ... forward L
 *         for each layer L backward: ... backward L; pc_worker_grad_ready(w, L's tensors)
 *         pc_worker_iteration_end(w, &stop)
 *     pc_worker_finish(w); pc_worker_destroy(w); pc_runtime_destroy(rt);
 *
 * Error messages (pc_error.h's rule): pc_runtime_* and pc_server_run write theirs into the
 * caller's err buffer; pc_worker_create too (there is no worker yet); every other
 * pc_worker_* call keeps its message on the worker, read with pc_worker_error.
 *
 * Buffer lifetimes (the zero-copy contract, as in ps-lite):
 * - gradient buffers: after grad_ready(t) the runtime reads t's gradient until it has
 *   folded it into the chunk's error-feedback state; the caller must not write it again
 *   before pc_worker_iteration_end returns (which waits for every release).
 * - parameter buffers: after grad_ready(t) the runtime may overwrite t's parameters with the
 *   iteration's update at any time; the caller must not read them until
 *   pc_worker_param_wait(t) returns in the next iteration (it returns as soon as t's update
 *   is in). With --update workers the update is the worker's own step on the mean gradient
 *   (pc_worker_set_user_step: the caller's step, and other rules for the gradients).
 * Checkpoints (--checkpoint-dir, --checkpoint-every, --resume; files in pc_ckpt.h): at an
 * iteration boundary every worker waits for the last updates, then servers write their
 * shards (parameters, optimizer momentum) and workers their codec state (error-feedback
 * residuals, codec momentum, steps; in allreduce mode parameters and momentum); rank 0 writes
 * the manifest last. pc_worker_start with --resume restores the newest complete one and
 * pc_worker_iteration() then tells the caller where to continue (its data order and
 * dropout derive from the iteration). The result is bitwise the same as a run that was
 * never interrupted.
 * Threads: every pc_worker_* call comes from one thread (the backprop thread); the runtime
 * owns the compressor thread. Results are deterministic: the same seed and flags give
 * bitwise the same parameters with --pipeline on and off. */
#ifndef PC_RUNTIME_H
#define PC_RUNTIME_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "pipecompress/pc_config.h"
#include "pipecompress/pc_log.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_role { PC_ROLE_WORKER = 0, PC_ROLE_SERVER = 1 } pc_role_t;

typedef struct pc_runtime pc_runtime_t;
typedef struct pc_worker pc_worker_t;

/* pc_config_check (pc_config.h) under the runtime's name, which programs have called since
 * 0.1: the checks of the flags' combinations and the defaults that depend on other flags,
 * for a job of world_size ranks. The same arguments, results and thread-safety. */
int pc_runtime_check_config(pc_config_t *cfg, int world_size, char *err, size_t errlen);

/* Collective over comm (MPI must be initialised with MPI_THREAD_MULTIPLE). Duplicates comm
 * (with MPI_ERRORS_RETURN), assigns roles, plans and binds the calling thread's core
 * (pc_topo); with --device cuda or emulate a worker opens its device (pc_runtime_gpu).
 * cfg is copied; log is borrowed (must outlive the runtime; NULL: stderr).
 * Errors: PC_EUSAGE (bad flags), PC_EMPI, PC_ETOPO, PC_ENOMEM with a message; PC_ENODEV
 * when a worker cannot open its device, on every rank with the same message (naming the
 * rank and the CUDA runtime's reason), so that a program may print it once. */
int pc_runtime_create(const pc_config_t *cfg, MPI_Comm comm, pc_log_t *log, pc_runtime_t **out,
                      char *err, size_t errlen);
/* Collective over the runtime's communicator (it frees its duplicates of the user's): every
 * rank calls it, after its worker is finished and destroyed or its server has returned.
 * Frees rt and everything it owns; the log passed to pc_runtime_create is
 * not closed. NULL is accepted (and is not collective). */
void pc_runtime_destroy(pc_runtime_t *rt);

/* This rank's role, and the job's numbers of workers and servers: fixed at create.
 * Thread-safe. */
pc_role_t pc_runtime_role(const pc_runtime_t *rt);
int pc_runtime_workers(const pc_runtime_t *rt);
int pc_runtime_servers(const pc_runtime_t *rt);
/* Workers with --device cuda: this rank's CUDA device ordinal (chosen at create: --gpu,
 * else the node-local worker index modulo the visible devices); PC_GPU_EMULATE (-1) with
 * --device emulate; -2 on servers and with --device cpu. Thread-safe. */
int pc_runtime_gpu(const pc_runtime_t *rt);

/* A flag a signal handler sets to the signal's number (SIGINT, SIGTERM): workers then agree
 * to stop at the next iteration boundary (pc_worker_iteration_end reports stop), write a
 * final checkpoint when --checkpoint-dir is set, and shut down cleanly. The flag is only
 * read. Call before pc_worker_start. */
void pc_runtime_set_stop_flag(pc_runtime_t *rt, volatile sig_atomic_t *flag);

/* After the run: the signal number every rank agreed to stop on (the largest raised on any
 * worker), or 0 when the run was not stopped. Workers and servers alike (servers learn it
 * from the workers' end messages), so every rank can exit with 128 + N. */
int pc_runtime_stop_signal(const pc_runtime_t *rt);

/* The run's own learning-rate schedule at iteration t (0-based; pc_optim_lr of --lr,
 * --lr-schedule, --lr-step, --lr-gamma, --lr-warmup and --iters): the rate iteration t's
 * step uses unless pc_worker_set_optimizer gave parameter groups (whose rates come from
 * pc_worker_set_lrs). The binding's pc.lr() without a pc.DistributedOptimizer. Reads only
 * what create fixed: thread-safe, any rank. */
double pc_runtime_lr(const pc_runtime_t *rt, int64_t t);

/* The server loop: receive, validate and aggregate the workers' compressed gradients, step
 * the optimizer on this server's chunks, push the updated parameters back (--update
 * workers: no step, the mean gradient pushed back instead), until every worker has
 * finished. Returns PC_OK, or an error with a message (a malformed message
 * names its sender; PC_ETIMEDOUT names what was awaited). Server ranks only. */
int pc_server_run(pc_runtime_t *rt, char *err, size_t errlen);

/* ---- workers -------------------------------------------------------------------------- */

/* Create this worker rank's worker (workers only: PC_ESTATE on a server rank). rt is
 * borrowed and must outlive the worker; on PC_OK *out is the caller's, to be freed with
 * pc_worker_destroy. Errors (PC_ESTATE, PC_ENOMEM) with a message in err; later calls
 * report theirs through pc_worker_error. No thread is started here. Call from the thread
 * that will be the backprop thread. */
int pc_worker_create(pc_runtime_t *rt, pc_worker_t **out, char *err, size_t errlen);

/* Register a tensor (before pc_worker_start), in forward order. param and grad (n floats
 * each) stay owned by the caller and must outlive the worker. Returns the tensor's id
 * (0, 1, ...) or a negative PC_E* code (PC_ESTATE with --device cuda or emulate, whose
 * tensors go through pc_worker_register_device). name is copied. */
int pc_worker_register(pc_worker_t *w, const char *name, float *param, float *grad, size_t n);

/* Register a tensor that lives in device memory (--device cuda: memory of this rank's
 * GPU, pc_runtime_gpu; --device emulate: host memory handled as device memory). As
 * pc_worker_register otherwise; --device cpu refuses device tensors (PC_ESTATE) as the
 * other devices refuse host ones, so a worker's tensors are all one or the other. The runtime keeps
 * a pinned host mirror of the parameters, and of the gradients it copies to the host. Buffer
 * lifetimes as for host tensors, but on the caller's stream (pc_worker_set_stream): grad_ready(t)
 * records an event on that stream after the work queued so far (the gradient is read once that work
 * is done, on another stream; the caller must not queue writes to it before pc_worker_iteration_end
 * returns), and param_wait(t) returns once t's update is in, having made that stream wait for the
 * update's copy to the device: kernels queued on it afterwards see the new parameters
 * (the calling thread does not wait for the copy). Backprop thread, before start. */
int pc_worker_register_device(pc_worker_t *w, const char *name, float *param, float *grad,
                              size_t n);

/* Say that tensor `tensor` is a matrix of `rows` rows (its first dimension; the columns are
 * the product of the others): a torch weight of shape (out, in, kh, kw) has rows = out. Only
 * --compress powersgd uses it: such a tensor, when its factors pay (pc_codec.h,
 * pc_codec_lowrank_fits), travels as one chunk of its own (never cut at --chunk-bytes) in
 * two rounds. rows 0 or 1: not a matrix (the default). PC_EINVAL when rows does not divide
 * the tensor's elements or there is no such tensor; PC_ESTATE after pc_worker_start.
 * Every worker must say the same (the model check at start compares them). Backprop
 * thread, before start. */
int pc_worker_set_rows(pc_worker_t *w, int tensor, size_t rows);

/* Copy tensor `tensor`'s current Q into q (len floats: cols x rank, row-major, cols = its
 * elements / its rows): the warm start its next powersgd round 1 multiplies by, first the
 * draw every worker makes alike (Philox, the run's seed and the matrix's chunk, then
 * orthonormalised). For comparing with another implementation from the same start (torch's
 * powerSGD_hook: tests/mpi/test_torch_powersgd.sh). PC_OK; PC_EINVAL when the tensor does not
 * travel as powersgd factors in this run or len differs; PC_ESTATE before pc_worker_start.
 * Backprop thread, when no update of the tensor is awaited (after pc_worker_start, or
 * after its param_wait returned: the compressor thread writes Q before the update's
 * version, which param_wait acquires). */
int pc_worker_lowrank_q(pc_worker_t *w, int tensor, float *q, size_t len);
/* The floats of tensor `tensor`'s Q (cols x rank), 0 when it does not travel as powersgd
 * factors in this run or before pc_worker_start. Backprop thread. */
size_t pc_worker_lowrank_q_len(const pc_worker_t *w, int tensor);

/* The stream (a cudaStream_t; NULL: the legacy default stream) the caller's kernels that
 * produce gradients and read parameters run on: required with --device cuda (start fails
 * with PC_ESTATE without it). Give it a priority above the default (pc_model's stream has
 * the device's highest), so that --compress-on gpu's kernels, on a stream of the lowest,
 * yield to the training's. Before pc_worker_start (PC_ESTATE after). Backprop thread. */
int pc_worker_set_stream(pc_worker_t *w, void *stream);

/* The fields of one parameter group in pc_worker_set_optimizer's hparams, in this order
 * (PC_GROUP_FIELDS doubles a group; the booleans as 0 or 1). */
enum {
    PC_GROUP_LR,
    PC_GROUP_WEIGHT_DECAY,
    PC_GROUP_MOMENTUM, /* sgd */
    PC_GROUP_NESTEROV, /* sgd */
    PC_GROUP_BETA1,    /* adam(w) */
    PC_GROUP_BETA2,    /* adam(w) */
    PC_GROUP_EPS,      /* adam(w) */
    PC_GROUP_AMSGRAD,  /* adam(w) */
    PC_GROUP_FIELDS
};

/* The optimizer as parameter groups (torch.optim's param_groups), instead of the run's
 * --optimizer, --lr, --weight-decay, --momentum, --nesterov, --betas, --eps, --amsgrad and
 * schedule: kind (pc_optim_kind_t) for every group; hparams: ngroups x PC_GROUP_FIELDS
 * doubles, group g's at hparams[g * PC_GROUP_FIELDS]; tensor_group[t]: registered tensor
 * t's group (every tensor has one). The servers take each tensor's rule from its group
 * (worker 0 sends the table with the layout; the chunk plan never joins tensors of two
 * groups in one chunk) and each iteration's learning rates from pc_worker_set_lrs: the
 * runtime's own schedule is not used (--adam-moments and --adam-freeze-after, the flags',
 * apply to every group). Copied. --mode ps and --update servers only (with --compress
 * powersgd each matrix's update carries its group's rate, with which the workers repeat
 * its server's step), not with a codec's momentum correction given in the spec and server
 * momentum or Adam (as pc_config_check refuses); the codec's default
 * momentum correction is turned off (pc_config_codec_momentum_off: the groups step as
 * given, SGD's momentum on the servers; pc_worker_compress then says momentum=0); every
 * worker must say the same. PC_OK; PC_EINVAL (a group's value, a tensor's group, with a
 * one-line reason through pc_worker_error), PC_ESTATE (after pc_worker_start, twice, or a
 * run that cannot).
 * Backprop thread, before start. */
int pc_worker_set_optimizer(pc_worker_t *w, int kind, const double *hparams, int ngroups,
                            const int *tensor_group);

/* This iteration's learning rate of every group (lrs[0..ngroups), finite and >= 0), after
 * pc_worker_set_optimizer and pc_worker_start: once per iteration, before
 * pc_worker_iteration_end (which fails with PC_ESTATE without it). Sent to every server at
 * once (a small message): each server steps the iteration's chunks with worker 0's rates
 * and refuses, ending the run with a line naming the worker and both values, when another
 * worker's differ (a scheduler stepped on one worker only). PC_EINVAL (a bad rate, another
 * group count), PC_ESTATE (no groups, before start, twice in one iteration), an MPI error.
 * lrs is copied. Backprop thread. */
int pc_worker_set_lrs(pc_worker_t *w, const double *lrs, int ngroups);

/* Clip this iteration's averaged gradient by its global 2-norm on the servers, as
 * torch.nn.utils.clip_grad_norm_(params, max_norm) after backward would on the averaged
 * gradient of every tensor (coefficient max_norm / (norm + 1e-6), at most 1): call it after
 * pc_worker_set_lrs and every pc_worker_grad_ready of the iteration, before
 * pc_worker_iteration_end, on every worker with the same max_norm (> 0; +inf: the norm
 * only). Sends max_norm to every server (TAG_CLIP), then blocks until the servers have
 * aggregated the whole iteration and exchanged their shards' sums of squares, and writes
 * the norm (of the mean gradient the servers step on, before clipping, a powersgd
 * matrix's being P^ Q^T; +inf or NaN when it is not finite) to *total_norm; the servers
 * then scale and step (a matrix's update carries the coefficient for the workers' copies).
 * Parameter groups only (pc_worker_set_optimizer; the runtime's own step clips with
 * --clip-grad-norm). The servers hold an iteration's chunks for the workers' word only in the run's
 * first iteration (a fresh start's or the resume's) and in every iteration after one that clipped
 * (pc_worker_iteration_end says "no clipping" in those where this was not called): a run that never
 * clips keeps its overlap after the first iteration, and clipping must begin with the run.
 * PC_EINVAL (max_norm not above 0), PC_ESTATE (no groups, before start, before pc_worker_set_lrs,
 * twice in one iteration, clipping that did not begin with the run), PC_ETIMEDOUT (no norm within
 * --timeout), an MPI error, or a compressor thread's failure. Backprop thread. */
int pc_worker_clip_grad_norm(pc_worker_t *w, double max_norm, double *total_norm);

/* Freeze the registration (collective over all ranks with pc_server_run): every worker
 * must have registered the same tensors. Worker 0's parameters become everyone's initial
 * parameters. Starts the compressor thread (--pipeline on), the last step. On error
 * nothing it built stays (the worker is as registered) and the message is in
 * pc_worker_error; the job cannot go on (the other ranks are in the collective). */
int pc_worker_start(pc_worker_t *w);

/* Block until tensor t holds this iteration's parameters (immediately in iteration 0).
 * Waits longer than --timeout fail with PC_ETIMEDOUT. With --update workers "holds" means
 * that the mean gradient of t's chunks arrived and the runtime stepped them (on the thread
 * that applies updates: the compressor thread, or this one with --pipeline off): the same
 * call, the same per-layer overlap of the step with the forward pass. */
int pc_worker_param_wait(pc_worker_t *w, int tensor);

/* --update workers only: the caller steps the optimizer itself (a torch optimizer's
 * step() on every worker): the runtime then runs no step and keeps no optimizer state;
 * each chunk's mean gradient (the servers' dense average, exactly what the runtime's step
 * would have used) is written into the registered gradient buffer (so a binding whose
 * buffers are p.grad gets it there without a copy), and pc_worker_grad_wait says when.
 * Host tensors only. The gradient buffers' lifetime changes: after grad_ready(t) the
 * runtime also writes t's gradient buffer, until pc_worker_grad_wait(t) returns (or
 * pc_worker_iteration_end, which waits for every mean gradient in this mode); the
 * parameters are never written by the runtime (param_wait returns at once), and the caller
 * steps them after grad_wait and before its next forward pass, alike on every worker.
 * Checkpoints save the parameters, not the caller's optimizer state. user false: the
 * runtime's step (the default). Before pc_worker_start, or after it until the first
 * gradient is handed over (a wrapper made after the model is attached; the runtime's step
 * state is freed then; a --resume from a checkpoint of the user's step needs the switch
 * before the first gradient, grad_ready fails without it). PC_ESTATE without --update
 * workers, with device tensors, back to false after start, or after a gradient was handed
 * over; PC_EINVAL (user true) when the codec's spec gives it momentum correction on the
 * workers (momentum= above 0: the mean the servers push would carry momentum, not the
 * averaged gradient the caller's optimizer expects); the codec's default momentum
 * correction is turned off instead (before start; pc_worker_compress then says
 * momentum=0). Backprop thread. */
int pc_worker_set_user_step(pc_worker_t *w, bool user);

/* Give the codec the default warm-up for a step that normalises each entry by its own
 * history (Adam, Adadelta, RMSprop, ...: error feedback's late sums mislead it): its first
 * PC_CONFIG_ADAM_WARMUP iterations (pc_config.h) dense, dense= added to the spec where the
 * codec is topk or dgc, warmup= for powersgd, where the spec gave neither key
 * (pc_config_codec_adam_warmup); other codecs, and a spec that gave one, stay as they are.
 * pc_worker_set_optimizer does it itself for Adam and AdamW groups; a binding calls this for the
 * caller's own optimizer on the workers (pc_worker_set_user_step) when it is not plain SGD. The
 * servers, whose flags lack it, learn it from worker 0 at the start (doc/wire-format.md, tag 11).
 * Before pc_worker_start (the codec states are made there): PC_ESTATE after. Returns PC_OK whether
 * or not the spec changed. Backprop thread. */
int pc_worker_warm_codec(pc_worker_t *w);

/* The --compress spec this worker runs: the configuration's, with momentum=0 added where
 * pc_worker_set_optimizer or pc_worker_set_user_step turned the codec's default momentum
 * correction off, and dense=1000 (powersgd: warmup=1000) where pc_worker_warm_codec (or
 * set_optimizer's Adam) gave the codec its default warm-up. Borrowed from w, valid until the
 * next of those calls or pc_worker_destroy. Backprop thread. */
const char *pc_worker_compress(const pc_worker_t *w);

/* The Adam moments the servers step this run's chunks with ("dense" or "lazy"; "dense"
 * for SGD, which has none): --adam-moments where given, else the codec's default for the
 * run's optimizer, the parameter groups' where pc_worker_set_optimizer gave them
 * (pc_config_adam_moments, the rule the servers apply). A static string. Backprop thread
 * (reads the configuration that pc_worker_set_optimizer writes). */
const char *pc_worker_adam_moments(const pc_worker_t *w);

/* The step after which the servers' Adam freezes v for this run's chunks (0: never):
 * --adam-freeze-after where given, else the codec's default (pc_config_adam_freeze_after,
 * the rule the servers apply: top-k's and DGC's default dense warm-up's length). Backprop
 * thread. */
int64_t pc_worker_adam_freeze_after(const pc_worker_t *w);

/* Where the step runs (a pc_config_update_t: PC_UPDATE_SERVERS or PC_UPDATE_WORKERS),
 * chosen by the workers instead of the flags' --update (the binding's
 * DistributedOptimizer(update="workers") when pc.init got no --update). Every worker must
 * choose the same: pc_worker_start compares the choices (a worker that did not call this
 * has the flags') and fails on every worker, with one agreed message, when they differ;
 * worker 0 tells the servers at start, before they set up their chunks (their own
 * --update is the flags'). The same placement as the flags' is a no-op. PC_EINVAL (not a
 * placement); PC_ESTATE after pc_worker_start or pc_worker_set_optimizer, when the flags
 * gave --update explicitly, or a run --update workers refuses (--mode allreduce, --compress
 * powersgd, --pull), or back to the servers after pc_worker_set_user_step. Backprop thread,
 * before start. */
int pc_worker_set_update(pc_worker_t *w, int update);

/* With pc_worker_set_user_step: block until tensor t's gradient buffer holds the mean
 * gradient of the current iteration (the one whose gradients were handed over, before
 * pc_worker_iteration_end), all its chunks. Call it after grad_ready(t) (before, it waits
 * for a gradient that was not sent and fails after --timeout). PC_ESTATE without the
 * user's step; PC_ETIMEDOUT after --timeout. Backprop thread. */
int pc_worker_grad_wait(pc_worker_t *w, int tensor);

/* Tensor t's gradient for this iteration is complete (whole tensor, or [begin, end) of it
 * for a big layer handed over in pieces, in any order; every element exactly once per
 * iteration, PC_EINVAL for an element handed over twice). Never blocks on compression or
 * the network, except for a bounded, counted back-pressure wait when the hand-off queue is
 * full. --pipeline off: compresses and sends inline. Backprop thread. */
int pc_worker_grad_ready(pc_worker_t *w, int tensor);
int pc_worker_grad_ready_range(pc_worker_t *w, int tensor, size_t begin, size_t end);

/* pc_worker_grad_ready with the gradient read from elsewhere and not before a time (the
 * replay of a GPU trainer, pc_replay.h). Host tensors only (PC_ESTATE with --device cuda
 * or emulate). grad: this iteration's gradient of the whole tensor (its registered length;
 * NULL: the registered buffer), borrowed as the registered buffer is: the caller must not
 * write it before pc_worker_iteration_end returns. not_before: a pc_time_ns time before
 * which the runtime does not read it (0: no wait), modelling the gradient's copy to the
 * host on a copy engine: the compressor thread (--pipeline on) sleeps until then before it
 * folds the tensor's chunks; inline (--pipeline off) the backprop thread does, as a real
 * inline trainer waits for the copy before compressing on the CPU. --mode allreduce reads
 * the gradient likewise. pc_worker_grad_ready(w, t) is pc_worker_grad_ready_view(w, t,
 * NULL, 0), bitwise. Errors as pc_worker_grad_ready's, and PC_EINVAL for a not_before
 * that is negative or more than --timeout ahead. Backprop thread. */
int pc_worker_grad_ready_view(pc_worker_t *w, int tensor, const float *grad, int64_t not_before);

/* --mode allreduce only: the optimizer step runs on a device the caller models (the replay
 * of a GPU trainer): the worker does not step on the CPU (no pc_optim_step; the parameters
 * are not updated by the runtime) and instead holds ns_per_iteration in all, split over the
 * chunks by their share of the elements, on the thread that would have stepped, sleeping
 * to a deadline (clock_nanosleep, never spinning). The caller multiplies by --dilate
 * itself; the runtime does not dilate the hold. ns_per_iteration 0: no hold (still no
 * step). PC_EINVAL for a negative time; PC_ESTATE after pc_worker_start or with --mode ps
 * (the servers step, for real). Backprop thread, before start. */
int pc_worker_set_device_step(pc_worker_t *w, int64_t ns_per_iteration);

/* End of an iteration: waits until every gradient buffer is released, records the
 * iteration's metrics, and agrees with the other workers whether to stop (*stop, when not
 * NULL: a stop flag was raised on some worker). */
int pc_worker_iteration_end(pc_worker_t *w, bool *stop);

/* Collective over the workers (not the servers), after pc_worker_start and before
 * pc_worker_finish: every worker calls it at the same point with the same byte count, and
 * afterwards buf holds worker 0's bytes on every worker (for state the runtime does not
 * train: a host language's buffers, frozen parameters). buf is borrowed. Waited for
 * without spinning, at most --timeout. Errors (PC_EINVAL, PC_EMPI, PC_ETIMEDOUT, or the
 * compressor thread's own failure) through pc_worker_error. Backprop thread. */
int pc_worker_broadcast(pc_worker_t *w, void *buf, size_t bytes);

/* After the last iteration (collective with the servers): wait for the last updates, tell
 * the servers, stop the compressor thread, write --metrics. */
int pc_worker_finish(pc_worker_t *w);

/* Free the worker and everything it owns (NULL: no-op); the registered buffers stay the
 * caller's. After pc_worker_finish (or a failed or absent pc_worker_start) it only frees.
 * On a started worker that did not finish (an error path, or an abandoned run) it also
 * stops the compressor thread without draining its queue and joins it (no thread is left
 * detached), cancels the posted update receives, and completes the gradient sends; the
 * sends share one deadline, --timeout after destroy began settling them, and a send still
 * incomplete then is released with MPI_Request_free and its buffer left allocated (MPI may
 * still read it), with a warning in the log. A receive whose cancel fails also keeps its
 * buffer allocated (MPI may still write it), with a warning. The servers are not told:
 * they time out. Call before MPI_Finalize, from the backprop thread, with rt still alive. */
void pc_worker_destroy(pc_worker_t *w);

/* The message of the last error a pc_worker_* call returned ("" if none). */
const char *pc_worker_error(const pc_worker_t *w);
/* Whether that error is one every worker returned with the same message (a failure the
 * workers agreed on in pc_worker_start, such as another job's checkpoints in
 * --checkpoint-dir): a program then says it once, from worker 0. Backprop thread. */
bool pc_worker_error_agreed(const pc_worker_t *w);

/* Iterations completed (pc_worker_iteration_end calls). */
int64_t pc_worker_iteration(const pc_worker_t *w);

/* Metrics of one iteration of one worker. Times in seconds.
 *
 * The breakdown: where the backprop thread waited in this iteration, and why, with one
 * definition in every mode (doc/api.md, "Metrics", says the same):
 *   t_wait_release       iteration_end waiting for gradient buffers to be released;
 *   t_wait_backpressure  grad_ready blocked on a full hand-off queue;
 *   t_wait_compress      param_wait, the part of each wait before the awaited chunk was
 *                        sent (queued behind other chunks, or being folded/compressed);
 *   t_wait_server        param_wait after the chunk was sent: the server's time on the
 *                        chunk (carried in its update), at most what remained of the wait;
 *                        --mode allreduce: the local mean and optimizer step;
 *   t_wait_network       param_wait, the rest (--mode allreduce: the allreduces);
 *   t_compress_inline    --pipeline off: the compression the backprop thread ran itself
 *                        (inside grad_ready); 0 when pipelined.
 * t_param_wait = t_wait_compress + t_wait_network + t_wait_server (up to float rounding).
 * t_exposed, the compression the backprop thread was exposed to: t_compress_inline when
 * inline; t_wait_release + t_wait_backpressure + t_wait_compress when pipelined; either
 * capped at t_compress_busy (the busiest compressor thread's, wall time as the waits are;
 * t_compress with one thread or inline), so it never exceeds the compression it measures.
 * The waits are
 * those of the iteration in which the thread waited (its forward pass waits for the
 * previous iteration's updates); t_compress is the compression of this iteration's
 * chunks. Compute, what is left: t_iteration - t_param_wait - t_wait_release -
 * t_wait_backpressure - t_compress_inline. With --mode allreduce --pipeline off the
 * allreduces run inside grad_ready: part of compute. With --dilate K every time includes
 * the dilation's sleeps (t_compress is K times the CPU's compression, t_wait_server the
 * server's dilated time): the emulated machine's times, K times over. The fields from
 * t_wait_release on were added at the end of the struct (its size grew: rebuild callers).
 *
 * A pool (--compressors N): t_compress adds every thread's compression, the pool's CPU
 * time; t_compress_busy is the busiest thread's alone (the maximum over the threads), the
 * pool's wall view: the compressor is the bottleneck where t_compress_busy, not
 * t_compress, approaches the iteration. t_compress_busy <= t_compress <= N t_compress_busy;
 * with one thread (or --pipeline off) they are equal. */
typedef struct pc_worker_metrics {
    int64_t iteration;
    double t_iteration;  /* iteration_end to iteration_end */
    double t_forward;    /* iteration start to the first grad_ready (includes param waits) */
    double t_backward;   /* first grad_ready to iteration_end */
    double t_param_wait; /* in param_wait: waiting for updates (the three t_wait_update
                            parts below) */
    double t_compress;   /* folding and compressing this iteration's chunks, every
                            thread's time summed (the pool's CPU time) */
    double t_exposed;    /* compression the backprop thread was exposed to (above) */
    uint64_t bytes_sent; /* compressed gradients (or allreduce payload) */
    uint64_t bytes_received;
    uint64_t dense_bytes; /* what dense fp32 gradients would have been */
    uint32_t queue_high_water;
    double loss;           /* as reported by pc_worker_report (NAN when not reported) */
    double accuracy;       /* training accuracy of the batch, 0..1 (NAN when not reported) */
    double t_wait_release; /* the breakdown (above) */
    double t_wait_backpressure;
    double t_wait_compress;
    double t_wait_network;
    double t_wait_server;
    double t_compress_inline;
    double t_compress_busy; /* t_compress of the busiest thread alone (above) */
    int compressors;        /* the pool's threads (--compressors), 0 with --pipeline off */
} pc_worker_metrics_t;

/* Report this iteration's training loss and batch accuracy (before iteration_end); they
 * go into its metrics. Backprop thread only. */
void pc_worker_report(pc_worker_t *w, double loss, double accuracy);

/* Append one JSON object (without newline, e.g. an evaluation result) to this rank's
 * --metrics lines. Backprop thread only. */
void pc_worker_metrics_note(pc_worker_t *w, const char *json_object);

/* Record an event of the backprop thread (forward or backward of a layer) on the
 * --timeline track "backprop" of this rank; a no-op without --timeline. Backprop thread
 * only. Times from pc_time_ns. */
void pc_worker_trace(pc_worker_t *w, const char *name, int64_t t0_ns, int64_t t1_ns);

/* The newest complete iteration's metrics; false before any is complete. */
bool pc_worker_last_metrics(const pc_worker_t *w, pc_worker_metrics_t *out);

/* Largest window of pc_worker_breakdown: iterations each worker keeps. */
#define PC_WORKER_BREAKDOWN_MAX 64

/* The breakdown of the last iterations over all workers: each figure is the median over
 * every worker's last `window` complete iterations (seconds; pc_worker_metrics_t defines
 * them; t_compute is what is left of t_iteration). */
typedef struct pc_worker_breakdown {
    int window;   /* iterations per worker the medians cover (fewer early on) */
    int workers;  /* workers the medians cover */
    int64_t last; /* the newest iteration covered (-1: none complete yet) */
    double t_iteration, t_compute, t_param_wait;
    double t_wait_release, t_wait_backpressure, t_wait_compress, t_wait_network, t_wait_server;
    double t_compress, t_compress_inline, t_exposed;
    double bytes_sent; /* per worker and iteration */
    int slowest;       /* rank of the worker with the largest median compute: the one the
                          others wait for */
    double slowest_compute, slowest_iteration; /* its medians of t_compute, t_iteration */
    double t_compress_busy; /* the busiest compressor thread's (pc_worker_metrics_t) */
} pc_worker_breakdown_t;

/* Collective over the workers (not the servers): every worker calls it at the same point
 * of its loop (the same iteration), with the same window (1..PC_WORKER_BREAKDOWN_MAX,
 * PC_EINVAL otherwise, on every worker alike). Fills *out, the same on every worker.
 * Before any iteration is complete, out->last is -1 and the figures are 0. Errors
 * (PC_EMPI) through pc_worker_error. Backprop thread. */
int pc_worker_breakdown(pc_worker_t *w, int window, pc_worker_breakdown_t *out);

#ifdef __cplusplus
}
#endif
#endif /* PC_RUNTIME_H */
