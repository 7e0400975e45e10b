/* worker_lowrank: a worker's side of powersgd's two rounds (pc_codec.h, "PowerSGD";
 * doc/design.md, "PowerSGD in the parameter server"). A matrix chunk's iteration, all of
 * it on the MPI thread (the compressor thread when pipelined):
 *
 *   ps_fold        the gradient folded into the residual, M = residual + gradient, and
 *                  P_w = M Q in the same pass (pc_codec_fold)
 *   ps_send_one    the folded chunk's turn (--priority order): P_w's message
 *                  (pc_rt__w_lr_first), sent by pc_worker.c, the receive of P^ posted
 *                  before the send
 *   ps_progress    P^ arrived, round 2 (ps_round2): round 1's send settled, then Q_w =
 *                  M^T P^ (pc_rt__w_lr_round2: P^ counted and validated, Q_w made,
 *                  c->lr_round 2), which pc_worker.c sends to the server at once, the
 *                  update's receive posted first; other chunks fold and send meanwhile
 *   ps_progress    the update (Q) arrived: row by row, P^ Q^T taken from the residual and
 *                  the optimizer's step on the parameters, as the server stepped its copy
 *                  (pc_rt__w_lr_update); Q kept; then the version store, as for any chunk
 *
 * Round 2 leaves at once rather than queueing behind folded chunks: its chunk is the one
 * nearest to its update, and the server holds P^ for it. Round 1's product is made by the
 * chunk's fold, in the same pass (codec_lowrank.c's fold; round 1 then only writes its
 * message); round 2's is OpenBLAS's sgemm on this thread (pc-train and the binding keep
 * OpenBLAS to one thread).
 * In the warm-up (the codec's warmup= iterations) the chunk sends M dense and its update
 * is the mean gradient, which the worker steps with in the same way.
 * With device tensors and --compress-on gpu (--device emulate: pc_devcodec's CPU path, the
 * one powersgd has) M lives in the chunk's device state (c->dst) and each round is
 * pc_devcodec's; P^ is decoded into the host state's (c->st), which otherwise carries the
 * checkpoints, and copied in by round 2.
 * A leaf of the worker's files (doc/design.md): it calls only worker_device.c's.
 *
 * Ownership: the chunk's buffers, state and requests are the MPI thread's (worker_impl.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_wire.h"
#include "worker_impl.h"

int pc_rt__w_lr_first(pc_worker_t *w, wchunk_t *c, uint64_t it, size_t *len)
{
    bool dev = pc_rt__w_dev_codec(c); /* M in the device codec's state (--compress-on gpu) */
    if (pc_codec_lowrank_warm(pc_codec_spec(c->codec), it)) {
        c->lr_round = 0; /* the update is a plain pull */
        return dev ? pc_devcodec_lowrank_dense(w->dcodec, c->dst, it, w->s_codec, c->sendbuf,
                                               c->send_cap, len)
                   : pc_codec_lowrank_dense(c->codec, c->st, it, c->sendbuf, c->send_cap, len);
    }
    int rc =
        dev ? pc_devcodec_lowrank_p(w->dcodec, c->dst, it, w->s_codec, c->sendbuf, c->send_cap, len)
            : pc_codec_lowrank_p(c->codec, c->st, it, c->sendbuf, c->send_cap, len);
    if (rc == PC_OK)
        c->lr_round = 1;
    return rc;
}

