/* pc_server: the parameter-server loop.
 *
 * A server owns some chunks of the model (pc_plan). For each owned chunk and iteration it
 * collects one compressed gradient from every worker, then aggregates them, steps the
 * optimizer on the chunk's parameters and pushes the updated parameters to every worker.
 *
 * - Receiving: MPI_Improbe on any source and tag, then MPI_Mrecv into a buffer of the
 *   probed size: messages of any size, no preposted buffers. Every message is validated
 *   completely on arrival (sender is a worker, chunk is ours, iteration is the chunk's
 *   current one, not a duplicate, and the codec's full payload check) before anything of
 *   the server's is touched; a bad one ends the run with an error naming the sender.
 * - Aggregation order does not depend on arrival order: a chunk's messages are kept until
 *   all workers' are in, then decoded into the sum in worker-rank order, each scaled by
 *   1/W: the mean gradient, bit for bit the same in every run.
 * - Chunks progress independently: each has its own buffers and iteration counter, so a
 *   slow chunk holds up only itself. With --priority forward (the default) a chunk whose
 *   gradients are all in is aggregated once no message is waiting, or after the next
 *   message received if messages keep coming, lowest chunk id first: the workers' next
 *   forward pass needs the first layers first. With fifo, at once.
 * - Idle: the loop backs off (spin, yield, then naps up to 1 ms; 100 us while a chunk is
 *   partly in, PARTIAL_NAP_NS): an idle server costs next to nothing. A wait with no
 *   message for --timeout seconds is an error naming what was awaited.
 * - Work in proportion to what was sent: when the step is plain SGD (momentum 0 and weight
 *   decay 0: the default with the sparsifiers' momentum correction on the workers) and the
 *   chunk's codec is a sparsifier, the chunk's aggregate is summed sparsely (the same
 *   additions in the same worker order, recording the touched indices), only the touched
 *   parameters are stepped and only those aggregate entries cleared: O(nnz), not O(n),
 *   and bitwise the parameters of the dense path (an untouched entry's step there is
 *   p - lr * 0 = p). With --adam-moments lazy, Adam or AdamW on a sparsifier's chunk takes
 *   the same path and steps only the touched entries (pc_optim_adam_lazy: m, v and the
 *   parameter of the entries that arrived, the chunk's step count moving every iteration).
 *   Any other combination (server momentum, weight decay, dense Adam or AdamW, whose
 *   moments move every entry, dense codecs) takes the dense path: clear, decode and step
 *   all n entries. The metrics line says which: "touched" entries aggregated and
 *   stepped, "changed" parameters.
 * - Pushback (--pull): dense parameters, or only the entries that changed when they are
 *   few (plain SGD on sparse gradients); workers end up bitwise identical either way.
 * - --update workers: the server only sums. It holds no parameters and no optimizer state
 *   (no initial parameters are sent to it, its checkpoint files hold no records): each
 *   chunk's aggregate is the dense path's mean gradient, bit for bit the one its step would
 *   have used, and goes back to every worker dense (pc_rt__pull_lowrank_encode's dense
 *   form, the powersgd warm-up's message); the workers step with pc_optim_step.
 * - Clipping by the global norm (--clip-grad-norm every iteration; with parameter groups
 *   the iterations whose TAG_CLIP carries a max-norm: the binding's opt.clip_grad_norm_):
 *   the iteration's chunks are only summed as they become ready (clip_sum: the aggregate
 *   and its sum of squares in double); once all of this server's are, the servers that own
 *   chunks allgather their sums (clip_finish), each computes torch's coefficient from the
 *   same total, scales its aggregates, then steps and pushes them in chunk order. Such an
 *   iteration's steps no longer overlap the backward pass. With groups the chunks of the
 *   run's first iteration, and of every one after an iteration that clipped, wait for
 *   every worker's TAG_CLIP (0: no clipping); the others go as before, bit for bit. */
#include "config.h"

#include <assert.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_time.h"
#include "runtime_impl.h"

typedef struct schunk {
    uint32_t id;
    size_t n;
    const pc_codec_t *codec; /* the run's codec, or "none" for a small chunk */
    pc_optim_cfg_t optim;    /* the run's step; for a small chunk of a run whose momentum is
                                the workers' (chunk_optim), with that momentum */
    float *p, *agg;          /* agg: all zero between iterations on the sparse path */
    pc_optim_state_t st;     /* the optimizer's (SGD momentum; Adam's m, v, vmax, steps) */
    uint32_t group;          /* its parameter group (TAG_GROUPS; 0 without) */
    uint32_t *changed;       /* dense path: n entries; NULL on the sparse path */
    bool sparse;             /* the O(nnz) path (see the top of the file) */
    rt_sparse_t sp;          /* its index lists */
    uint8_t **msgs;          /* per worker: this iteration's message (owned), or NULL */
    rt_grad_t *grads;        /* per worker: msgs[w] validated (pc_rt__grad_read and _check) */
    int have;
    uint64_t it; /* iteration being collected */
    uint8_t *pull;
    MPI_Request *sends; /* per worker */
    /* A powersgd matrix (pc_rt__chunk_lowrank; else lowrank false and these NULL): its
     * iterations after the warm-up run two rounds (round: the one being collected). */
    bool lowrank;
    int round; /* 1: the P_w, 2: the Q_w */
    size_t rows, cols;
    float *fac;          /* rows x rank: the P_w's sum, then P^ (through round 2) */
    float *qagg;         /* cols x rank: Q = sum Q_w / W */
    double *work;        /* the orthonormalisation's */
    float *rows_work;    /* Q^T and one row of P^ Q^T (pc_lowrank_expand_work floats) */
    uint8_t *phat;       /* P^'s message to the workers */
    MPI_Request *psends; /* per worker: P^'s sends */
    int64_t round1_ns;   /* the server's time on round 1 (part of the pull's server time) */
    uint64_t round1_in;  /* round 1's bytes received (the iteration's metrics) */
    uint64_t round1_out; /* round 1's bytes sent: P^ to every worker */
    /* Clipping (an iteration with a max-norm, clip_max): summed, the chunk's aggregate is
     * in agg (its messages kept for the metrics) and sumsq its sum of squares, awaiting
     * the iteration's other chunks and the servers' exchange (clip_finish); agg_ns the
     * aggregation's time. */
    bool summed;
    double sumsq;
    int64_t agg_ns;
} schunk_t;

/* One iteration's learning rates from every worker (parameter groups: server_t.lrslot). */
typedef struct lrslot {
    uint64_t it; /* the iteration; UINT64_MAX: none yet */
    int n;       /* workers whose rates of `it` are in */
    bool *have;  /* per worker */
    double *lrs; /* nworkers x ngroups: worker w's rates at w * ngroups */
    /* An iteration that may clip (clip_wait): the workers' TAG_CLIP of it */
    int nclip;        /* workers whose max-norm of `it` is in */
    bool *clip_have;  /* per worker */
    double *clip_max; /* per worker: its max-norm (0: no clipping) */
} lrslot_t;

typedef struct server {
    pc_runtime_t *rt;
    pc_codec_t *codec;
    pc_codec_t *codec_dense; /* chunks under --compress-min-bytes */
    int nchunks_total;
    int nmine;
    schunk_t *mine;
    int *local; /* chunk id -> index in mine, or -1 */
    int nready; /* --priority forward: chunks with every worker's gradient, not completed */
    /* Per-iteration metrics, two slots: chunks are at most one iteration apart. */
    struct {
        uint64_t it;
        int done;
        double t_aggregate, t_update, t_push;
        uint64_t bytes_in, bytes_out;
        uint64_t touched, changed; /* entries aggregated and stepped; parameters changed */
    } slot[2];
    /* The message loop's state (pc_server_run). */
    int done;         /* workers that sent their end message */
    bool *finished;   /* per worker: sent its end message */
    bool *ckpt_from;  /* per worker: asked for the pending checkpoint */
    int ckpt_n;       /* how many have */
    uint64_t ckpt_it; /* the iteration they asked for */
    int64_t last;     /* pc_time_ns of the last progress: --timeout counts from it */
    /* Parameter groups (TAG_GROUPS before the layout; ngroups 0: none, the run's own rule
     * and schedule): each chunk steps with its group's rule and, at iteration it, its
     * group's rate from worker 0's TAG_LR of it; a chunk is ready once every worker's
     * gradient and every worker's rates of its iteration are in (the rates of all workers,
     * so that a worker whose differ is refused whatever the arrival order). Two slots, by
     * it & 1: chunks are at most one iteration apart. */
    uint32_t ngroups;
    uint64_t *lr_next; /* per worker: the iteration its next TAG_LR must carry */
    lrslot_t lrslot[2];
    /* Clipping by the global norm (--clip-grad-norm: every iteration; with parameter groups
     * the iterations whose TAG_CLIP carries a max-norm): every chunk of the iteration is
     * summed first (nsummed of nmine), then the servers that own chunks (clip_comm, in
     * server order; MPI_COMM_NULL when the run cannot clip or this server owns none)
     * allgather their sums of squares (clip_all) and each scales and steps its chunks.
     * With groups the iterations that may clip are the run's first (first_it) and every
     * one after an iteration that clipped (clip_on), as the workers count them. */
    MPI_Comm clip_comm;
    int clip_rank, clip_size;
    double *clip_all;
    double clip_mine; /* the allgather's send buffer: this server's sum of squares */
    double clip_norm; /* the last clipped iteration's norm (its metrics line) */
    float clip_f;     /* the coefficient while clip_finish completes its chunks (1 outside),
                         which a matrix's round-2 update tells the workers */
    int nsummed;
    uint64_t first_it;
    bool clip_on;
} server_t;

/* Whether this run's servers step the optimizer (--update servers), or only sum and push
 * the mean gradient (--update workers: no parameters, no optimizer state here). */
static bool server_steps(const server_t *s)
{
    return s->rt->cfg.update == PC_UPDATE_SERVERS;
}

