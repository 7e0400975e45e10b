/* pc_topo: hardware topology (hwloc) and the placement of PipeCompress threads on cores.
 *
 * Each worker rank runs a backprop thread and a compressor thread; the compressor must
 * have a core of its own, or compression is not hidden but merely time-shared. Placement
 * is a plan computed for all ranks of a node at once, from what each rank contributes
 * (pc_topo_rank_t: its launcher-given cpuset and its threads), so that every rank computes
 * the same plan without further talk:
 * - ranks whose launcher cpusets are equal (e.g. all unbound) share that cpuset's cores,
 *   taking consecutive cores in local-rank order, each thread its own core;
 * - a rank confined by the launcher (mpirun --bind-to core) places its threads only inside
 *   its own cpuset;
 * - with fewer cores than threads, threads wrap around and share cores; the plan says so
 *   (pc_topo_plan_describe) and the job goes on;
 * - --bind none leaves threads unbound; --bind LIST gives the node's threads these logical
 *   cores in order (explicit lists override the launcher's cpusets).
 * The plan is pure (no MPI, no binding), so it is tested on synthetic topologies such as
 * "pack:2 core:8 pu:2". The MPI exchange of pc_topo_rank_t records is the transport's job.
 *
 * GPU locality. A rank that drives a GPU wants its threads on the cores next to that GPU
 * (its package or NUMA node: host-device copies and kernel launches then stay off the
 * inter-socket link; a machine hwloc sees as one locality, often a VM, gives no
 * preference). pc_topo_pci_cpuset gives the cpuset of the closest non-I/O ancestor of a
 * PCI device, found by the bus id cudaDeviceGetPCIBusId writes; the rank puts it in its
 * record's `near` (and a name for messages in `gpu`). Planning with --bind auto:
 * - a rank with a `near` set takes free cores inside (its cpuset & near) first, thread by
 *   thread in local-rank order, before any rank without one is placed; its threads that
 *   find no free core there fall back to the usual order (the lowest free cores of its
 *   cpuset, in local-rank order with everyone else). With fewer cores than threads, such
 *   a rank's thread prefers, among the least-loaded cores that hold no other thread of its
 *   rank, one near its GPU;
 * - ranks with `near` = "" then take the lowest free cores in local-rank order, as ever:
 *   with no rank near a GPU the plan is the one above, core for core;
 * - --bind LIST and --bind none ignore `near` (a list is obeyed as written; the
 *   description still says which listed threads are far from their GPU);
 * - locality is advice: a near set outside the rank's cpuset or the topology is no error,
 *   only its threads end up "not near". pc_topo_plan_near says which threads are near and
 *   pc_topo_plan_describe names every GPU rank's cores and says when a rank's threads could
 *   not all be placed near its GPU.
 * I/O discovery: a topology of this machine is loaded with hwloc's "important" PCI devices
 * and bridges (HWLOC_TYPE_FILTER_KEEP_IMPORTANT: GPUs, NICs, storage; read from sysfs by
 * hwloc's Linux backend, its libpciaccess plugin disabled) and without OS devices (no CUDA,
 * NVML or OpenCL probing inside hwloc); I/O objects have no cpuset, so cores, PUs and the
 * allowed cpuset are those of a topology loaded without them. */
#ifndef PC_TOPO_H
#define PC_TOPO_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most cores an explicit --bind list may name. */
#define PC_TOPO_BIND_MAX 256

/* A parsed --bind value. auto: plan cores from the topology; none: do not bind; list: the
 * node's threads take these logical core indices in order (local rank 0's threads
 * first). */
typedef enum pc_bind_mode { PC_BIND_AUTO = 0, PC_BIND_NONE = 1, PC_BIND_LIST = 2 } pc_bind_mode_t;

typedef struct pc_bind {
    pc_bind_mode_t mode;
    int ncores;                  /* PC_BIND_LIST: entries in cores[] */
    int cores[PC_TOPO_BIND_MAX]; /* PC_BIND_LIST: logical core indices, >= 0 */
} pc_bind_t;

