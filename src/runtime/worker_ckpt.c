/* worker_ckpt: a worker's part of checkpoints (doc/design.md, "Checkpoints and stopping"):
 * choosing the checkpoint to resume from, restoring the chunk states from this worker's
 * file, and writing it at an iteration boundary. What a chunk saves is the mode's
 * (worker_ops_t ckpt_arrays): ps, the codec state (residual, codec momentum or a powersgd
 * matrix's Q and optimizer state, steps);
 * allreduce, the parameters and the optimizer state. Then, where the chunk's optimizer
 * state is Adam's (c->opt.v), its step count. Backprop thread only. */
#include "config.h"

#include <assert.h>
#include <stdio.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "worker_impl.h"

/* A chunk's record in a worker's checkpoint file (then its arrays, and for an Adam state
 * its optimizer steps, a uint64_t). */
typedef struct wrec {
    uint32_t id, n;
    uint32_t arrays;   /* bit i: the mode's array i follows (worker_ops_t ckpt_arrays; ps:
                          residual, codec momentum or powersgd's Q, powersgd's optimizer
                          state; allreduce: parameters, optimizer state: SGD's momentum or
                          Adam's m, v, vmax) */
    uint32_t reserved; /* 0 */
    uint64_t steps;    /* ps: codec steps (dgc warm-up) */
} wrec_t;
/* Written raw into checkpoint files: a change of layout is a new CKPT_VERSION. */
_Static_assert(sizeof(wrec_t) == 24 && offsetof(wrec_t, steps) == 16,
               "wrec_t is part of the checkpoint file format");

/* wrec_t.arrays for a chunk's arrays. */
static uint32_t arrays_mask(float *const arr[CKPT_ARRAYS])
{
    uint32_t m = 0;
    for (int i = 0; i < CKPT_ARRAYS; i++)
        m |= arr[i] ? 1u << i : 0u;
    return m;
}

int pc_rt__w_choose_resume(pc_worker_t *w, uint64_t *it)
{
    pc_runtime_t *rt = w->rt;
    wthread_t *me = &w->main;
    int64_t msg[2] = {PC_OK, 0}; /* status, iteration */
    *it = 0;
    if (!pc_rt__ckpt_on(rt))
        return PC_OK;
    if (rt->rank == 0) {
        const char *dir = rt->cfg.checkpoint_dir;
        char why[WERR_LEN];
        if (pc_ckpt_dir_create(dir, why, sizeof(why)) != PC_OK)
            msg[0] = WFAIL(rt, me, PC_EIO, "--checkpoint-dir %s", why);
        if (msg[0] == PC_OK) {
            pc_ckpt_meta_t want;
            uint64_t found = 0;
            pc_rt__ckpt_meta(rt, 0, &want);
            /* Skipped ones stay: a checkpoint of another job is not ours to delete, and a
             * damaged one is overwritten when training reaches its iteration again. */
            int rc = pc_ckpt_find(dir, &want, rt->log, 0, &found, me->err, sizeof(me->err));
            if (rc == PC_EINCOMPAT) {
                /* Refused with or without --resume: this job would overwrite the other's
                 * checkpoints of the same iterations. */
                char found_why[sizeof(me->err)];
                snprintf(found_why, sizeof(found_why), "%s", me->err);
                msg[0] = WFAIL(rt, me, rc,
                               "--checkpoint-dir: %s; resume it with that job's ranks, model "
                               "and flags, or give this job another directory",
                               found_why);
            } else if (!rt->cfg.resume) {
                me->err[0] = '\0';
            } else if (rc == PC_OK) {
                msg[1] = (int64_t)found;
                pc_log_write(rt->log, PC_LOG_INFO, NULL,
                             "resuming from the checkpoint of iteration %llu in %s",
                             (unsigned long long)found, dir);
            } else if (rc == PC_ENOENT) {
                pc_log_write(rt->log, PC_LOG_INFO, NULL,
                             "--resume: no complete checkpoint in %s; starting from iteration 0",
                             dir);
                me->err[0] = '\0';
            } else {
                msg[0] = rc;
            }
        }
    }
    char why[256];
    int rc = PC_MPI_CHECK(MPI_Bcast(msg, 2, MPI_INT64_T, 0, rt->workers), why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "agreeing on the checkpoint: %s", why);
    if (msg[0] != PC_OK) {
        /* Every worker fails with worker 0's reason, which a program says once
         * (pc_worker_error_agreed). */
        rc = PC_MPI_CHECK(MPI_Bcast(me->err, (int)sizeof(me->err), MPI_CHAR, 0, rt->workers), why,
                          sizeof(why));
        if (rc != PC_OK)
            return WFAIL(rt, me, rc, "agreeing on the checkpoint: %s", why);
        w->err_agreed = true;
        return (int)msg[0];
    }
    *it = (uint64_t)msg[1];
    return PC_OK;
}