static void server_free(server_t *s)
{
    for (int i = 0; i < s->nmine; i++) {
        schunk_t *c = &s->mine[i];
        free(c->p);
        pc_optim_state_free(&c->st);
        free(c->agg);
        free(c->changed);
        pc_rt__sparse_free(&c->sp);
        if (c->msgs)
            for (int w = 0; w < s->rt->nworkers; w++)
                free(c->msgs[w]);
        free(c->msgs);
        free(c->grads);
        free(c->pull);
        free(c->sends);
        free(c->fac);
        free(c->qagg);
        free(c->work);
        free(c->rows_work);
        free(c->phat);
        free(c->psends);
    }
    free(s->mine);
    free(s->local);
    free(s->finished);
    free(s->ckpt_from);
    free(s->lr_next);
    for (int i = 0; i < 2; i++) {
        free(s->lrslot[i].have);
        free(s->lrslot[i].lrs);
        free(s->lrslot[i].clip_have);
        free(s->lrslot[i].clip_max);
    }
    free(s->clip_all);
    if (s->clip_comm != MPI_COMM_NULL) {
        char why[256];
        if (PC_MPI_CHECK(MPI_Comm_free(&s->clip_comm), why, sizeof(why)) != PC_OK)
            pc_log_write(s->rt->log, PC_LOG_WARN, NULL, "server r%d: %s", s->rt->rank, why);
    }
    pc_codec_destroy(s->codec);
    pc_codec_destroy(s->codec_dense);
}

/* Wait for a message (source, tag: MPI_ANY_TAG allowed) with the run's timeout, then
 * receive it whole into a new buffer (*buf, *len); *tag_out (may be NULL) gets its tag. */
static int recv_any_size(server_t *s, int source, int tag, uint8_t **buf, int *len, int *tag_out,
                         const char *what, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int64_t start = pc_time_ns(), limit = (int64_t)(rt->cfg.timeout * 1e9);
    pc_backoff_t b;
    pc_backoff_init(&b);
    MPI_Message m;
    MPI_Status st;
    for (;;) {
        int flag = 0, rc;
        if ((rc = PC_MPI_CHECK(MPI_Improbe(source, tag, rt->comm, &flag, &m, &st), err, errlen)))
            return rc;
        if (flag)
            break;
        if (pc_time_ns() - start > limit)
            return pc_error_fmt(PC_ETIMEDOUT, err, errlen,
                                "server r%d: timed out after %g s waiting for %s", rt->rank,
                                rt->cfg.timeout, what);
        pc_backoff_pause(&b);
    }
    int rc = PC_MPI_CHECK_PEER(MPI_Get_count(&st, MPI_BYTE, len), st.MPI_SOURCE, err, errlen);
    if (rc != PC_OK)
        return rc;
    if (tag_out)
        *tag_out = st.MPI_TAG;
    *buf = malloc(*len > 0 ? (size_t)*len : 1);
    if (!*buf)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "server r%d: out of memory for %s", rt->rank,
                            what);
    return PC_MPI_CHECK_PEER(MPI_Mrecv(*buf, *len, MPI_BYTE, &m, MPI_STATUS_IGNORE), st.MPI_SOURCE,
                             err, errlen);
}

static int server_load(server_t *s, uint64_t it, char *err, size_t errlen);

/* Chunk k (rows: the layout's) as a powersgd matrix when it is one: its factors' buffers,
 * the P^ message and its sends. */
static int lowrank_setup(server_t *s, schunk_t *k, uint32_t rows, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    if (!pc_rt__chunk_lowrank(rt, rows, k->n))
        return PC_OK;
    size_t r = (size_t)rt->spec.rank;
    k->lowrank = true;
    k->round = 1;
    k->rows = rows;
    k->cols = k->n / rows;
    k->fac = malloc(sizeof(float) * k->rows * r);
    k->qagg = malloc(sizeof(float) * k->cols * r);
    k->work = malloc(sizeof(double) * pc_lowrank_work_doubles(k->rows, rt->spec.rank));
    k->rows_work = malloc(sizeof(float) * pc_lowrank_expand_work(k->cols, rt->spec.rank));
    k->phat = malloc(pc_rt__phat_bytes(k->rows * r));
    k->psends = malloc(sizeof(MPI_Request) * (size_t)rt->nworkers);
    if (!k->fac || !k->qagg || !k->work || !k->rows_work || !k->phat || !k->psends)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "server r%d: out of memory for chunk %u",
                            rt->rank, k->id);
    for (int w = 0; w < rt->nworkers; w++)
        k->psends[w] = MPI_REQUEST_NULL;
    return PC_OK;
}

/* Chunk c of the layout (n elements, rows: a powersgd matrix's, else 0), this server's:
 * its codec, step and buffers. */
static int chunk_setup(server_t *s, schunk_t *k, uint32_t c, uint32_t n, uint32_t rows,
                       const rt_groups_t *groups, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    k->id = c;
    k->n = n;
    k->codec = pc_rt__chunk_plain(rt, rows, n) ? s->codec_dense : s->codec;
    k->optim = pc_rt__chunk_optim(rt, n);
    if (groups) { /* its group's rule, with the small chunks' momentum as chunk_optim's */
        pc_optim_cfg_t base;
        k->group = pc_rt__groups_chunk(groups, c);
        pc_rt__groups_get(groups, k->group, &base);
        k->optim = pc_rt__chunk_optim_from(rt, &base, n);
        /* --adam-moments, --adam-freeze-after: the run's (pc.init's flags), not a group's;
         * where not given, the codec's defaults for the groups' optimizer (the spec as
         * server_first left it: a warm-up the workers gave included) */
        k->optim.lazy = pc_config_adam_moments(&rt->cfg, base.kind) == PC_ADAM_MOMENTS_LAZY;
        k->optim.freeze_after = pc_config_adam_freeze_after(&rt->cfg);
    }
    int rc = lowrank_setup(s, k, rows, err, errlen);
    if (rc != PC_OK)
        return rc;
    bool steps = server_steps(s); /* --update workers: agg, messages and the pull only */
    k->sparse = steps && (pc_optim_sparse_friendly(&k->optim) || pc_optim_lazy(&k->optim)) &&
                pc_rt__grad_sparse(k->codec);
    k->p = steps ? malloc(sizeof(float) * n) : NULL;
    int orc = steps ? pc_optim_state_alloc(&k->optim, n, &k->st) : PC_OK;
    k->agg = k->sparse ? calloc(n, sizeof(float)) : malloc(sizeof(float) * n);
    k->changed = k->sparse || !steps ? NULL : malloc(sizeof(uint32_t) * n);
    k->msgs = calloc((size_t)rt->nworkers, sizeof(uint8_t *));
    k->grads = calloc((size_t)rt->nworkers, sizeof(rt_grad_t));
    /* A matrix's update: Q, or in the warm-up its n-float mean gradient. */
    k->pull = malloc(
        k->lowrank ? pc_rt__pull_lowrank_bytes(
                         rt->spec.warmup > 0 ? n : k->cols * (size_t)rt->spec.rank, groups != NULL)
                   : pc_rt__pull_max_bytes(n));
    k->sends = malloc(sizeof(MPI_Request) * (size_t)rt->nworkers);
    if ((steps && !k->p) || orc != PC_OK || !k->agg || (steps && !k->sparse && !k->changed) ||
        !k->msgs || !k->grads || !k->pull || !k->sends)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "server r%d: out of memory for chunk %u",
                            rt->rank, c);
    for (int w = 0; w < rt->nworkers; w++)
        k->sends[w] = MPI_REQUEST_NULL;
    return PC_OK;
}

/* The initial parameters of this server's chunks, in chunk order (messages between a pair
 * keep their order): from worker 0 on a fresh start; resuming, from the checkpointed shard
 * to worker 0. Each passes through the chunk's aggregate (n floats, pc_rt__init_bytes(n)),
 * unused until the first aggregation and zeroed after (the sparse path keeps it all zero
 * between iterations): a powersgd matrix's pull buffer holds Q only. --update workers: none
 * (the parameters are the workers' alone; resuming restores only the iteration). */
static int initial_params(server_t *s, uint64_t resume, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int rc = PC_OK;
    char why[256];
    if (resume && (rc = server_load(s, resume, err, errlen)) != PC_OK)
        return rc;
    if (!server_steps(s))
        return PC_OK;
    for (int i = 0; i < s->nmine && rc == PC_OK; i++) {
        schunk_t *k = &s->mine[i];
        uint8_t *buf = (uint8_t *)k->agg;
        if (resume) {
            pc_rt__init_encode(buf, k->p, k->n);
            rc = PC_MPI_CHECK_PEER(
                MPI_Send(buf, (int)pc_rt__init_bytes(k->n), MPI_BYTE, 0, TAG_INIT, rt->comm), 0,
                err, errlen);
            memset(k->agg, 0, sizeof(float) * k->n);
            continue;
        }
        MPI_Status st;
        int count = 0;
        rc = PC_MPI_CHECK_PEER(
            MPI_Recv(buf, (int)pc_rt__init_bytes(k->n), MPI_BYTE, 0, TAG_INIT, rt->comm, &st), 0,
            err, errlen);
        if (rc == PC_OK)
            rc = PC_MPI_CHECK_PEER(MPI_Get_count(&st, MPI_BYTE, &count), 0, err, errlen);
        if (rc != PC_OK)
            return rc;
        rc = pc_rt__init_apply(buf, (size_t)count, k->id, k->p, k->n, why, sizeof(why));
        memset(k->agg, 0, sizeof(float) * k->n);
        if (rc != PC_OK)
            return pc_error_fmt(rc, err, errlen,
                                "server r%d: rejected initial parameters from worker r0: %s",
                                rt->rank, why);
    }
    return rc;
}

/* The parameter groups' tables (TAG_GROUPS, validated in g): the rates' slots and the
 * workers' next iterations, and the run's optimizer kind (rt->optim.kind: the checkpoint
 * identity) set to the groups'. */