/* Parse "auto", "none" or a list "0,2,4-7" of logical core indices. Returns PC_OK, or
 * PC_EUSAGE with a message (without the flag name) in err; *out is written only on
 * success. Thread-safe. */
int pc_topo_bind_parse(const char *text, pc_bind_t *out, char *err, size_t errlen);

/* Threads one rank may place: backprop + up to 64 compressor threads (--compressors,
 * PC_CONFIG_COMPRESSORS_MAX), room for a communication thread and a CUDA-stream feeder
 * later. */
#define PC_TOPO_MAX_THREADS 67
/* A cpuset in hwloc list syntax ("0-3,8,10-11"); 256 characters cover any realistic
 * node's allowed set. */
#define PC_TOPO_CPUSET_LEN 256
#define PC_TOPO_NAME_LEN   16

/* What one rank contributes to its node's plan. Plain bytes: ranks exchange it with an
 * MPI allgather of MPI_BYTE, so it stays a fixed-size record of ints and char arrays (no
 * pointers, no padding). pc_topo_self fills it with near = gpu = "" (no preference); a
 * rank that drives a GPU then sets both. */
typedef struct pc_topo_rank {
    int rank;                                          /* global rank, for messages */
    int nthreads;                                      /* 1..PC_TOPO_MAX_THREADS */
    char cpuset[PC_TOPO_CPUSET_LEN];                   /* allowed PUs; "" = whole machine */
    char near[PC_TOPO_CPUSET_LEN];                     /* PUs near its GPU; "" = none */
    char gpu[PC_TOPO_NAME_LEN];                        /* its GPU's name in messages, e.g.
                                                        * "cuda:1"; "" = "GPU" */
    char names[PC_TOPO_MAX_THREADS][PC_TOPO_NAME_LEN]; /* thread roles, for messages */
} pc_topo_rank_t;

typedef struct pc_topo pc_topo_t;
typedef struct pc_topo_plan pc_topo_plan_t;

/* Load a topology: this machine's when synthetic is NULL, else an hwloc synthetic
 * description ("pack:2 core:8 pu:2"). Returns PC_OK, PC_ETOPO (message in err) or
 * PC_ENOMEM. The handle is read-only after creation: concurrent plan and bind calls are
 * thread-safe. */
int pc_topo_create(const char *synthetic, pc_topo_t **out, char *err, size_t errlen);
/* Free topo (NULL is accepted); plans made from it must be destroyed first. */
void pc_topo_destroy(pc_topo_t *topo);

/* Cores and processing units (hardware threads) of the topology. Thread-safe. */
int pc_topo_ncores(const pc_topo_t *topo);
int pc_topo_npus(const pc_topo_t *topo);
/* True for a topology of this machine (binding is possible), false for a synthetic one. */
bool pc_topo_is_real(const pc_topo_t *topo);

/* Cores of the topology with a PU in cpuset (hwloc list syntax; "" or NULL: the whole
 * machine); 0 for a cpuset that does not parse. Reads the topology only: thread-safe. */
int pc_topo_cores_in(const pc_topo_t *topo, const char *cpuset);

/* Fill *me for the calling process: its current CPU binding (the launcher's cpuset) and
 * the given thread names (nthreads of them, each cut to PC_TOPO_NAME_LEN - 1); near and
 * gpu are left "". Returns PC_OK, PC_EINVAL or PC_ETOPO. */
int pc_topo_self(const pc_topo_t *topo, int rank, int nthreads, const char *const names[],
                 pc_topo_rank_t *me);