int pc_rt__w_lr_round2(pc_worker_t *w, wchunk_t *c, size_t len, size_t *out, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    uint64_t it = c->recv_it;
    size_t r = (size_t)pc_codec_spec(c->codec)->rank;
    /* P^'s bytes: relaxed, the backprop thread reads them after a version acquire */
    atomic_fetch_add_explicit(&w->recv_bytes[it % RING], len, memory_order_relaxed);
    int64_t t0 = pc_time_ns();
    int rc = pc_rt__phat_apply(c->recvbuf, len, c->id, (uint32_t)c->n, it,
                               pc_codec_state_lowrank_phat(c->st), c->rows * r, why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "rejected P^ from server r%d: %s",
                     pc_rt__server_rank(rt, c->server), why);
    /* P^ went into the host state's; a device state copies it in. */
    rc = pc_rt__w_dev_codec(c)
             ? pc_devcodec_lowrank_q(w->dcodec, c->dst, pc_codec_state_lowrank_phat(c->st), it,
                                     w->s_codec, c->sendbuf, c->send_cap, out)
             : pc_codec_lowrank_q(c->codec, c->st, it, c->sendbuf, c->send_cap, out);
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "chunk %u (tensor '%s') of iteration %llu, round 2: %s", c->id,
                     w->tensors[c->first_tensor].name, (unsigned long long)it,
                     rc == PC_ERANGE         ? "a product is NaN or infinite (training diverged)"
                     : pc_rt__w_dev_codec(c) ? pc_devcodec_error(w->dcodec)
                                             : pc_strerror(rc));
    uint64_t took = (uint64_t)(pc_time_ns() - t0);
    atomic_fetch_add_explicit(&w->comp_ns[it % RING], took, memory_order_relaxed);
    atomic_fetch_add_explicit(&me->busy_ns[it % RING], took, memory_order_relaxed);
    c->lr_round = 2; /* the next answer is the update (the caller posts its receive) */
    return PC_OK;
}

/* The optimizer's step on row i of a matrix, as its server stepped its copy. */
typedef struct lr_step {
    pc_optim_cfg_t optim;
    double lr;
    float coef;                 /* clipping's coefficient (1: none) */
    float *row;                 /* cols floats: a row clipped */
    float *p;                   /* the matrix's parameters */
    const pc_optim_state_t *st; /* and optimizer state (its steps counting this step) */
    size_t cols;
} lr_step_t;

static void step_row(void *ud, size_t i, const float *g)
{
    lr_step_t *s = ud;
    if (s->coef != 1.0f) { /* as the server scaled its rows (clip_finish) */
        memcpy(s->row, g, sizeof(float) * s->cols);
        pc_lowrank_scale(s->row, s->cols, s->coef);
        g = s->row;
    }
    pc_optim_state_t at = pc_optim_state_at(s->st, i * s->cols);
    pc_optim_step(&s->optim, s->lr, s->p + i * s->cols, &at, g, s->cols, NULL);
}

int pc_rt__w_lr_update(pc_worker_t *w, wchunk_t *c, size_t len, uint64_t *server_ns, char *why,
                       size_t whylen)
{
    pc_runtime_t *rt = w->rt;
    bool dense = c->lr_round == 0; /* the warm-up: the mean gradient */
    size_t cols = c->n / c->rows, qn = cols * (size_t)pc_codec_spec(c->codec)->rank;
    const uint8_t *v;
    rt_lrstep_t how;
    int rc = pc_rt__pull_lowrank_read(c->recvbuf, len, c->id, (uint32_t)c->n, c->recv_it, dense,
                                      w->ngroups > 0, dense ? c->n : qn, &v, server_ns, &how, why,
                                      whylen);
    if (rc != PC_OK)
        return rc;
    c->opt.steps++; /* one step of the whole matrix, row by row, as its server's */
    /* The rate: with parameter groups the one its server stepped with (worker 0's of the
     * group), else the run's schedule's. */
    lr_step_t s = {.optim = c->lr_optim,
                   .lr = how.lr >= 0 ? how.lr : pc_optim_lr(&rt->optim, (int64_t)c->recv_it),
                   .coef = how.coef,
                   .row = c->lr_row,
                   .p = c->p,
                   .st = &c->opt,
                   .cols = cols};
    if (dense) {
        for (size_t i = 0; i < c->rows; i++) {
            pc_wire_get_f32s(c->lr_row, v + 4 * i * cols, cols);
            step_row(&s, i, c->lr_row);
        }
        return PC_OK;
    }
    pc_wire_get_f32s(c->lr_q, v, qn);
    /* Round 2 came before, in order: finish refuses nothing but memory for its scratch. */
    rc = pc_rt__w_dev_codec(c)
             ? pc_devcodec_lowrank_finish(w->dcodec, c->dst, c->lr_q, step_row, &s, w->s_codec)
             : pc_codec_lowrank_finish(c->codec, c->st, c->lr_q, step_row, &s);
    c->lr_round = 0;
    if (rc != PC_OK)
        return pc_error_fmt(rc, why, whylen, "chunk %u: the update's rows: %s", c->id,
                            pc_rt__w_dev_codec(c) ? pc_devcodec_error(w->dcodec) : pc_strerror(rc));
    return PC_OK;
}