static int groups_setup(server_t *s, const rt_groups_t *g, uint64_t resume, char *err,
                        size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    size_t W = (size_t)rt->nworkers;
    s->ngroups = g->ngroups;
    s->lr_next = malloc(sizeof(uint64_t) * W);
    for (int i = 0; i < 2; i++) {
        s->lrslot[i].have = calloc(W, sizeof(bool));
        s->lrslot[i].lrs = malloc(sizeof(double) * W * g->ngroups);
        s->lrslot[i].it = UINT64_MAX; /* no iteration */
        s->lrslot[i].clip_have = calloc(W, sizeof(bool));
        s->lrslot[i].clip_max = calloc(W, sizeof(double));
        if (!s->lrslot[i].have || !s->lrslot[i].lrs || !s->lrslot[i].clip_have ||
            !s->lrslot[i].clip_max)
            s->lr_next = (free(s->lr_next), NULL);
    }
    if (!s->lr_next)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "server r%d: out of memory", rt->rank);
    for (size_t w = 0; w < W; w++)
        s->lr_next[w] = resume;
    rt->optim.kind = (pc_optim_kind_t)g->kind;
    return PC_OK;
}

/* The servers' clipping exchange (server_t.clip_comm) when the run may clip
 * (--clip-grad-norm, or parameter groups, whose iterations may): the servers that own
 * chunks of the layout, in server order; a server without chunks takes no part (it would
 * not know the iterations). Collective over rt->servers: every server calls it once, right
 * after the layout (the same on all: the flags, and the groups go to every server). */
static int clip_setup(server_t *s, const rt_layout_t *layout, bool groups, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    s->first_it = layout->resume;
    if (!(rt->cfg.clip_grad_norm > 0) && !groups)
        return PC_OK; /* no clipping: not a message, not a collective more than before */
    int me = rt->rank - rt->nworkers, rc;
    bool owns = false;
    for (uint32_t c = 0; c < layout->nchunks && !owns; c++) {
        uint32_t n, rows;
        int owner;
        pc_rt__layout_chunk(layout, c, &n, &owner, &rows);
        owns = owner == me;
    }
    if ((rc = PC_MPI_CHECK(
             MPI_Comm_split(rt->servers, owns ? 0 : MPI_UNDEFINED, rt->rank, &s->clip_comm), err,
             errlen)) != PC_OK ||
        s->clip_comm == MPI_COMM_NULL)
        return rc;
    if ((rc = PC_MPI_CHECK(MPI_Comm_set_errhandler(s->clip_comm, MPI_ERRORS_RETURN), err,
                           errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_rank(s->clip_comm, &s->clip_rank), err, errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_size(s->clip_comm, &s->clip_size), err, errlen)) != PC_OK)
        return rc;
    if (!(s->clip_all = malloc(sizeof(double) * (size_t)s->clip_size)))
        return pc_error_fmt(PC_ENOMEM, err, errlen, "server r%d: out of memory", rt->rank);
    return PC_OK;
}

/* Worker 0's first message into *lay (owned by the caller), *len and *tag; a TAG_WARMUP
 * first is taken here and the next message returned instead: the workers gave the codec
 * its default warm-up, so this server's spec takes it too (its validation and, for
 * powersgd, its rounds follow the spec) and its codecs are made again. Before the layout:
 * no chunk holds a codec yet. */
static int server_first(server_t *s, uint8_t **lay, int *len, int *tag, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    char why[160];
    int rc = recv_any_size(s, 0, MPI_ANY_TAG, lay, len, tag, "the model layout from worker r0", err,
                           errlen);
    if (rc != PC_OK || *tag != TAG_WARMUP)
        return rc;
    int warmup = 0;
    rc = pc_rt__warmup_parse(*lay, (size_t)*len, &warmup, why, sizeof(why));
    free(*lay);
    *lay = NULL;
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "server r%d: malformed warm-up message from r0: %s",
                            rt->rank, why);
    if (pc_config_codec_adam_warmup(&rt->cfg) != 1)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "server r%d: worker r0 gave the codec a warm-up of %d iterations, but "
                            "this server's --compress %s takes none or gives its own",
                            rt->rank, warmup, rt->cfg.compress);
    pc_rt__spec_update(rt); /* warmup= or dense=1000 added: the one value the parser accepts */
    pc_codec_destroy(s->codec);
    pc_codec_destroy(s->codec_dense);
    s->codec = s->codec_dense = NULL;
    if ((rc = pc_rt__codecs_create(rt, &s->codec, &s->codec_dense)) != PC_OK)
        return pc_error_fmt(rc, err, errlen, "server r%d: cannot create the codec", rt->rank);
    return recv_any_size(s, 0, MPI_ANY_TAG, lay, len, tag, "the model layout from worker r0", err,
                         errlen);
}

/* Receive the plan (and before it, when the workers gave the codec its warm-up or chose
 * the step's placement, those, then with parameter groups, their table) and this server's
 * chunks' initial parameters from worker 0. */
static int server_setup(server_t *s, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    uint8_t *lay = NULL, *grp = NULL;
    int len = 0, glen = 0, tag = 0, rc;
    /* Worker 0's first message: the placement, the groups (then the layout: one sender's
     * messages keep their order) or the layout. */
    if ((rc = server_first(s, &lay, &len, &tag, err, errlen)) != PC_OK) {
        free(lay);
        return rc;
    }
    if (tag == TAG_UPDATE) { /* the workers chose the placement: theirs, not our flags' */
        char why[128];
        int update;
        rc = pc_rt__update_parse(lay, (size_t)len, &update, why, sizeof(why));
        free(lay);
        lay = NULL;
        if (rc != PC_OK)
            return pc_error_fmt(rc, err, errlen, "server r%d: malformed update message from r0: %s",
                                rt->rank, why);
        /* Read by this thread alone (the server has no other). */
        rt->cfg.update = update;
        if ((rc = recv_any_size(s, 0, MPI_ANY_TAG, &lay, &len, &tag,
                                "the model layout from worker r0", err, errlen)) != PC_OK)
            return rc;
    }
    if (tag == TAG_GROUPS) {
        grp = lay, glen = len, lay = NULL;
        if ((rc = recv_any_size(s, 0, MPI_ANY_TAG, &lay, &len, &tag,
                                "the model layout from worker r0", err, errlen)) != PC_OK) {
            free(grp);
            return rc;
        }
    }
    rt_layout_t layout;
    rt_groups_t groups = {0};
    char why[256];
    if (tag != TAG_LAYOUT)
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why), "tag %d where the layout was due", tag);
    else
        rc = pc_rt__layout_parse(lay, (size_t)len, rt->nservers, &layout, why, sizeof(why));
    if (rc == PC_OK && grp) {
        rc = pc_rt__groups_parse(grp, (size_t)glen, &groups, why, sizeof(why));
        if (rc == PC_OK && groups.nchunks != layout.nchunks)
            rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why),
                              "the groups name %u chunks, the layout %u", groups.nchunks,
                              layout.nchunks);
        if (rc == PC_OK && !server_steps(s))
            rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why),
                              "parameter groups, but the step is on the workers");
    }
    if (rc != PC_OK) {
        free(lay);
        free(grp);
        return pc_error_fmt(rc, err, errlen, "server r%d: malformed layout message from r0: %s",
                            rt->rank, why);
    }
    if (grp && (rc = groups_setup(s, &groups, layout.resume, err, errlen)) != PC_OK) {
        free(lay);
        free(grp);
        return rc;
    }
    int nc = (int)layout.nchunks;
    uint64_t resume = layout.resume;
    int me = rt->rank - rt->nworkers;
    s->nchunks_total = nc;
    s->local = malloc(sizeof(int) * (size_t)(nc ? nc : 1));
    s->mine = calloc((size_t)(nc ? nc : 1), sizeof(schunk_t));
    if (!s->local || !s->mine) {
        free(lay);
        free(grp);
        return pc_error_fmt(PC_ENOMEM, err, errlen, "server r%d: out of memory", rt->rank);
    }
    if ((rc = clip_setup(s, &layout, grp != NULL, err, errlen)) != PC_OK) {
        free(lay);
        free(grp);
        return rc;
    }
    for (int c = 0; c < nc && rc == PC_OK; c++) {
        uint32_t n, rows;
        int owner;
        pc_rt__layout_chunk(&layout, (uint32_t)c, &n, &owner, &rows);
        s->local[c] = -1;
        if (owner != me)
            continue;
        s->local[c] = s->nmine;
        rc = chunk_setup(s, &s->mine[s->nmine++], (uint32_t)c, n, rows, grp ? &groups : NULL, err,
                         errlen);
    }
    free(lay); /* layout's and groups' views of them end here */
    free(grp);
    return rc == PC_OK ? initial_params(s, resume, err, errlen) : rc;
}

/* ---- checkpoints ------------------------------------------------------------------------ */

/* A chunk's record in a server's checkpoint file; then its parameters, the optimizer state's
 * arrays that bit i of `arrays` names (pc_optim_state_arrays' order: SGD's momentum or
 * Adam's m, then v, vmax), and for Adam (bit 1, v) its step count (uint64_t). `arrays` was
 * has_mom (0 or 1: the same bits), so SGD's records are as they were. */
typedef struct srec {
    uint32_t id, n, arrays, pad;
} srec_t;
/* Written raw into checkpoint files: a change of layout is a new CKPT_VERSION. */
_Static_assert(sizeof(srec_t) == 16, "srec_t is part of the checkpoint file format");

/* srec_t.arrays of an optimizer state. */
static uint32_t state_mask(const pc_optim_state_t *st)
{
    float *arr[PC_OPTIM_STATE_ARRAYS];
    pc_optim_state_arrays(st, arr);
    uint32_t m = 0;
    for (int i = 0; i < PC_OPTIM_STATE_ARRAYS; i++)
        m |= arr[i] ? 1u << i : 0u;
    return m;
}

