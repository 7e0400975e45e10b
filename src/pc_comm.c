/* pc_comm: the MPI error check every MPI call goes through, and the node-local exchange
 * for thread placement. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"

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
_Static_assert(sizeof(pc_topo_rank_t) ==
                   2 * sizeof(int) + PC_TOPO_CPUSET_LEN + PC_TOPO_MAX_THREADS * PC_TOPO_NAME_LEN,
               "pc_topo_rank_t is sent as raw bytes");

int pc_comm_plan_node(MPI_Comm comm, const pc_topo_t *topo, const pc_bind_t *bind, int nthreads,
                      const char *const names[], pc_topo_plan_t **plan, int *local_rank, char *err,
                      size_t errlen)
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