/* The cpuset near a PCI device: write, in hwloc list syntax ("0-15,32-47", the syntax of
 * pc_topo_rank_t's cpusets), the cpuset of the closest non-I/O ancestor (package, NUMA
 * node, machine) of the device with bus id busid, as cudaDeviceGetPCIBusId writes it:
 * "[DOMAIN:]BUS:DEVICE.FUNCTION" in hex, either case ("0000:3b:00.0", "3B:00.0"); nothing
 * else may follow. Returns:
 * - PC_OK: cpuset holds a non-empty cpuset of this topology;
 * - PC_ENOENT with a message: the topology does not know the device (a synthetic topology,
 *   hwloc without I/O discovery, no such device, or one hwloc does not keep as important);
 *   callers fall back to no preference, silently;
 * - PC_EINVAL with a message: busid is not a bus id (or NULL, or cpuset NULL or len 0);
 * - PC_ERANGE with a message: the cpuset does not fit in len bytes.
 * On any error cpuset is left "" (when len > 0). Reads the topology only: thread-safe. The
 * caller owns both buffers; nothing is kept. */
int pc_topo_pci_cpuset(const pc_topo_t *topo, const char *busid, char *cpuset, size_t len,
                       char *err, size_t errlen);

/* Plan placement for the nranks ranks of one node (index = local rank); GPU locality from
 * each record's `near` (top of this file). ranks is copied: the caller keeps it. On
 * success *out owns the plan (pc_topo_plan_destroy). Errors (PC_EUSAGE for a --bind list
 * that names a missing core or is too short, PC_ETOPO for a cpuset outside the topology or
 * an unreadable cpuset or `near`, PC_EINVAL, PC_ENOMEM) leave a one-line message in err
 * and *out untouched. Thread-safe. */
int pc_topo_plan_create(const pc_topo_t *topo, const pc_bind_t *bind, const pc_topo_rank_t *ranks,
                        int nranks, pc_topo_plan_t **out, char *err, size_t errlen);
/* Free plan (NULL is accepted). Not while another thread reads it. */
void pc_topo_plan_destroy(pc_topo_plan_t *plan);

/* The plan's readers below are thread-safe (a plan is read-only once created). */
/* Logical core index planned for thread t of local rank r, or -1 when unbound. */
int pc_topo_plan_core(const pc_topo_plan_t *plan, int r, int t);
/* True when another planned thread of the node has the same core. */
bool pc_topo_plan_shared(const pc_topo_plan_t *plan, int r, int t);
/* Number of cores that carry more than one planned thread. */
int pc_topo_plan_nshared(const pc_topo_plan_t *plan);
/* True when thread t of local rank r is bound inside the `near` cpuset its rank gave;
 * false for a rank without one, an unbound thread or indices out of range. */
bool pc_topo_plan_near(const pc_topo_plan_t *plan, int r, int t);
/* One line describing the plan, naming which threads share which core when any do:
 *   "placement: 6 threads of 3 ranks on 2 cores; fewer cores than threads, sharing:
 *    core 0 {r0.backprop r1.compressor} ..."
 * and, when some rank gave a `near` set (and threads are bound), each such rank's GPU and
 * cores, "far" marking a thread outside the GPU's cpuset, then how many could not be
 * placed near their GPU:
 *   "...; one core each; near GPU: r0 cuda:0 {backprop 4, compressor 5} r1 cuda:1
 *    {backprop 6, compressor 1 far}; 1 thread not near its GPU"
 * Ranks that named a GPU (`gpu`) without a `near` set come last, "; GPU (locality
 * unknown): r2 cuda:0", and an unbound plan only names them: "...unbound (--bind none);
 * GPU: r0 cuda:0 r1 cuda:1". Plans of ranks without GPUs read as before. Cut to len (always
 * terminated). The caller owns buf; thread-safe. */
void pc_topo_plan_describe(const pc_topo_plan_t *plan, char *buf, size_t len);

/* Bind the calling thread to its planned cpuset (thread t of local rank r) and verify it
 * with hwloc: the binding read back must equal the plan and the thread must be running
 * inside it. A no-op returning PC_OK for unbound threads. PC_ETOPO with a message on any
 * failure, including a synthetic topology. Thread-safe; binds only the caller. */
int pc_topo_plan_bind(const pc_topo_t *topo, const pc_topo_plan_t *plan, int r, int t, char *err,
                      size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_TOPO_H */