/* Restore every owned chunk's parameters, optimizer state and iteration from checkpoint
 * it. */
static int server_load(server_t *s, uint64_t it, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    pc_ckpt_reader_t *r;
    int nrec = server_steps(s) ? s->nmine : 0; /* --update workers: nothing but the iteration */
    int rc = pc_rt__ckpt_open(rt, it, (uint32_t)nrec, &r, err, errlen);
    if (rc != PC_OK)
        return rc;
    for (int i = nrec; i < s->nmine; i++)
        s->mine[i].it = it;
    for (int i = 0; i < nrec && rc == PC_OK; i++) {
        schunk_t *k = &s->mine[i];
        srec_t rec;
        if ((rc = pc_ckpt_reader_read(r, &rec, sizeof(rec))) != PC_OK)
            break;
        if (rec.id != k->id || rec.n != k->n || rec.arrays != state_mask(&k->st)) {
            pc_ckpt_reader_close(r, NULL, 0);
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "server r%d: checkpoint of iteration %llu: chunk %u's record does "
                                "not match this job",
                                rt->rank, (unsigned long long)it, k->id);
        }
        rc = pc_ckpt_reader_read(r, k->p, sizeof(float) * k->n);
        float *arr[PC_OPTIM_STATE_ARRAYS];
        pc_optim_state_arrays(&k->st, arr);
        for (int a = 0; a < PC_OPTIM_STATE_ARRAYS && rc == PC_OK; a++)
            if (arr[a])
                rc = pc_ckpt_reader_read(r, arr[a], sizeof(float) * k->n);
        if (rc == PC_OK && k->st.v)
            rc = pc_ckpt_reader_read(r, &k->st.steps, sizeof(k->st.steps));
        k->it = it;
    }
    char why[512];
    if (pc_ckpt_reader_close(r, why, sizeof(why)) != PC_OK)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "server r%d: %s", rt->rank, why);
    return PC_OK;
}

/* Every worker asked for the checkpoint of iteration it: every owned chunk has completed
 * iteration it - 1 and holds no gradient of iteration it (workers send those only after
 * the checkpoint's collective). Write the shard, join the collective. */
static int server_checkpoint(server_t *s, uint64_t it, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    for (int i = 0; i < s->nmine; i++)
        if (s->mine[i].it != it || s->mine[i].have)
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "server r%d: checkpoint of iteration %llu requested while chunk %u "
                                "is at iteration %llu",
                                rt->rank, (unsigned long long)it, s->mine[i].id,
                                (unsigned long long)s->mine[i].it);
    char why[512] = "";
    pc_ckpt_writer_t *cw = NULL;
    int nrec = server_steps(s) ? s->nmine : 0; /* --update workers: a file of no records */
    int rc = pc_rt__ckpt_begin(rt, it, (uint32_t)nrec, &cw, why, sizeof(why));
    for (int i = 0; i < nrec && rc == PC_OK; i++) {
        schunk_t *k = &s->mine[i];
        srec_t rec = {.id = k->id, .n = (uint32_t)k->n, .arrays = state_mask(&k->st)};
        pc_ckpt_writer_write(cw, &rec, sizeof(rec));
        pc_ckpt_writer_write(cw, k->p, sizeof(float) * k->n);
        float *arr[PC_OPTIM_STATE_ARRAYS];
        pc_optim_state_arrays(&k->st, arr);
        for (int a = 0; a < PC_OPTIM_STATE_ARRAYS; a++)
            if (arr[a])
                pc_ckpt_writer_write(cw, arr[a], sizeof(float) * k->n);
        if (k->st.v)
            pc_ckpt_writer_write(cw, &k->st.steps, sizeof(k->st.steps));
    }
    return pc_rt__ckpt_finish(rt, it, cw, rc, why, err, errlen);
}

/* Whether chunk k's current iteration runs powersgd's two rounds (a matrix, past the
 * warm-up). */
static bool chunk_rounds(const server_t *s, const schunk_t *k)
{
    return k->lowrank && !pc_codec_lowrank_warm(&s->rt->spec, k->it);
}

/* The codec of chunk k's messages this iteration: a powersgd matrix's warm-up sends dense. */
static const pc_codec_t *chunk_codec(const server_t *s, const schunk_t *k)
{
    return k->lowrank && !chunk_rounds(s, k) ? s->codec_dense : k->codec;
}

/* Add scale x every worker's message of chunk k into sum (the chunk, or a factor), in
 * worker order: independent of arrival order. Validated on arrival (on_grad): applied
 * without a second parse. */
static int sum_messages(server_t *s, schunk_t *k, float scale, float *sum, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    char why[256];
    for (int w = 0; w < rt->nworkers; w++) {
        int rc = pc_rt__grad_apply(chunk_codec(s, k), &k->grads[w], scale, sum, why, sizeof(why));
        if (rc != PC_OK)
            return pc_error_fmt(rc, err, errlen, "server r%d: message from worker r%d: %s",
                                rt->rank, w, why);
    }
    return PC_OK;
}

/* Chunk k's mean gradient into k->agg, unless clipping summed it already (k->summed): the
 * dense path clears agg and decodes every message into it; the sparse path sums into the
 * touched entries only (agg is zero elsewhere), recording them in k->sp. */
static int aggregate(server_t *s, schunk_t *k, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int W = rt->nworkers, failed = 0, rc;
    char why[256];
    if (k->summed)
        return PC_OK;
    if (!k->sparse) {
        memset(k->agg, 0, sizeof(float) * k->n);
        return sum_messages(s, k, 1.0f / (float)W, k->agg, err, errlen);
    }
    rc = pc_rt__grad_aggregate_sparse(&k->sp, k->codec, k->grads, W, 1.0f / (float)W, k->agg, k->n,
                                      &failed, why, sizeof(why));
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "server r%d: message from worker r%d: %s", rt->rank,
                            failed, why);
    return PC_OK;
}

/* The dense path: clear the aggregate, decode every message into it, step all n
 * (--update workers: no step; agg is the mean gradient the workers step with). */
static int step_dense(server_t *s, schunk_t *k, double lr, size_t *nchanged, int64_t *t1, char *err,
                      size_t errlen)
{
    int rc = aggregate(s, k, err, errlen);
    if (rc != PC_OK)
        return rc;
    *t1 = pc_time_ns();
    if (!server_steps(s))
        return PC_OK;
    k->st.steps++;
    *nchanged = pc_optim_step(&k->optim, lr, k->p, &k->st, k->agg, k->n, k->changed);
    return PC_OK;
}

size_t pc_rt__server_lowrank_update(const pc_optim_cfg_t *optim, double lr, const float *made,
                                    float *p, pc_optim_state_t *st, const float *phat,
                                    const float *qagg, size_t rows, size_t cols, int rank,
                                    float *work)
{
    size_t R = (size_t)rank, changed = 0;
    float *qt = work, *row = work + cols * R;
    if (!made)
        pc_lowrank_transpose(qt, qagg, cols, rank);
    st->steps++; /* one step of the whole matrix, row by row */
    for (size_t i = 0; i < rows; i++) {
        const float *g = made ? made + i * cols : row;
        if (!made)
            pc_lowrank_row(row, phat + i * R, qt, cols, rank);
        pc_optim_state_t at = pc_optim_state_at(st, i * cols);
        changed += pc_optim_step(optim, lr, p + i * cols, &at, g, cols, NULL);
    }
    return changed;
}

size_t pc_rt__server_sparse_update(rt_sparse_t *sp, const pc_optim_cfg_t *optim, float lr, float *p,
                                   float *agg)
{
    const uint32_t *t = sp->touched;
    size_t nt = sp->ntouched;
    size_t nchanged = pc_optim_sgd_sparse(optim, lr, p, agg, t, nt, sp->scratch);
    assert(nchanged <= nt);
    for (size_t j = 0; j < nt; j++)
        agg[t[j]] = 0.0f; /* all zero again for the next iteration */
    return nchanged;
}

size_t pc_rt__server_lazy_update(rt_sparse_t *sp, const pc_optim_cfg_t *optim, double lr, float *p,
                                 pc_optim_state_t *st, float *agg)
{
    const uint32_t *t = sp->touched;
    size_t nt = sp->ntouched;
    st->steps++; /* the tensor's step, whatever arrived (SparseAdam's state['step']) */
    size_t nchanged = pc_optim_adam_lazy(optim, lr, p, st, agg, t, nt, sp->scratch);
    assert(nchanged <= nt);
    for (size_t j = 0; j < nt; j++)
        agg[t[j]] = 0.0f; /* all zero again for the next iteration */
    return nchanged;
}

/* The sparse path: the same sums into the touched entries only (agg is zero elsewhere),
 * plain SGD (pc_rt__server_sparse_update, at (float)lr) or lazy Adam(W)
 * (pc_rt__server_lazy_update) on those, then clear them. *changed gets the changed list
 * (ascending). */
static int step_sparse(server_t *s, schunk_t *k, double lr, size_t *nchanged,
                       const uint32_t **changed, int64_t *t1, char *err, size_t errlen)
{
    int rc = aggregate(s, k, err, errlen);
    if (rc != PC_OK)
        return rc;
    *t1 = pc_time_ns();
    *nchanged = pc_optim_lazy(&k->optim)
                    ? pc_rt__server_lazy_update(&k->sp, &k->optim, lr, k->p, &k->st, k->agg)
                    : pc_rt__server_sparse_update(&k->sp, &k->optim, (float)lr, k->p, k->agg);
    *changed = k->sp.scratch;
    return PC_OK;
}

/* Free the messages of chunk k's completed round or iteration. */
static void drop_messages(server_t *s, schunk_t *k)
{
    for (int w = 0; w < s->rt->nworkers; w++) {
        free(k->msgs[w]);
        k->msgs[w] = NULL;
    }
    k->have = 0;
}

