/* pc_comm: the MPI error check every MPI call goes through, the node-local exchange for
 * thread placement, and the ping-pong that measures a link. */
#include "config.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_time.h"

int pc_comm_check_peer(int mpi_rc, const char *what, int peer, const char *file, int line,
                       char *err, size_t errlen)
{
    if (mpi_rc == MPI_SUCCESS)
        return PC_OK;
    char msg[MPI_MAX_ERROR_STRING] = "", who[32] = "";
    int len = 0;
    /* The one MPI call not under PC_MPI_CHECK: its failure is handled right here. */
    if (MPI_Error_string(mpi_rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof(msg), "MPI error %d", mpi_rc);
    if (peer >= 0)
        snprintf(who, sizeof(who), " (peer rank %d)", peer);
    return pc_error_fmt(PC_EMPI, err, errlen, "%s%s: %s (%s:%d)", what, who, msg, file, line);
}

int pc_comm_check(int mpi_rc, const char *what, const char *file, int line, char *err,
                  size_t errlen)
{
    return pc_comm_check_peer(mpi_rc, what, -1, file, line, err, errlen);
}

/* pc_topo_rank_t travels as MPI_BYTE between ranks of one node (same binary, same ABI):
 * plain bytes, no pointers, no padding to leak or to differ. */
_Static_assert(sizeof(pc_topo_rank_t) == 2 * sizeof(int) + 2 * PC_TOPO_CPUSET_LEN +
                                             (1 + PC_TOPO_MAX_THREADS) * PC_TOPO_NAME_LEN,
               "pc_topo_rank_t is sent as raw bytes");

int pc_comm_plan_node(MPI_Comm comm, const pc_topo_t *topo, const pc_bind_t *bind, int nthreads,
                      const char *const names[], const char *near, const char *gpu,
                      pc_topo_plan_t **plan, int *local_rank, char *err, size_t errlen)
{
    int rc, rank, lrank, lsize;
    MPI_Comm node = MPI_COMM_NULL;
    pc_topo_rank_t me, *all = NULL;

    rc = PC_MPI_CHECK(MPI_Comm_rank(comm, &rank), err, errlen);
    if (rc != PC_OK)
        return rc;
    rc = pc_topo_self(topo, rank, nthreads, names, &me);
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "rank %d: cannot read its CPU binding: %s", rank,
                            pc_strerror(rc));
    snprintf(me.near, sizeof(me.near), "%s", near ? near : "");
    snprintf(me.gpu, sizeof(me.gpu), "%s", gpu ? gpu : "");
    rc = PC_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
                      err, errlen);
    if (rc != PC_OK)
        return rc;
    if ((rc = PC_MPI_CHECK(MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN), err, errlen)) !=
            PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_rank(node, &lrank), err, errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_size(node, &lsize), err, errlen)) != PC_OK)
        goto out;
    all = malloc(sizeof(*all) * (size_t)lsize);
    /* Whether every rank of the node has its buffer: one that ran out of memory must not
     * skip the gather the others are in, so the failure is collective (same error on all). */
    int ok = all != NULL;
    rc = PC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, node), err, errlen);
    if (rc != PC_OK)
        goto out;
    if (!ok) {
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory gathering placement (on %s)",
                          all ? "another rank of this node" : "this rank");
        goto out;
    }
    rc = PC_MPI_CHECK(
        MPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, all, (int)sizeof(me), MPI_BYTE, node), err,
        errlen);
    if (rc != PC_OK)
        goto out;
    /* Every rank plans from the same records, so all get the same plan or error. */
    rc = pc_topo_plan_create(topo, bind, all, lsize, plan, err, errlen);
    if (rc == PC_OK)
        *local_rank = lrank;
out:
    free(all);
    if (node != MPI_COMM_NULL) {
        int frc =
            PC_MPI_CHECK(MPI_Comm_free(&node), rc == PC_OK ? err : NULL, rc == PC_OK ? errlen : 0);
        if (rc == PC_OK)
            rc = frc; /* the first failure's message stays */
    }
    return rc;
}

