/* runtime_ckpt: what workers and servers share to write and read checkpoints: the job's
 * identity, rank-file headers, and the collective that ends every checkpoint (each rank's
 * file committed, then rank 0's manifest, written last). See pc_ckpt.h for the files. */
#include "config.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "runtime_impl.h"

void pc_rt__ckpt_meta(const pc_runtime_t *rt, uint64_t it, pc_ckpt_meta_t *m)
{
    memset(m, 0, sizeof(*m));
    m->iteration = it;
    m->world = rt->size;
    m->workers = rt->nworkers;
    m->servers = rt->nservers;
    m->model = rt->model_hash;
    /* What the files' layout and meaning depend on, besides the model: the codec state
     * (mode, --compress, which chunks go dense), the data order (--seed) and the
     * optimizer's state (adam(w): m, v and vmax instead of SGD's momentum; nothing is added
     * for sgd, whose checkpoints keep the identity they had before --optimizer existed) and
     * where it lives (--update workers: on the workers, with the parameters; nothing is
     * added for servers, likewise). */
    const pc_optim_cfg_t *o = &rt->optim;
    snprintf(m->config, sizeof(m->config), "%s %s min-bytes=%lld seed=%lld%s%s%s%s",
             rt->cfg.mode == PC_MODE_ALLREDUCE ? "allreduce" : "ps", rt->cfg.compress,
             (long long)rt->cfg.compress_min_bytes, (long long)rt->cfg.seed,
             o->kind != PC_OPTIM_SGD ? " optimizer=" : "",
             o->kind != PC_OPTIM_SGD ? pc_optim_kind_name(o->kind) : "",
             o->kind != PC_OPTIM_SGD && o->amsgrad ? "+amsgrad" : "",
             rt->cfg.update == PC_UPDATE_WORKERS ? " update=workers" : "");
}

int pc_rt__ckpt_begin(pc_runtime_t *rt, uint64_t it, uint32_t records, pc_ckpt_writer_t **w,
                      char *err, size_t errlen)
{
    int rc = pc_ckpt_writer_open(rt->cfg.checkpoint_dir, it, rt->rank, w, err, errlen);
    if (rc != PC_OK)
        return rc;
    ckpt_header_t h = {.version = CKPT_VERSION,
                       .rank = (uint32_t)rt->rank,
                       .role = (uint32_t)rt->role,
                       .records = records,
                       .iteration = it};
    memcpy(h.magic, CKPT_MAGIC, 8);
    pc_ckpt_writer_write(*w, &h, sizeof(h));
    return PC_OK;
}

int pc_rt__ckpt_open(pc_runtime_t *rt, uint64_t it, uint32_t records, pc_ckpt_reader_t **r,
                     char *err, size_t errlen)
{
    int rc = pc_ckpt_reader_open(rt->cfg.checkpoint_dir, it, rt->rank, r, err, errlen);
    if (rc != PC_OK)
        return rc;
    ckpt_header_t h;
    bool read = pc_ckpt_reader_read(*r, &h, sizeof(h)) == PC_OK;
    if (read && memcmp(h.magic, CKPT_MAGIC, 8) == 0 && h.version != CKPT_VERSION) {
        pc_ckpt_reader_close(*r, NULL, 0);
        *r = NULL;
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "checkpoint of iteration %" PRIu64 ", rank %d: format version %u, this "
                            "build reads version %u (written by another PipeCompress)",
                            it, rt->rank, h.version, CKPT_VERSION);
    }
    if (!read || memcmp(h.magic, CKPT_MAGIC, 8) != 0 || h.rank != (uint32_t)rt->rank ||
        h.role != (uint32_t)rt->role || h.records != records || h.iteration != it) {
        pc_ckpt_reader_close(*r, NULL, 0);
        *r = NULL;
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "checkpoint of iteration %" PRIu64 ", rank %d: the file's header does "
                            "not match this rank (role, %u records)",
                            it, rt->rank, records);
    }
    return PC_OK;
}

/* One rank's outcome, as shared by pc_rt__ckpt_finish. */
typedef struct outcome {
    int32_t rc;
    uint32_t crc;
    uint64_t size;
    char why[240];
} outcome_t;
/* Gathered as raw bytes (MPI_BYTE) from every rank: no padding, one size everywhere. */
_Static_assert(sizeof(outcome_t) == CKPT_OUTCOME_BYTES && offsetof(outcome_t, why) == 16,
               "outcome_t travels as 256 raw bytes");

int pc_rt__ckpt_finish(pc_runtime_t *rt, uint64_t it, pc_ckpt_writer_t *w, int rc, const char *why,
                       char *err, size_t errlen)
{
    outcome_t mine = {.rc = rc};
    if (rc == PC_OK) {
        pc_ckpt_file_t info = {0};
        mine.rc = pc_ckpt_writer_commit(w, &info, mine.why, sizeof(mine.why));
        mine.crc = info.crc;
        mine.size = info.size;
    } else {
        pc_ckpt_writer_abort(w);
        snprintf(mine.why, sizeof(mine.why), "%s", why ? why : pc_strerror(rc));
    }
    /* Allocated with the runtime: every rank always takes part in the collective. */
    outcome_t *all = rt->ckpt_outcomes;
    char mpi[256];
    int mrc = PC_MPI_CHECK(
        MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, rt->comm), mpi,
        sizeof(mpi));
    if (mrc != PC_OK)
        return pc_error_fmt(mrc, err, errlen, "checkpoint of iteration %" PRIu64 ": %s", it, mpi);
    int out = PC_OK;
    for (int r = 0; r < rt->size && out == PC_OK; r++)
        if (all[r].rc != PC_OK)
            out = pc_error_fmt(PC_EIO, err, errlen,
                               "checkpoint of iteration %" PRIu64 " failed on rank %d: %s", it, r,
                               all[r].why);
    if (out == PC_OK && rt->rank == 0) {
        pc_ckpt_meta_t m;
        pc_rt__ckpt_meta(rt, it, &m);
        pc_ckpt_file_t *files = malloc(sizeof(pc_ckpt_file_t) * (size_t)rt->size);
        if (!files)
            return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
        for (int r = 0; r < rt->size; r++)
            files[r] = (pc_ckpt_file_t){.size = all[r].size, .crc = all[r].crc};
        out = pc_ckpt_manifest_write(rt->cfg.checkpoint_dir, &m, files, err, errlen);
        free(files);
        if (out == PC_OK) {
            char perr[512];
            if (pc_ckpt_prune(rt->cfg.checkpoint_dir, &m, it, rt->cfg.checkpoint_keep, perr,
                              sizeof(perr)) != PC_OK)
                pc_log_write(rt->log, PC_LOG_WARN, NULL, "%s", perr);
            pc_log_write(rt->log, PC_LOG_INFO, NULL,
                         "checkpoint of iteration %" PRIu64 " written to %s", it,
                         rt->cfg.checkpoint_dir);
        }
    }
    /* Only rank 0 knows whether the manifest went down; a failure there ends its run (the
     * previous checkpoint stays the newest complete one). */
    return out;
}