/* powersgd, round 1 of matrix k complete: P = sum of the P_w (worker order),
 * orthonormalised in double (P^), sent to every worker; the chunk then collects the Q_w. */
static int lowrank_round1(server_t *s, schunk_t *k, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int W = rt->nworkers, r = rt->spec.rank;
    int64_t t0 = pc_time_ns();
    memset(k->fac, 0, sizeof(float) * k->rows * (size_t)r);
    int rc = sum_messages(s, k, 1.0f, k->fac, err, errlen);
    if (rc != PC_OK)
        return rc;
    k->round1_in = 0;
    for (int w = 0; w < W; w++)
        k->round1_in += k->grads[w].len;
    drop_messages(s, k);
    if (pc_lowrank_orthonormalise(k->fac, k->rows, r, k->work) != PC_OK)
        return pc_error_fmt(PC_ERANGE, err, errlen,
                            "server r%d: chunk %u of iteration %llu: the sum of the workers' P "
                            "is not finite (training diverged)",
                            rt->rank, k->id, (unsigned long long)k->it);
    if (rt->cfg.dilate > 1) /* --dilate: P^ goes out K times the work later */
        pc_rt__dilate(rt, t0, pc_time_ns());
    /* The previous iteration's P^ sends were received long ago (the workers answered them). */
    if ((rc = PC_MPI_CHECK(MPI_Waitall(W, k->psends, MPI_STATUSES_IGNORE), err, errlen)) != PC_OK)
        return rc;
    size_t len =
        pc_rt__phat_encode(k->phat, k->id, (uint32_t)k->n, k->it, k->fac, k->rows * (size_t)r);
    for (int w = 0; w < W; w++)
        if ((rc = PC_MPI_CHECK_PEER(MPI_Isend(k->phat, (int)len, MPI_BYTE, w, TAG_PULL + (int)k->id,
                                              rt->comm, &k->psends[w]),
                                    w, err, errlen)) != PC_OK)
            return rc;
    int64_t t1 = pc_time_ns();
    k->round1_ns = t1 - t0;
    k->round1_out = len * (uint64_t)W;
    k->round = 2;
    pc_rt__tracef(rt, TRACK_MAIN, t0, t1, "P^ chunk %u", k->id);
    return PC_OK;
}

/* powersgd, round 2 of matrix k: Q = sum Q_w / W (worker order) into qagg, unless
 * clipping summed it already (k->summed). */
static int lowrank_sum_q(server_t *s, schunk_t *k, char *err, size_t errlen)
{
    if (k->summed)
        return PC_OK;
    memset(k->qagg, 0, sizeof(float) * k->cols * (size_t)s->rt->spec.rank);
    return sum_messages(s, k, 1.0f / (float)s->rt->nworkers, k->qagg, err, errlen);
}

/* Clipping, matrix k's round 2 (qagg summed): its gradient P^ Q^T made once into agg (the
 * rows pc_lowrank_row gives every worker; clip_finish scales them, step_lowrank steps
 * with them) and its sum of squares. */
static double lowrank_sumsq(server_t *s, schunk_t *k)
{
    /* Arguments the chunk's setup sized: expand refuses nothing here. */
    pc_lowrank_expand(k->agg, k->rows, k->cols, k->fac, k->qagg, s->rt->spec.rank, 1.0f, 0.0f,
                      k->rows_work);
    return pc_optim_sumsq(k->agg, k->n);
}

/* powersgd, round 2 of matrix k complete: Q = sum Q_w / W (worker order); then row by row
 * the gradient P^ Q^T (pc_lowrank_row: the bits every worker makes from P^ and Q; made and
 * clipped in agg already when the iteration clips) and the optimizer's step on that row,
 * which every worker repeats on its copy of the matrix. */
static int step_lowrank(server_t *s, schunk_t *k, double lr, size_t *nchanged, int64_t *t1,
                        char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int r = rt->spec.rank;
    int rc = lowrank_sum_q(s, k, err, errlen);
    if (rc != PC_OK)
        return rc;
    *t1 = pc_time_ns();
    *nchanged = pc_rt__server_lowrank_update(&k->optim, lr, k->summed ? k->agg : NULL, k->p, &k->st,
                                             k->fac, k->qagg, k->rows, k->cols, r, k->rows_work);
    k->round = 1;
    return PC_OK;
}

/* Whether the learning rates of iteration it are in from every worker (always, without
 * parameter groups: the runtime's schedule gives them). */
static bool lrs_in(const server_t *s, uint64_t it)
{
    return !s->ngroups || (s->lrslot[it & 1].it == it && s->lrslot[it & 1].n == s->rt->nworkers);
}

/* Whether iteration it may clip, so that its chunks wait for the clipping's word: every
 * iteration with --clip-grad-norm; with parameter groups the run's first and every one
 * after an iteration that clipped, as the workers count them (pc_worker.c, clip_due). */
static bool clip_wait(const server_t *s, uint64_t it)
{
    if (!s->ngroups)
        return s->rt->cfg.clip_grad_norm > 0;
    return it == s->first_it || s->clip_on;
}

/* Whether the clipping's word on iteration it is in: with parameter groups, every
 * worker's TAG_CLIP of an iteration that may clip; always otherwise. */
static bool clip_in(const server_t *s, uint64_t it)
{
    const lrslot_t *sl = &s->lrslot[it & 1];
    return !s->ngroups || !clip_wait(s, it) || (sl->it == it && sl->nclip == s->rt->nworkers);
}

/* Iteration it's max-norm, once clip_in: --clip-grad-norm's, or with parameter groups
 * worker 0's TAG_CLIP value (every worker's equal); 0: no clipping. */
static double clip_max(const server_t *s, uint64_t it)
{
    if (!s->ngroups)
        return s->rt->cfg.clip_grad_norm;
    return clip_wait(s, it) ? s->lrslot[it & 1].clip_max[0] : 0.0;
}

/* Whether chunk k can be completed (or, clipping, summed): every worker's gradient, the
 * iteration's rates and the clipping's word are in, and it is not summed already (then it
 * waits for the iteration's other chunks: clip_finish). A powersgd matrix's round 1 steps
 * nothing: its P^ goes back without the rates or the word (with parameter groups they
 * come at the backward pass's end; round 2 waits for them). */
static bool chunk_can_go(const server_t *s, const schunk_t *k)
{
    if (k->have != s->rt->nworkers || k->summed)
        return false;
    return (chunk_rounds(s, k) && k->round == 1) || (lrs_in(s, k->it) && clip_in(s, k->it));
}

static int complete_chunk(server_t *s, schunk_t *k, char *err, size_t errlen);

/* The longest nap while this server waits for the others in clipping's exchange: it is on
 * the critical path then (every update of the iteration waits for the norm), as a server
 * waiting for a chunk's last gradients is (PARTIAL_NAP_NS, below). */
#define EXCHANGE_NAP_NS 100000

/* Clipping, once every owned chunk of iteration it is summed: the servers that own chunks
 * allgather their sums of squares (each server's its chunks' in chunk order; added in
 * server order: the same total, bit for bit, on every server and in every run), total =
 * sqrt(sum), coefficient pc_optim_clip_coef(max_norm, total); with parameter groups the
 * exchange's rank 0 sends the total to every worker (TAG_NORM, which
 * pc_worker_clip_grad_norm awaits); then each chunk's aggregate is multiplied by the
 * coefficient (not when it is 1: no bit would change), stepped and pushed (complete_chunk),
 * in chunk order. The exchange is waited for within --timeout without receiving: no
 * message to this server can come before the iteration's updates leave (the workers send
 * nothing more before their next forward pass, which needs them). */
static int clip_finish(server_t *s, uint64_t it, double max_norm, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    s->clip_mine = 0.0;
    for (int i = 0; i < s->nmine; i++)
        s->clip_mine += s->mine[i].sumsq;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = PC_MPI_CHECK(MPI_Iallgather(&s->clip_mine, 1, MPI_DOUBLE, s->clip_all, 1, MPI_DOUBLE,
                                         s->clip_comm, &req),
                          err, errlen);
    pc_backoff_t b;
    pc_backoff_init_capped(&b, EXCHANGE_NAP_NS);
    int64_t start = pc_time_ns(), limit = (int64_t)(rt->cfg.timeout * 1e9);
    for (int done = 0; rc == PC_OK && !done;) {
        if ((rc = PC_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE), err, errlen)) != PC_OK ||
            done)
            break;
        if (pc_time_ns() - start > limit)
            return pc_error_fmt(PC_ETIMEDOUT, err, errlen,
                                "server r%d: timed out after %g s in the servers' exchange of "
                                "iteration %llu's gradient norm (another server did not join)",
                                rt->rank, rt->cfg.timeout, (unsigned long long)it);
        pc_backoff_pause(&b);
    }
    if (rc != PC_OK)
        return rc;
    double sum = 0.0;
    for (int r = 0; r < s->clip_size; r++)
        sum += s->clip_all[r];
    double total = sqrt(sum), coef = pc_optim_clip_coef(max_norm, total);
    s->clip_norm = total;
    if (s->ngroups && s->clip_rank == 0) {
        uint8_t msg[PC_RT_CLIP_BYTES];
        pc_rt__clip_encode(msg, it, total);
        for (int w = 0; w < rt->nworkers && rc == PC_OK; w++)
            rc = PC_MPI_CHECK_PEER(MPI_Send(msg, PC_RT_CLIP_BYTES, MPI_BYTE, w, TAG_NORM, rt->comm),
                                   w, err, errlen);
    }
    float f = (float)coef; /* torch multiplies by its float32 coefficient */
    s->clip_f = coef >= 1.0 ? 1.0f : f;
    for (int i = 0; i < s->nmine && rc == PC_OK; i++) {
        schunk_t *k = &s->mine[i];
        if (!(coef >= 1.0) && k->sparse)
            for (size_t j = 0; j < k->sp.ntouched; j++)
                k->agg[k->sp.touched[j]] *= f;
        else if (!(coef >= 1.0))
            for (size_t j = 0; j < k->n; j++)
                k->agg[j] *= f;
        rc = complete_chunk(s, k, err, errlen);
    }
    s->clip_f = 1.0f;
    s->nsummed = 0;
    return rc;
}