int pc_comm_pingpong(MPI_Comm comm, int a, int b, size_t bytes_ab, size_t bytes_ba, int reps,
                     double *rtt, char *err, size_t errlen)
{
    int rank, size, rc;
    if (!rtt || reps < 1 || a == b || bytes_ab > INT_MAX || bytes_ba > INT_MAX)
        return pc_error_fmt(PC_EINVAL, err, errlen, "ping-pong: bad arguments");
    *rtt = 0;
    if ((rc = PC_MPI_CHECK(MPI_Comm_rank(comm, &rank), err, errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_size(comm, &size), err, errlen)) != PC_OK)
        return rc;
    if (a < 0 || b < 0 || a >= size || b >= size)
        return pc_error_fmt(PC_EINVAL, err, errlen, "ping-pong: ranks %d and %d among %d", a, b,
                            size);
    if (rank != a && rank != b)
        return PC_OK;
    bool first = rank == a;
    int peer = first ? b : a;
    size_t out_bytes = first ? bytes_ab : bytes_ba, in_bytes = first ? bytes_ba : bytes_ab;
    /* One byte at least: malloc(0) may return NULL, which would read as a failure. */
    uint8_t *out = calloc(out_bytes + 1, 1), *in = malloc(in_bytes + 1);
    double *t = first ? malloc(sizeof(double) * (size_t)reps) : NULL;
    int ok = out && in && (!first || t), peer_ok = 0;
    rc = PC_MPI_CHECK_PEER(MPI_Sendrecv(&ok, 1, MPI_INT, peer, PC_COMM_PINGPONG_TAG, &peer_ok, 1,
                                        MPI_INT, peer, PC_COMM_PINGPONG_TAG, comm,
                                        MPI_STATUS_IGNORE),
                           peer, err, errlen);
    if (rc == PC_OK && (!ok || !peer_ok))
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "ping-pong: out of memory on rank %d",
                          ok ? peer : rank);
    for (int r = -1; r < reps && rc == PC_OK; r++) { /* r = -1: the untimed round trip */
        int64_t t0 = pc_time_ns();
        if (first) {
            rc = PC_MPI_CHECK_PEER(
                MPI_Send(out, (int)out_bytes, MPI_BYTE, peer, PC_COMM_PINGPONG_TAG, comm), peer,
                err, errlen);
            if (rc == PC_OK)
                rc = PC_MPI_CHECK_PEER(MPI_Recv(in, (int)in_bytes, MPI_BYTE, peer,
                                                PC_COMM_PINGPONG_TAG, comm, MPI_STATUS_IGNORE),
                                       peer, err, errlen);
            if (r >= 0)
                t[r] = (double)(pc_time_ns() - t0) * 1e-9;
        } else {
            rc = PC_MPI_CHECK_PEER(MPI_Recv(in, (int)in_bytes, MPI_BYTE, peer, PC_COMM_PINGPONG_TAG,
                                            comm, MPI_STATUS_IGNORE),
                                   peer, err, errlen);
            if (rc == PC_OK)
                rc = PC_MPI_CHECK_PEER(
                    MPI_Send(out, (int)out_bytes, MPI_BYTE, peer, PC_COMM_PINGPONG_TAG, comm), peer,
                    err, errlen);
        }
    }
    if (rc == PC_OK && first) {
        *rtt = pc_time_median(t, (size_t)reps);
    }
    free(out);
    free(in);
    free(t);
    return rc;
}

int pc_comm_agree(MPI_Comm comm, int rc, char *msg, size_t msglen, int *who)
{
    int rank = 0, size = 0, mrc;
    char buf[PC_COMM_AGREE_LEN];
    if (who)
        *who = -1;
    if ((mrc = PC_MPI_CHECK(MPI_Comm_rank(comm, &rank), msg, msglen)) != PC_OK ||
        (mrc = PC_MPI_CHECK(MPI_Comm_size(comm, &size), msg, msglen)) != PC_OK)
        return mrc;
    /* The lowest failing rank: MIN over (failed ? rank : size). */
    int first = rc == PC_OK ? size : rank;
    if ((mrc = PC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), msg,
                            msglen)) != PC_OK)
        return mrc;
    if (first == size)
        return PC_OK;
    int code[1] = {rc};
    if (rank == first)
        snprintf(buf, sizeof(buf), "%s", msglen ? msg : "");
    if ((mrc = PC_MPI_CHECK(MPI_Bcast(code, 1, MPI_INT, first, comm), msg, msglen)) != PC_OK ||
        (mrc = PC_MPI_CHECK(MPI_Bcast(buf, (int)sizeof(buf), MPI_CHAR, first, comm), msg,
                            msglen)) != PC_OK)
        return mrc;
    buf[sizeof(buf) - 1] = '\0'; /* as the failing rank sent it */
    if (msglen)
        snprintf(msg, msglen, "%s", buf);
    if (who)
        *who = first;
    return code[0];
}

int pc_comm_hosts(MPI_Comm comm, char *hosts, char *err, size_t errlen)
{
    char me[PC_COMM_HOST_LEN] = {0};
    int size = 0, rc;
    if (gethostname(me, sizeof(me) - 1) != 0)
        snprintf(me, sizeof(me), "?");
    if ((rc = PC_MPI_CHECK(MPI_Comm_size(comm, &size), err, errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(
             MPI_Allgather(me, PC_COMM_HOST_LEN, MPI_CHAR, hosts, PC_COMM_HOST_LEN, MPI_CHAR, comm),
             err, errlen)) != PC_OK)
        return rc;
    for (int r = 0; r < size; r++) /* a peer's name arrives as it sent it */
        hosts[(size_t)r * PC_COMM_HOST_LEN + PC_COMM_HOST_LEN - 1] = '\0';
    return PC_OK;
}