int pc_rt__w_load(pc_worker_t *w, uint64_t it)
{
    pc_runtime_t *rt = w->rt;
    wthread_t *me = &w->main;
    pc_ckpt_reader_t *r;
    int rc = pc_rt__ckpt_open(rt, it, (uint32_t)w->nchunks, &r, me->err, sizeof(me->err));
    if (rc != PC_OK)
        return rc;
    for (int ci = 0; ci < w->nchunks && rc == PC_OK; ci++) {
        wchunk_t *c = &w->chunks[ci];
        float *arr[CKPT_ARRAYS];
        size_t len[CKPT_ARRAYS];
        w->ops->ckpt_arrays(c, arr, len);
        wrec_t rec;
        if ((rc = pc_ckpt_reader_read(r, &rec, sizeof(rec))) != PC_OK)
            break;
        /* --update workers: a file of the user's step (pc_worker_set_user_step) has no
         * optimizer state; it resumes a worker whose step the caller switches to theirs
         * after start, before its first gradient (hand_over checks). */
        uint32_t want = arrays_mask(arr), opt_bits = 0x1cu; /* arrays 2..4 */
        bool opt_in_file = true;
        if (c->params_here && (want & opt_bits) && rec.arrays == (want & ~opt_bits)) {
            arr[2] = arr[3] = arr[4] = NULL;
            want = rec.arrays;
            opt_in_file = false;
            w->resumed_user_step = true;
        }
        if (rec.id != c->id || rec.n != c->n || rec.arrays != want || rec.reserved) {
            pc_ckpt_reader_close(r, NULL, 0);
            return WFAIL(rt, me, PC_EFORMAT,
                         "checkpoint of iteration %llu: chunk %d's record does not "
                         "match this job",
                         (unsigned long long)it, ci);
        }
        for (int i = 0; i < CKPT_ARRAYS && rc == PC_OK; i++)
            if (arr[i])
                rc = pc_ckpt_reader_read(r, arr[i], sizeof(float) * len[i]);
        if (rc == PC_OK && opt_in_file && c->opt.v) /* Adam's steps (pc_optim_state_t) */
            rc = pc_ckpt_reader_read(r, &c->opt.steps, sizeof(c->opt.steps));
        if (c->st)
            pc_codec_state_set_steps(c->st, rec.steps);
    }
    char why[512];
    if (pc_ckpt_reader_close(r, why, sizeof(why)) != PC_OK)
        return WFAIL(rt, me, PC_EFORMAT, "%s", why);
    return w->device ? pc_rt__w_dev_states(w, true, me) : PC_OK;
}

/* The caller drained the pipeline (worker_impl.h): every update of the last iteration is
 * in, so no compression is in flight and none starts. */
int pc_rt__w_checkpoint(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    uint64_t it = w->iter;
    int rc;
    for (int ci = 0; ci < w->nchunks; ci++) /* drained: relaxed, the caller acquired them */
        assert(atomic_load_explicit(&w->chunks[ci].version, memory_order_relaxed) >= it);
    if (w->device && (rc = pc_rt__w_dev_states(w, false, &w->main)) != PC_OK)
        return rc;
    char why[512] = "";
    uint8_t msg[PC_RT_CKPT_BYTES];
    pc_rt__ckpt_req_encode(msg, it);
    for (int s = 0; s < rt->nservers; s++) {
        int server = pc_rt__server_rank(rt, s);
        if ((rc = PC_MPI_CHECK_PEER(
                 MPI_Send(msg, PC_RT_CKPT_BYTES, MPI_BYTE, server, TAG_CKPT, rt->comm), server, why,
                 sizeof(why))) != PC_OK)
            return WFAIL(rt, &w->main, rc, "%s", why);
    }
    pc_ckpt_writer_t *cw = NULL;
    rc = pc_rt__ckpt_begin(rt, it, (uint32_t)w->nchunks, &cw, why, sizeof(why));
    for (int ci = 0; ci < w->nchunks && rc == PC_OK; ci++) {
        wchunk_t *c = &w->chunks[ci];
        float *arr[CKPT_ARRAYS];
        size_t len[CKPT_ARRAYS];
        w->ops->ckpt_arrays(c, arr, len);
        wrec_t rec = {.id = c->id,
                      .n = (uint32_t)c->n,
                      .arrays = arrays_mask(arr),
                      .steps = c->st ? pc_codec_state_steps(c->st) : 0};
        pc_ckpt_writer_write(cw, &rec, sizeof(rec));
        for (int i = 0; i < CKPT_ARRAYS; i++)
            if (arr[i])
                pc_ckpt_writer_write(cw, arr[i], sizeof(float) * len[i]);
        if (c->opt.v)
            pc_ckpt_writer_write(cw, &c->opt.steps, sizeof(c->opt.steps));
    }
    rc = pc_rt__ckpt_finish(rt, it, cw, rc, why, w->main.err, sizeof(w->main.err));
    if (rc != PC_OK)
        return rc;
    w->last_ckpt = it;
    w->have_ckpt = true;
    return PC_OK;
}