/* Clipping's first half for chunk k (iteration k->it clips to max_norm): its mean gradient
 * into agg (aggregate) and its sum of squares (the sparse path's over its touched entries,
 * ascending: the dense sum's bits); the iteration's last owned chunk starts clip_finish. */
static int clip_sum(server_t *s, schunk_t *k, double max_norm, char *err, size_t errlen)
{
    int64_t t0 = pc_time_ns();
    bool rounds = chunk_rounds(s, k); /* a powersgd matrix's round 2: Q, and P^ Q^T's rows */
    int rc = rounds ? lowrank_sum_q(s, k, err, errlen) : aggregate(s, k, err, errlen);
    if (rc != PC_OK)
        return rc;
    k->sumsq = rounds      ? lowrank_sumsq(s, k)
               : k->sparse ? pc_optim_sumsq_at(k->agg, k->sp.touched, k->sp.ntouched)
                           : pc_optim_sumsq(k->agg, k->n);
    k->summed = true;
    k->agg_ns = pc_time_ns() - t0;
    pc_rt__tracef(s->rt, TRACK_MAIN, t0, t0 + k->agg_ns, "aggregate chunk %u", k->id);
    if (++s->nsummed < s->nmine)
        return PC_OK;
    return clip_finish(s, k->it, max_norm, err, errlen);
}

/* The metrics line's tail for chunk k's iteration, the last of this server's to complete:
 * a clipped iteration's norm (clip_finish's, before clipping; null when not finite: JSON
 * has no inf or NaN), else nothing. */
static void norm_field(const server_t *s, const schunk_t *k, char *buf, size_t len)
{
    buf[0] = '\0';
    if (k->summed && isfinite(s->clip_norm))
        snprintf(buf, len, ", \"grad_norm\": %.9g", s->clip_norm);
    else if (k->summed)
        snprintf(buf, len, ", \"grad_norm\": null");
}

/* Chunk k has every worker's gradient and its iteration's rates: complete it now (fifo)
 * or count it for complete_next (forward order). */
static int chunk_ready(server_t *s, schunk_t *k, char *err, size_t errlen)
{
    if (s->rt->cfg.priority == PC_PRIORITY_FIFO)
        return complete_chunk(s, k, err, errlen);
    s->nready++; /* completed by complete_next, in forward order */
    return PC_OK;
}

/* Chunk k's update into k->pull, returning its length. A powersgd matrix's update is what
 * the workers step their copies with: Q (P^ they have), or in the warm-up the mean
 * gradient, with how this server stepped (with parameter groups its group's rate; round
 * 2's clipping coefficient: a dense update is clipped already); with --update workers any
 * chunk's is its mean gradient in that form; any other chunk's, its parameters (changed:
 * the nchanged indices that changed, or NULL). */
static size_t encode_update(server_t *s, schunk_t *k, bool rounds, double lr, uint64_t server_ns,
                            const uint32_t *changed, size_t nchanged)
{
    pc_runtime_t *rt = s->rt;
    bool mean = !rounds && (k->lowrank || !server_steps(s));
    rt_lrstep_t how = {.lr = s->ngroups ? lr : -1.0, .coef = rounds ? s->clip_f : 1.0f};
    if (rounds)
        return pc_rt__pull_lowrank_encode(k->pull, k->id, (uint32_t)k->n, k->it, false, k->qagg,
                                          k->cols * (size_t)rt->spec.rank, server_ns, &how);
    if (mean)
        return pc_rt__pull_lowrank_encode(k->pull, k->id, (uint32_t)k->n, k->it, true, k->agg, k->n,
                                          server_ns, &how);
    return pc_rt__pull_encode(k->pull, k->id, k->it, k->p, k->n, changed, nchanged, rt->cfg.pull,
                              server_ns);
}

/* All workers' messages for chunk k are in: aggregate, step, push (a powersgd matrix's
 * round 1: P^ back instead). */
static int complete_chunk(server_t *s, schunk_t *k, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int W = rt->nworkers;
    assert(k->have == W); /* every worker's gradient of iteration k->it is in */
    bool rounds = chunk_rounds(s, k);
    if (rounds && k->round == 1)
        return lowrank_round1(s, k, err, errlen);
    if (clip_max(s, k->it) > 0 && !k->summed) /* clipping: summed first, clip_finish steps */
        return clip_sum(s, k, clip_max(s, k->it), err, errlen);
    /* Summed: the aggregation ran before (its time counts as if it had just run). */
    int64_t t0 = pc_time_ns() - (k->summed ? k->agg_ns : 0), t1 = t0;
    uint64_t in = 0;
    for (int w = 0; w < W; w++)
        in += k->grads[w].len;
    if (rounds)
        in += k->round1_in;
    /* With parameter groups, worker 0's rate of the chunk's group (lrs_in: they are in). */
    double lr =
        s->ngroups ? s->lrslot[k->it & 1].lrs[k->group] : pc_optim_lr(&rt->optim, (int64_t)k->it);
    size_t nchanged = 0;
    const uint32_t *changed = k->changed;
    int rc = rounds      ? step_lowrank(s, k, lr, &nchanged, &t1, err, errlen)
             : k->sparse ? step_sparse(s, k, lr, &nchanged, &changed, &t1, err, errlen)
                         : step_dense(s, k, lr, &nchanged, &t1, err, errlen);
    if (rc != PC_OK)
        return rc;
    for (int w = 0; w < W; w++) { /* applied: the messages are done with */
        free(k->msgs[w]);
        k->msgs[w] = NULL;
    }
    size_t touched = k->sparse ? k->sp.ntouched : k->n;
    int64_t t2 = pc_time_ns();
    /* --dilate: the aggregation and the step look K times as long (the sleep counts in
     * t_update and in the server's time the workers see) */
    t2 = pc_rt__dilate(rt, t0, t2);
    /* The previous iteration's pushes of this chunk have long been received (workers sent
     * this iteration's gradients after them); complete them locally before reusing. */
    rc = PC_MPI_CHECK(MPI_Waitall(W, k->sends, MPI_STATUSES_IGNORE), err, errlen);
    if (rc != PC_OK)
        return rc;
    /* The server's time on the chunk, which the workers' breakdown counts as t_wait_server:
     * from the start of aggregation (the last worker's message has just arrived) to the
     * push being posted. A duration on this host's clock: hosts need no common clock. */
    uint64_t server_ns = (uint64_t)(pc_time_ns() - t0 + (rounds ? k->round1_ns : 0));
    size_t len = encode_update(s, k, rounds, lr, server_ns, changed, nchanged);
    for (int w = 0; w < W; w++) {
        rc = PC_MPI_CHECK_PEER(MPI_Isend(k->pull, (int)len, MPI_BYTE, w, TAG_PULL + (int)k->id,
                                         rt->comm, &k->sends[w]),
                               w, err, errlen);
        if (rc != PC_OK)
            return rc;
    }
    int64_t t3 = pc_time_ns();
    if (!k->summed) /* clip_sum recorded it when it ran */
        pc_rt__tracef(rt, TRACK_MAIN, t0, t1, "aggregate chunk %u", k->id);
    pc_rt__tracef(rt, TRACK_MAIN, t1, t2, "update chunk %u", k->id);
    pc_rt__tracef(rt, TRACK_MAIN, t2, t3, "push chunk %u", k->id);
    /* Metrics of the iteration, emitted when every owned chunk has completed it. */
    int sl = (int)(k->it & 1);
    if (s->slot[sl].done == 0 || s->slot[sl].it != k->it)
        memset(&s->slot[sl], 0, sizeof(s->slot[sl]));
    s->slot[sl].it = k->it;
    s->slot[sl].t_aggregate += (double)(t1 - t0) * 1e-9;
    s->slot[sl].t_update += (double)(t2 - t1) * 1e-9;
    s->slot[sl].t_push += (double)(t3 - t2) * 1e-9;
    s->slot[sl].bytes_in += in;
    s->slot[sl].bytes_out += len * (size_t)W + (rounds ? k->round1_out : 0);
    s->slot[sl].touched += touched;
    s->slot[sl].changed += nchanged;
    if (++s->slot[sl].done == s->nmine) {
        char norm[48];
        norm_field(s, k, norm, sizeof(norm));
        pc_rt__metrics_line(
            rt,
            "{\"rank\": %d, \"role\": \"server\", \"iteration\": %llu, "
            "\"t_aggregate\": %.6f, \"t_update\": %.6f, \"t_push\": %.6f, "
            "\"touched\": %llu, \"changed\": %llu, "
            "\"bytes_received\": %llu, \"bytes_sent\": %llu%s}",
            rt->rank, (unsigned long long)k->it, s->slot[sl].t_aggregate, s->slot[sl].t_update,
            s->slot[sl].t_push, (unsigned long long)s->slot[sl].touched,
            (unsigned long long)s->slot[sl].changed, (unsigned long long)s->slot[sl].bytes_in,
            (unsigned long long)s->slot[sl].bytes_out, norm);
        s->slot[sl].done = 0;
    }
    k->have = 0;
    k->summed = false;
    k->it++;
    return PC_OK;
}

/* One gradient message from worker src (buf: owned, taken): validate it completely, once
 * (header, route to its chunk, the codec's checks, not a duplicate), keep it with its
 * parsed header, and complete the chunk when every worker's is in. */
