/* pc_comm: the MPI error check, and the node-local exchange that plans thread placement.
 *
 * This module does not own every MPI call. The runtime calls MPI where its protocol runs:
 * pc_runtime.c (communicators, the metrics gather), pc_server.c (the server loop),
 * runtime_ckpt.c (the checkpoint collective) and the worker (pc_worker.c: gradients and
 * updates; worker_start.c: model check, layout and initial parameters; worker_ckpt.c;
 * worker_metrics.c: the stop agreement; worker_allreduce.c). What they share is this
 * module's check: every MPI call in src/ is wrapped in PC_MPI_CHECK or PC_MPI_CHECK_PEER
 * (scripts/lint/check-mpi-calls.sh fails otherwise), on communicators with MPI_ERRORS_RETURN,
 * so every MPI failure comes back as PC_EMPI with a message naming the call, the peer
 * (point-to-point calls), the MPI error string, and the file and line. The message
 * encodings are in runtime_proto.c, which has no MPI. */
#ifndef PC_COMM_H
#define PC_COMM_H

#include <stddef.h>

#include <mpi.h>

#include "pipecompress/pc_config.h"
#include "pipecompress/pc_topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Turn an MPI return code into PC_OK or PC_EMPI, writing "what: MPI message (file:line)"
 * into err on failure. Thread-safe. */
int pc_comm_check(int mpi_rc, const char *what, const char *file, int line, char *err,
                  size_t errlen);
/* The same for a call with one peer (a point-to-point send, receive or its completion):
 * "what (peer rank N): MPI message (file:line)"; peer is the rank in the call's
 * communicator. Thread-safe. */
int pc_comm_check_peer(int mpi_rc, const char *what, int peer, const char *file, int line,
                       char *err, size_t errlen);

/* Every MPI call in the library goes through one of these two macros (collectives and
 * calls without a peer: PC_MPI_CHECK; point-to-point: PC_MPI_CHECK_PEER); the message
 * names the call as written, the peer, and where. scripts/lint/check-mpi-calls.sh fails on a
 * call in src/ that does not. */
#define PC_MPI_CHECK(call, err, errlen)                                                            \
    pc_comm_check((call), #call, __FILE__, __LINE__, err, errlen)
#define PC_MPI_CHECK_PEER(call, peer, err, errlen)                                                 \
    pc_comm_check_peer((call), #call, (peer), __FILE__, __LINE__, err, errlen)

/* Bytes of a host name as pc_comm_hosts keeps it (longer names are cut, NUL included). */
#define PC_COMM_HOST_LEN 64

/* Every rank's host name (gethostname; "?" if it fails), rank r's at
 * hosts + r * PC_COMM_HOST_LEN, NUL-terminated; hosts holds size(comm) x PC_COMM_HOST_LEN
 * bytes, the caller's. Collective over comm (one allgather). PC_OK or PC_EMPI with a
 * message in err. Call from one thread per rank. */
int pc_comm_hosts(MPI_Comm comm, char *hosts, char *err, size_t errlen);

/* Plan thread placement for the node the caller is on: split `comm` by shared memory,
 * exchange every local rank's pc_topo_rank_t (from pc_topo_self with these thread names,
 * and near, gpu: the cpuset near this rank's GPU and its name for the placement line, or
 * NULL for none; pc_topo.h), and plan with `bind`. Collective over comm. On success *plan owns the
 * node's plan and *local_rank is the caller's index in it. Every rank of the node gets the same
 * plan or the same planning error (PC_EUSAGE, PC_ETOPO, or PC_ENOMEM when a rank of the node ran
 * out of memory), with a message in err; MPI failures give
 * PC_EMPI. Call from one thread per rank. */
int pc_comm_plan_node(MPI_Comm comm, const pc_topo_t *topo, const pc_bind_t *bind, int nthreads,
                      const char *const names[], const char *near, const char *gpu,
                      pc_topo_plan_t **plan, int *local_rank, char *err, size_t errlen);

/* Bytes of the message pc_comm_agree hands round (longer ones are cut, NUL included). */
#define PC_COMM_AGREE_LEN 512

/* Agree on a failure that any rank may have met (a start-up check, a device that does not
 * open): collective over comm, every rank with its own rc (PC_OK or a PC_E* code) and, on
 * failure, its one-line message in msg. When no rank failed, returns PC_OK and leaves msg
 * alone. Otherwise every rank returns the lowest failing rank's code with that rank's
 * message in msg (msglen bytes, at most PC_COMM_AGREE_LEN of it kept), and *who (when not
 * NULL) is that rank: so that a program can print the one reason once. MPI failures give
 * PC_EMPI with a message in msg and *who = -1. Call from one thread per rank; msglen the same on
 * every rank. */
int pc_comm_agree(MPI_Comm comm, int rc, char *msg, size_t msglen, int *who);

/* The tag pc_comm_pingpong's messages carry on its communicator. */
#define PC_COMM_PINGPONG_TAG 0x7070

/* Round trips between ranks a and b (a != b) of comm, to measure the link between them
 * (pc_cost's latency and bandwidth): a sends bytes_ab bytes to b, which answers with
 * bytes_ba bytes (either may be 0); one untimed round trip, then reps timed ones. *rtt
 * gets the median round trip in seconds on rank a, 0 on b. Only a and b take part: every
 * other rank returns PC_OK at once with *rtt = 0. The two first exchange whether each
 * has its buffers, so an allocation failure on one side fails both instead of leaving
 * the other waiting. No other message with tag PC_COMM_PINGPONG_TAG may travel between
 * them meanwhile. Buffers are allocated and freed inside. Returns PC_OK, PC_EINVAL (a == b,
 * a rank outside comm, reps < 1, a size above INT_MAX; before any communication, on
 * every rank alike), PC_ENOMEM or PC_EMPI with a message in err. Call from one thread
 * per rank. */
int pc_comm_pingpong(MPI_Comm comm, int a, int b, size_t bytes_ab, size_t bytes_ba, int reps,
                     double *rtt, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_COMM_H */