static int on_grad(server_t *s, int src, uint8_t *buf, int len, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    rt_grad_t g;
    schunk_t *k = NULL;
    char why[256];
    int64_t t0 = rt->cfg.dilate > 1 ? pc_time_ns() : 0; /* --dilate: the validation's start */
    int rc = pc_rt__grad_read(buf, (size_t)len, &g, why, sizeof(why));
    if (rc == PC_OK && (g.h.chunk >= (uint32_t)s->nchunks_total || s->local[g.h.chunk] < 0))
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why), "chunk %u is not served here", g.h.chunk);
    if (rc == PC_OK) {
        k = &s->mine[s->local[g.h.chunk]];
        pc_codec_expect_t want = {.chunk = k->id, .n = (uint32_t)k->n, .iteration = k->it};
        if (chunk_rounds(s, k)) {
            want.round = k->round;
            want.entries = (uint32_t)((k->round == 1 ? k->rows : k->cols) * (size_t)rt->spec.rank);
        }
        rc = pc_rt__grad_check(chunk_codec(s, k), &g, &want, why, sizeof(why));
    }
    if (rc == PC_OK && k->msgs[src])
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why),
                          "second message for chunk %u of iteration %llu", k->id,
                          (unsigned long long)k->it);
    if (rc != PC_OK) {
        free(buf);
        return pc_error_fmt(rc, err, errlen, "server r%d: rejected message from worker r%d: %s",
                            rt->rank, src, why);
    }
    if (rt->cfg.dilate > 1) /* --dilate: validating the message is CPU work too */
        pc_rt__dilate(rt, t0, pc_time_ns());
    k->msgs[src] = buf;
    k->grads[src] = g;
    assert(k->have < rt->nworkers); /* a second message from src was rejected above */
    if (++k->have < rt->nworkers || !chunk_can_go(s, k))
        return PC_OK;
    return chunk_ready(s, k, err, errlen);
}

/* A message of learning rates from worker src (buf: owned, freed): the rates of its next
 * iteration, kept in that iteration's slot; once every worker's are in, each is compared
 * with worker 0's (a difference ends the run) and the chunks of that iteration whose
 * gradients are all in become ready. */
static int on_lr(server_t *s, int src, uint8_t *buf, int len, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    uint32_t G = s->ngroups;
    int W = rt->nworkers;
    uint64_t it = 0;
    double *lrs = malloc(sizeof(double) * G);
    char why[256] = "";
    int rc = lrs ? pc_rt__lr_parse(buf, (size_t)len, G, &it, lrs, why, sizeof(why)) : PC_ENOMEM;
    free(buf);
    if (rc == PC_OK && it != s->lr_next[src])
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why), "rates of iteration %llu, %llu expected",
                          (unsigned long long)it, (unsigned long long)s->lr_next[src]);
    if (rc != PC_OK) {
        free(lrs);
        return pc_error_fmt(rc, err, errlen,
                            "server r%d: rejected learning rates from worker r%d: %s", rt->rank,
                            src, rc == PC_ENOMEM ? "out of memory" : why);
    }
    s->lr_next[src]++;
    lrslot_t *sl = &s->lrslot[it & 1];
    if (sl->it != it) {
        /* The slot's previous iteration is it - 2: complete everywhere, since worker src
         * sends iteration it's rates only after its forward pass of it waited for every
         * update of it - 1. */
        sl->it = it;
        sl->n = sl->nclip = 0;
        memset(sl->have, 0, sizeof(bool) * (size_t)W);
        memset(sl->clip_have, 0, sizeof(bool) * (size_t)W);
    }
    memcpy(sl->lrs + (size_t)src * G, lrs, sizeof(double) * G);
    free(lrs);
    sl->have[src] = true;
    if (++sl->n < W)
        return PC_OK;
    for (int w = 1; w < W; w++)
        for (uint32_t g = 0; g < G; g++)
            if (sl->lrs[(size_t)w * G + g] != sl->lrs[g])
                return pc_error_fmt(PC_EINVAL, err, errlen,
                                    "server r%d: worker r%d's learning rate of parameter group %u "
                                    "at iteration %llu is %.17g, worker r0's %.17g: every worker "
                                    "must step the same schedule (a scheduler stepped on one "
                                    "worker only?)",
                                    rt->rank, w, g, (unsigned long long)it,
                                    sl->lrs[(size_t)w * G + g], sl->lrs[g]);
    for (int i = 0; i < s->nmine; i++) {
        schunk_t *k = &s->mine[i];
        int rc2 = k->it == it && chunk_can_go(s, k) ? chunk_ready(s, k, err, errlen) : PC_OK;
        if (rc2 != PC_OK)
            return rc2;
    }
    return PC_OK;
}

/* A clipping message from worker src (buf: owned, freed): its max-norm of an iteration
 * that may clip (clip_wait), after its rates of it (the same thread sends both, in that
 * order). Once every worker's is in, each is compared with worker 0's (a difference ends
 * the run); a max-norm above 0 turns clipping on for every later iteration (clip_on, as
 * on the workers), and the iteration's chunks whose gradients are all in can go. A server
 * without chunks has nothing to hold: it only validates the message. */
static int on_clip(server_t *s, int src, uint8_t *buf, int len, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int W = rt->nworkers;
    uint64_t it = 0;
    double max = 0;
    char why[256] = "";
    int rc = pc_rt__clip_parse(buf, (size_t)len, &it, &max, why, sizeof(why));
    free(buf);
    lrslot_t *sl = &s->lrslot[it & 1];
    if (rc == PC_OK && s->nmine == 0)
        return PC_OK;
    if (rc == PC_OK && (it + 1 != s->lr_next[src] || sl->it != it))
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why),
                          "a max-norm for iteration %llu, whose learning rates are not the last "
                          "it sent",
                          (unsigned long long)it);
    else if (rc == PC_OK && !clip_wait(s, it))
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why),
                          "a max-norm for iteration %llu, which cannot clip (clipping begins "
                          "with the run's first iteration, %llu)",
                          (unsigned long long)it, (unsigned long long)s->first_it);
    else if (rc == PC_OK && sl->clip_have[src])
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why), "a second max-norm for iteration %llu",
                          (unsigned long long)it);
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "server r%d: rejected clipping from worker r%d: %s",
                            rt->rank, src, why);
    sl->clip_have[src] = true;
    sl->clip_max[src] = max;
    if (++sl->nclip < W)
        return PC_OK;
    for (int w = 1; w < W; w++)
        if (sl->clip_max[w] != sl->clip_max[0])
            return pc_error_fmt(PC_EINVAL, err, errlen,
                                "server r%d: worker r%d's max-norm at iteration %llu is %.17g, "
                                "worker r0's %.17g (0: no clipping): every worker must clip "
                                "alike",
                                rt->rank, w, (unsigned long long)it, sl->clip_max[w],
                                sl->clip_max[0]);
    if (sl->clip_max[0] > 0)
        s->clip_on = true;
    for (int i = 0; i < s->nmine; i++) {
        schunk_t *k = &s->mine[i];
        int rc2 = k->it == it && chunk_can_go(s, k) ? chunk_ready(s, k, err, errlen) : PC_OK;
        if (rc2 != PC_OK)
            return rc2;
    }
    return PC_OK;
}

/* --priority forward: complete the ready chunk (every worker's gradient in) that the
 * workers' next forward pass needs first: the lowest chunk id (mine[] is in id order). The
 * loop calls it only when no message is waiting, so chunks that became ready together are
 * aggregated front layer first. */
static int complete_next(server_t *s, char *err, size_t errlen)
{
    assert(s->nready > 0); /* the loop calls it only then */
    for (int i = 0; i < s->nmine; i++)
        if (chunk_can_go(s, &s->mine[i])) {
            s->nready--;
            return complete_chunk(s, &s->mine[i], err, errlen);
        }
    return pc_error_fmt(PC_ESTATE, err, errlen, "server r%d: internal error: no chunk ready",
                        s->rt->rank);
}

/* The idle loop's longest nap while some chunk holds some but not all workers'
 * gradients: the rest are on their way and the server is then on the critical path (the
 * workers' next forward pass waits for the update), so 100 us instead of pc_backoff's
 * 1 ms (kept when nothing is partly in: then the next message is a new iteration's). */
#define PARTIAL_NAP_NS 100000

/* Whether some chunk has some but not all of this iteration's gradients. */
static bool chunk_partial(const server_t *s)
{
    for (int i = 0; i < s->nmine; i++)
        if (s->mine[i].have > 0 && s->mine[i].have < s->rt->nworkers)
            return true;
    return false;
}

/* What the server is waiting for, for timeout messages. */
static void describe_wait(const server_t *s, char *buf, size_t len)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->nmine && pos + 64 < len; i++) {
        const schunk_t *k = &s->mine[i];
        if (k->have == 0)
            continue;
        pos += (size_t)snprintf(buf + pos, len - pos, "%schunk %u iteration %llu from",
                                pos ? "; " : "", k->id, (unsigned long long)k->it);
        for (int w = 0; w < s->rt->nworkers && pos + 80 < len; w++)
            if (!k->msgs[w])
                pos +=
                    (size_t)snprintf(buf + pos, len - pos, " r%d (%s)", w, pc_rt__host(s->rt, w));
    }
    for (int i = 0; i < s->nmine && pos + 64 < len; i++) {
        const schunk_t *k = &s->mine[i]; /* every gradient in, the rates not (groups) */
        const lrslot_t *sl = &s->lrslot[k->it & 1];
        if (k->have < s->rt->nworkers || lrs_in(s, k->it))
            continue;
        pos += (size_t)snprintf(buf + pos, len - pos, "%sthe learning rates of iteration %llu from",
                                pos ? "; " : "", (unsigned long long)k->it);
        for (int w = 0; w < s->rt->nworkers && pos + 80 < len; w++)
            if (sl->it != k->it || !sl->have[w])
                pos +=
                    (size_t)snprintf(buf + pos, len - pos, " r%d (%s)", w, pc_rt__host(s->rt, w));
        break; /* one iteration's: the same for every chunk of it */
    }
    for (int i = 0; i < s->nmine && pos + 64 < len; i++) {
        const schunk_t *k = &s->mine[i]; /* gradients and rates in, clipping's word not */
        const lrslot_t *sl = &s->lrslot[k->it & 1];
        if (k->have < s->rt->nworkers || !lrs_in(s, k->it) || clip_in(s, k->it))
            continue;
        pos += (size_t)snprintf(buf + pos, len - pos,
                                "%swhether iteration %llu clips (opt.clip_grad_norm_ or step()) "
                                "from",
                                pos ? "; " : "", (unsigned long long)k->it);
        for (int w = 0; w < s->rt->nworkers && pos + 80 < len; w++)
            if (!sl->clip_have[w])
                pos +=
                    (size_t)snprintf(buf + pos, len - pos, " r%d (%s)", w, pc_rt__host(s->rt, w));
        break;
    }
    if (!buf[0]) {
        pos = (size_t)snprintf(buf, len, "any gradient from the workers");
        for (int w = 0; w < s->rt->nworkers && pos + 80 < len; w++)
            pos += (size_t)snprintf(buf + pos, len - pos, "%s r%d (%s)", w ? "," : "", w,
                                    pc_rt__host(s->rt, w));
    }
}

/* A checkpoint request from worker src (buf: owned, freed): once every worker has asked
 * for the same iteration, this server writes its shards' file (server_checkpoint). */
static int on_ckpt_req(server_t *s, int src, uint8_t *buf, int len, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    uint64_t it = 0;
    char why[256] = "";
    int rc = pc_rt__ckpt_req_parse(buf, (size_t)len, &it, why, sizeof(why));
    free(buf);
    if (rc != PC_OK || s->finished[src] || s->ckpt_from[src] || (s->ckpt_n && it != s->ckpt_it))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "server r%d: unexpected checkpoint request from worker r%d%s%s",
                            rt->rank, src, why[0] ? ": " : "", why);
    s->ckpt_from[src] = true;
    s->ckpt_it = it;
    if (++s->ckpt_n < rt->nworkers)
        return PC_OK;
    if ((rc = server_checkpoint(s, it, err, errlen)) != PC_OK)
        return rc;
    memset(s->ckpt_from, 0, sizeof(bool) * (size_t)rt->nworkers);
    s->ckpt_n = 0;
    s->last = pc_time_ns();
    return PC_OK;
}

/* Worker src's end message (buf: owned, freed), with the stop signal it agreed on. */
static int on_done(server_t *s, int src, uint8_t *buf, int len, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int sig = 0;
    char why[256];
    int rc = pc_rt__done_parse(buf, (size_t)len, &sig, why, sizeof(why));
    free(buf);
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen,
                            "server r%d: malformed end message from worker r%d: %s", rt->rank, src,
                            why);
    if (sig > rt->stop_signal)
        rt->stop_signal = sig;
    if (s->finished[src])
        return pc_error_fmt(PC_EFORMAT, err, errlen, "server r%d: worker r%d finished twice",
                            rt->rank, src);
    s->finished[src] = true;
    s->done++;
    return PC_OK;
}

/* Receive the message m that MPI_Improbe matched (st) whole into a new buffer and hand it
 * to its handler by tag; a message from a rank that is not a worker, with another tag, or
 * from a worker after its end message is rejected. */
static int on_message(server_t *s, MPI_Message *m, const MPI_Status *st, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int src = st->MPI_SOURCE, len = 0;
    int rc = PC_MPI_CHECK_PEER(MPI_Get_count(st, MPI_BYTE, &len), src, err, errlen);
    if (rc != PC_OK)
        return rc;
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf)
        return pc_error_fmt(PC_ENOMEM, err, errlen,
                            "server r%d: out of memory for a %d-byte message", rt->rank, len);
    if ((rc = PC_MPI_CHECK_PEER(MPI_Mrecv(buf, len, MPI_BYTE, m, MPI_STATUS_IGNORE), src, err,
                                errlen)) != PC_OK) {
        free(buf);
        return rc;
    }
    int tag = st->MPI_TAG;
    bool per_iteration = (tag == TAG_LR || tag == TAG_CLIP) && s->ngroups; /* groups only */
    if (src >= rt->nworkers ||
        (tag != TAG_GRAD && tag != TAG_DONE && tag != TAG_CKPT && !per_iteration)) {
        free(buf);
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "server r%d: rejected message with tag %d from rank r%d (not a "
                            "worker's gradient)",
                            rt->rank, tag, src);
    }
    if (tag == TAG_CKPT)
        return on_ckpt_req(s, src, buf, len, err, errlen);
    if (tag == TAG_DONE)
        return on_done(s, src, buf, len, err, errlen);
    if (s->finished[src]) {
        free(buf);
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "server r%d: rejected message from worker r%d after it finished",
                            rt->rank, src);
    }
    if (tag == TAG_LR)
        return on_lr(s, src, buf, len, err, errlen);
    if (tag == TAG_CLIP)
        return on_clip(s, src, buf, len, err, errlen);
    return on_grad(s, src, buf, len, err, errlen);
}

/* Nothing to receive and nothing ready: nap (b, capped once per idle spell: *fresh), or
 * fail once --timeout has passed since the last progress, naming what is awaited. */
static int idle(server_t *s, pc_backoff_t *b, bool *fresh, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    if (pc_time_ns() - s->last > (int64_t)(rt->cfg.timeout * 1e9)) {
        char what[512];
        describe_wait(s, what, sizeof(what));
        return pc_error_fmt(PC_ETIMEDOUT, err, errlen,
                            "server r%d: timed out after %g s with no message, waiting for %s",
                            rt->rank, rt->cfg.timeout, what);
    }
    if (*fresh) {
        /* First idle pass after a message: the cap for this wait. */
        pc_backoff_init_capped(b, chunk_partial(s) ? PARTIAL_NAP_NS : PC_BACKOFF_MAX_SLEEP_NS);
        *fresh = false;
    }
    pc_backoff_pause(b);
    return PC_OK;
}

/* The message loop, until every worker has sent its end message: receive and handle
 * what comes, complete ready chunks in between (--priority forward), nap when idle. */
static int serve(server_t *s, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    pc_backoff_t b;
    pc_backoff_init(&b);
    bool fresh = true;     /* a message was handled since the last nap cap was chosen */
    bool received = false; /* a message was received since the last completion */
    int rc = PC_OK;
    s->last = pc_time_ns();
    while (rc == PC_OK && s->done < rt->nworkers) {
        if (received && s->nready > 0) {
            /* One completion per message received while chunks are ready: with a steady
             * stream of pushes (the workers keep their send windows full) a quiet moment
             * comes only after the last push, and waiting for it would hold back every
             * pull until then; completing in between lets the pulls of early chunks cross
             * the link while later pushes still arrive. */
            rc = complete_next(s, err, errlen);
            received = false;
            s->last = pc_time_ns();
            continue;
        }
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        if ((rc = PC_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, rt->comm, &flag, &m, &st),
                               err, errlen)) != PC_OK)
            break;
        if (!flag && s->nready > 0) {
            /* Nothing waiting: aggregate the most urgent ready chunk, then look again. */
            rc = complete_next(s, err, errlen);
            s->last = pc_time_ns();
            pc_backoff_init(&b);
        } else if (!flag) {
            rc = idle(s, &b, &fresh, err, errlen);
        } else {
            fresh = received = true;
            s->last = pc_time_ns();
            rc = on_message(s, &m, &st, err, errlen);
        }
    }
    return rc;
}

/* After the loop: every worker got every push before finishing, so the pushes' requests
 * complete locally; a chunk still holding gradients means the workers stopped mid-way. */
static int server_finish(server_t *s, char *err, size_t errlen)
{
    pc_runtime_t *rt = s->rt;
    int rc = PC_OK;
    for (int i = 0; i < s->nmine && rc == PC_OK; i++)
        if ((rc = PC_MPI_CHECK(MPI_Waitall(rt->nworkers, s->mine[i].sends, MPI_STATUSES_IGNORE),
                               err, errlen)) == PC_OK &&
            s->mine[i].psends)
            rc = PC_MPI_CHECK(MPI_Waitall(rt->nworkers, s->mine[i].psends, MPI_STATUSES_IGNORE),
                              err, errlen);
    for (int i = 0; i < s->nmine && rc == PC_OK; i++)
        if (s->mine[i].have || (s->mine[i].lowrank && s->mine[i].round != 1))
            rc = pc_error_fmt(PC_EFORMAT, err, errlen,
                              "server r%d: workers finished with chunk %u of iteration %llu "
                              "incomplete",
                              rt->rank, s->mine[i].id, (unsigned long long)s->mine[i].it);
    return rc == PC_OK ? pc_rt__metrics_write(rt, err, errlen) : rc;
}

int pc_server_run(pc_runtime_t *rt, char *err, size_t errlen)
{
    if (rt->role != PC_ROLE_SERVER)
        return pc_error_fmt(PC_ESTATE, err, errlen, "pc_server_run called on worker rank %d",
                            rt->rank);
    server_t s = {.rt = rt, .clip_comm = MPI_COMM_NULL, .clip_f = 1.0f};
    int rc = pc_rt__codecs_create(rt, &s.codec, &s.codec_dense);
    if (rc != PC_OK) {
        pc_error_fmt(rc, err, errlen, "server r%d: cannot create the codec", rt->rank);
        goto out;
    }
    if ((rc = server_setup(&s, err, errlen)) != PC_OK)
        goto out;
    pc_log_write(rt->log, PC_LOG_DEBUG, "server", "serving %d of %d chunks", s.nmine,
                 s.nchunks_total);
    s.finished = calloc((size_t)rt->nworkers, sizeof(bool));
    s.ckpt_from = calloc((size_t)rt->nworkers, sizeof(bool));
    if (!s.finished || !s.ckpt_from) {
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "server r%d: out of memory", rt->rank);
        goto out;
    }
    if ((rc = serve(&s, err, errlen)) == PC_OK)
        rc = server_finish(&s, err, errlen);
out:
    server_free(&s);
    return rc;
}
