/* pc_cost: the iteration-time model (see pc_cost.h; doc/scaling.md has the formulas).
 *
 * One prediction simulates one iteration of one worker (every worker is alike: same
 * rates, same chunks, messages leave at the same time), chunk by chunk, on a handful of
 * serial resources: the worker's compressor (or communication) thread, its uplink and
 * downlink, and per server its downlink, its thread and its uplink. The first resource
 * orders the chunks as the runtime does (lowest id first among those ready for the
 * pipelined compressor thread; hand-over order inline and for the allreduce); every later
 * resource serves them in that order. With the order fixed, each finish time is
 * max(ready, the resource's previous finish) + duration: only maxima and sums of
 * non-negative terms, so a worse rate can never make a prediction faster. (A resource that
 * re-picked by priority on every arrival could: a low-priority chunk arriving earlier
 * would start first and delay a high-priority one, a classic scheduling anomaly.) A pool
 * of compressor threads (pc_cost_predict_pool) stays that one resource, its durations
 * divided by the pool's speed-up: still sums and maxima, the argument holds. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_wire.h"
#include "runtime/runtime_proto.h"

typedef struct cchunk {
    size_t n;
    int layer;   /* the lowest layer among its tensors: its gradient is complete after it */
    size_t rows; /* a powersgd matrix's rows (the powersgd plan only), else 0 */
} cchunk_t;

/* A plan's chunks, id order (forward order). */
typedef struct cplan {
    int n;
    cchunk_t *chunks;
} cplan_t;

struct pc_cost {
    int nlayers;
    pc_cost_layer_t *layers;
    cplan_t plain; /* pc_plan's chunks, as every mode but powersgd's cuts them */
    cplan_t lr;    /* powersgd's: its matrices whole */
    size_t nelems;
    size_t compress_min_bytes;
    pc_cost_codec_rate_t codec[PC_COST_CODECS];
    pc_cost_server_rate_t server;
    pc_cost_lowrank_t lowrank;
    pc_cost_link_t link;
    double pool_efficiency; /* cfg's, 0 made 1 */
};

/* What a mode is made of. */
typedef struct mode_def {
    bool allreduce;
    bool pipelined;       /* compression on the compressor thread (else on backprop's) */
    bool server_momentum; /* servers keep momentum: dense step, every parameter changes */
    bool lowrank;         /* powersgd: its plan; matrices in two rounds, the rest dense */
    int codec;            /* pc_cost_codec_t of chunks at or above --compress-min-bytes */
} mode_def_t;

static const mode_def_t modes[PC_COST_MODES] = {
    [PC_COST_ALLREDUCE] = {.allreduce = true, .pipelined = true, .codec = PC_COST_CODEC_NONE},
    [PC_COST_PS_NONE] = {.pipelined = true, .server_momentum = true, .codec = PC_COST_CODEC_NONE},
    [PC_COST_PS_TOPK_INLINE] = {.pipelined = false, .codec = PC_COST_CODEC_TOPK},
    [PC_COST_PS_TOPK_PIPELINED] = {.pipelined = true, .codec = PC_COST_CODEC_TOPK},
    [PC_COST_PS_DGC_PIPELINED] = {.pipelined = true, .codec = PC_COST_CODEC_DGC},
    [PC_COST_PS_TOPK_SERVERMOM] = {.pipelined = true,
                                   .server_momentum = true,
                                   .codec = PC_COST_CODEC_TOPK_EF},
    [PC_COST_PS_POWERSGD_PIPELINED] = {.pipelined = true,
                                       .server_momentum = true,
                                       .lowrank = true,
                                       .codec = PC_COST_CODEC_NONE},
};

static bool time_ok(double x)
{
    return isfinite(x) && x >= 0;
}

static bool link_ok(const pc_cost_link_t *l)
{
    return l->bandwidth > 0 && time_ok(l->latency); /* NaN fails the comparison */
}

static bool codec_ok(const pc_cost_codec_rate_t *r)
{
    return time_ok(r->compress) && time_ok(r->bytes) && r->density > 0 && r->density <= 1;
}

static bool server_ok(const pc_cost_server_rate_t *s)
{
    return time_ok(s->agg_dense) && time_ok(s->agg_sparse) && time_ok(s->merge) &&
           time_ok(s->step_dense) && time_ok(s->step_sparse) && time_ok(s->pull_dense) &&
           time_ok(s->pull_sparse);
}

static bool lowrank_ok(const pc_cost_lowrank_t *l)
{
    return time_ok(l->round2) && time_ok(l->finish) && time_ok(l->ortho) && time_ok(l->step) &&
           (l->spec.id != PC_CODEC_POWERSGD ||
            (l->spec.rank >= 1 && l->spec.rank <= PC_LOWRANK_MAX_RANK));
}

void pc_cost_destroy(pc_cost_t *c)
{
    if (!c)
        return;
    free(c->layers);
    free(c->plain.chunks);
    free(c->lr.chunks);
    free(c);
}

/* Cut tensors (cfg's, or a copy with their whole_rows changed) into out's chunks with
 * pc_plan, each with the lowest layer among its tensors. PC_OK, PC_EINVAL or PC_ENOMEM. */
static int cut(const pc_cost_cfg_t *cfg, const pc_plan_tensor_t *tensors, cplan_t *out)
{
    pc_plan_t *plan = NULL;
    int rc = pc_plan_create(tensors, cfg->ntensors, cfg->chunk_bytes / sizeof(float), 1, &plan);
    if (rc != PC_OK)
        return rc; /* PC_EINVAL (a tensor of 0 elements) or PC_ENOMEM */
    out->chunks = malloc(sizeof(cchunk_t) * (size_t)plan->nchunks);
    if (!out->chunks) {
        pc_plan_destroy(plan);
        return PC_ENOMEM;
    }
    out->n = plan->nchunks;
    for (int i = 0; i < plan->nchunks; i++) {
        const pc_plan_chunk_t *k = &plan->chunks[i];
        int layer = cfg->tensor_layer[k->first_tensor];
        for (int t = k->first_tensor + 1; t <= k->last_tensor; t++)
            if (cfg->tensor_layer[t] < layer)
                layer = cfg->tensor_layer[t];
        out->chunks[i] = (cchunk_t){.n = k->n, .layer = layer, .rows = k->rows};
    }
    pc_plan_destroy(plan);
    return PC_OK;
}

/* Both plans: every mode's (no tensor whole) and powersgd's (its matrices whole: the
 * tensors with rows that pc_codec_lowrank_fits and that are not under compress_min_bytes,
 * as the runtime's workers decide). */
static int cut_both(const pc_cost_cfg_t *cfg, pc_cost_t *c)
{
    pc_plan_tensor_t *t = malloc(sizeof(*t) * (size_t)cfg->ntensors);
    if (!t)
        return PC_ENOMEM;
    for (int i = 0; i < cfg->ntensors; i++) {
        t[i] = cfg->tensors[i];
        t[i].whole_rows = 0;
    }
    int rc = cut(cfg, t, &c->plain);
    for (int i = 0; i < cfg->ntensors && rc == PC_OK; i++) {
        size_t rows = cfg->tensors[i].whole_rows, n = t[i].n;
        if (rows && n % rows)
            rc = PC_EINVAL;
        else if (cfg->lowrank.spec.id == PC_CODEC_POWERSGD &&
                 (double)n * sizeof(float) >= (double)cfg->compress_min_bytes &&
                 pc_codec_lowrank_fits(&cfg->lowrank.spec, rows, n))
            t[i].whole_rows = rows;
    }
    if (rc == PC_OK)
        rc = cut(cfg, t, &c->lr);
    free(t);
    return rc;
}

int pc_cost_create(const pc_cost_cfg_t *cfg, pc_cost_t **out)
{
    if (!cfg || !out || !cfg->layers || cfg->nlayers < 1 || !cfg->tensors || !cfg->tensor_layer ||
        cfg->ntensors < 1 || cfg->chunk_bytes < sizeof(float) || !server_ok(&cfg->server) ||
        !link_ok(&cfg->link))
        return PC_EINVAL;
    for (int l = 0; l < cfg->nlayers; l++)
        if (!time_ok(cfg->layers[l].fwd) || !time_ok(cfg->layers[l].bwd))
            return PC_EINVAL;
    for (int t = 0; t < cfg->ntensors; t++)
        if (cfg->tensor_layer[t] < 0 || cfg->tensor_layer[t] >= cfg->nlayers)
            return PC_EINVAL;
    for (int q = 0; q < PC_COST_CODECS; q++)
        if (!codec_ok(&cfg->codec[q]))
            return PC_EINVAL;
    if (!lowrank_ok(&cfg->lowrank) || !(cfg->pool_efficiency >= 0 && cfg->pool_efficiency <= 1))
        return PC_EINVAL;
    pc_cost_t *c = calloc(1, sizeof(*c));
    if (!c)
        return PC_ENOMEM;
    c->layers = malloc(sizeof(pc_cost_layer_t) * (size_t)cfg->nlayers);
    int rc = c->layers ? cut_both(cfg, c) : PC_ENOMEM;
    if (rc != PC_OK) {
        pc_cost_destroy(c);
        return rc;
    }
    c->nlayers = cfg->nlayers;
    memcpy(c->layers, cfg->layers, sizeof(pc_cost_layer_t) * (size_t)cfg->nlayers);
    for (int i = 0; i < c->plain.n; i++)
        c->nelems += c->plain.chunks[i].n;
    c->compress_min_bytes = cfg->compress_min_bytes;
    memcpy(c->codec, cfg->codec, sizeof(c->codec));
    c->server = cfg->server;
    c->lowrank = cfg->lowrank;
    c->link = cfg->link;
    c->pool_efficiency = cfg->pool_efficiency > 0 ? cfg->pool_efficiency : 1.0;
    *out = c;
    return PC_OK;
}

int pc_cost_nchunks(const pc_cost_t *c)
{
    return c->plain.n;
}

size_t pc_cost_nelems(const pc_cost_t *c)
{
    return c->nelems;
}

double pc_cost_ring(double bytes, int workers, const pc_cost_link_t *link)
{
    if (workers <= 1)
        return 0;
    double w = (double)workers;
    return 2.0 * (w - 1.0) / w * bytes / link->bandwidth + 2.0 * (w - 1.0) * link->latency;
}

double pc_cost_union(double n, double density, int workers)
{
    return n * (1.0 - pow(1.0 - density, (double)workers));
}

/* Sum over w = 1..W-1 of the union of w supports: n ((W-1) - q (1 - q^(W-1)) / d), q = 1 - d
 * (a geometric series; 0 for W = 1). */
static double union_prefix_sum(double n, double d, int workers)
{
    double q = 1.0 - d, w1 = (double)workers - 1.0;
    return n * (w1 - q * (1.0 - pow(q, w1)) / d);
}

/* A chunk's costs in mode def for W workers; seconds and bytes. */
typedef struct ccost {
    double compress; /* on the worker (powersgd's matrices: the fold and round 1) */
    double push;     /* message bytes */
    double server;   /* the server thread: check and aggregate W messages, step, pull */
    double pull;     /* message bytes */
    /* powersgd's matrices only (0 otherwise): round 2 (Q_w), the server's second part
     * (add W Q_w, the rows and the step), Q's bytes, and the worker's step (finish). */
    double round2, push2, server2, pull2, finish;
} ccost_t;

/* A powersgd matrix's costs: P_w (rows x rank) up, P^ down, Q_w (cols x rank) up, Q down. */
static ccost_t matrix_cost(const pc_cost_t *c, const cchunk_t *k, int W)
{
    const pc_cost_lowrank_t *l = &c->lowrank;
    const pc_cost_server_rate_t *s = &c->server;
    double n = (double)k->n, w = (double)W, R = (double)l->spec.rank;
    double pr = R * (double)k->rows, qc = R * (n / (double)k->rows); /* the factors' floats */
    return (ccost_t){
        .compress = n * c->codec[PC_COST_CODEC_POWERSGD].compress,
        .push = PC_WIRE_HEADER_BYTES + 4.0 * pr,
        .server = w * pr * s->agg_dense + pr * R * l->ortho,
        .pull = (double)pc_rt__phat_bytes((size_t)pr),
        .round2 = n * l->round2,
        .push2 = PC_WIRE_HEADER_BYTES + 4.0 * qc,
        .server2 = w * qc * s->agg_dense + n * l->step,
        .pull2 = (double)pc_rt__pull_lowrank_bytes((size_t)qc, false),
        .finish = n * l->finish,
    };
}

static ccost_t chunk_cost(const pc_cost_t *c, const mode_def_t *def, const cchunk_t *k, int W)
{
    if (k->rows)
        return matrix_cost(c, k, W);
    bool small = (double)k->n * sizeof(float) < (double)c->compress_min_bytes;
    const pc_cost_codec_rate_t *q = &c->codec[small ? PC_COST_CODEC_NONE : def->codec];
    const pc_cost_server_rate_t *s = &c->server;
    double n = (double)k->n, w = (double)W, entries = q->density * n;
    ccost_t r = {.compress = n * q->compress, .push = PC_WIRE_HEADER_BYTES + q->bytes * n};
    /* The server's O(nnz) path: a sparsifier's messages and plain SGD (momentum on the
     * workers); chunks under --compress-min-bytes travel as NONE (dense) in every mode. */
    bool sparse_path = q->sparse && !def->server_momentum;
    double changed = n; /* the dense path steps with momentum: every parameter moves */
    if (sparse_path) {
        changed = pc_cost_union(n, q->density, W);
        r.server = w * entries * s->agg_sparse +
                   s->merge * ((w - 1.0) * entries + union_prefix_sum(n, q->density, W)) +
                   changed * s->step_sparse;
    } else {
        r.server = w * entries * (q->sparse ? s->agg_sparse : s->agg_dense) + n * s->step_dense;
    }
    /* --pull auto: the changed entries (8 bytes each) when fewer than a quarter of n. */
    if (changed * 4.0 < n) {
        r.server += changed * s->pull_sparse;
        r.pull = PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 8.0 * changed;
    } else {
        r.server += n * s->pull_dense;
        r.pull = PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 4.0 * n;
    }
    return r;
}

/* A min-heap of chunk ids: the ready chunks, lowest id (first needed by forward) on top. */
static void heap_push(int *h, int *len, int v)
{
    int i = (*len)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int heap_pop(int *h, int *len)
{
    int top = h[0], v = h[--*len], i = 0;
    for (;;) {
        int l = 2 * i + 1, m = l + 1 < *len && h[l + 1] < h[l] ? l + 1 : l;
        if (l >= *len || h[m] >= v)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*len)
        h[i] = v;
    return top;
}

static double maxd(double a, double b)
{
    return a > b ? a : b;
}

/* One server's resources in a prediction: when its downlink, its thread and its uplink
 * are next free, and how long each was busy in all. */
typedef struct server_sim {
    double in, thr, out;
    double in_busy, thr_busy, out_busy;
} server_sim_t;

/* A prediction's scratch and the quantities its steps share (pc_cost_predict). */
typedef struct sim {
    const pc_cost_t *c;
    const mode_def_t *def;
    const cchunk_t *ch; /* the mode's plan: nc chunks */
    const pc_cost_link_t *lk;
    int L, nc, W, S;
    double *end, *need; /* per layer: its backward's end, its forward's need */
    ccost_t *cc;        /* per chunk: its costs */
    double *sent, *upd; /* per chunk: when it leaves the worker, when its update is back */
    double *due;        /* powersgd, per chunk: when its pending answer (P^ or Q) is in */
    int *seq, *order;   /* hand-over order; the order chunks leave the worker */
    int *heap;          /* the pipelined compressor's ready chunks */
    int *stage;         /* powersgd, per chunk: 0 not sent, 1 awaits P^, 2 awaits Q, 3 done */
    server_sim_t *srv;  /* per server */
    pc_plan_t *plan;    /* ps: the runtime's server assignment */
    pc_plan_tensor_t *pt;
    double speed;              /* the compressor's speed-up: the pool's (pipelined), else 1 */
    double back_end;           /* when backward (and, inline, its compressions) ends */
    double up, down;           /* when the worker's uplink and downlink are next free */
    double up_busy, down_busy; /* their transfer times in all */
} sim_t;

static void sim_free(sim_t *m)
{
    pc_plan_destroy(m->plan);
    free(m->pt);
    free(m->srv);
    free(m->seq);
    free(m->sent);
    free(m->cc);
    free(m->end);
}

/* The scratch, and for ps the runtime's server assignment (pc_plan: largest first to the
 * least loaded) with the chunks as tensors of their own. More servers than chunks leave
 * the rest idle and assign exactly as nchunks servers do (each chunk takes a server still
 * empty). */
static int sim_alloc(sim_t *m, int servers)
{
    const int L = m->L, nc = m->nc;
    m->end = calloc((size_t)L * 2, sizeof(double));
    m->need = m->end ? m->end + L : NULL;
    m->cc = malloc(sizeof(ccost_t) * (size_t)nc);
    m->sent = malloc(sizeof(double) * (size_t)nc * 3);
    m->upd = m->sent ? m->sent + nc : NULL;
    m->due = m->sent ? m->sent + 2 * nc : NULL;
    m->seq = calloc((size_t)nc * 4, sizeof(int));
    m->order = m->seq ? m->seq + nc : NULL;
    m->heap = m->seq ? m->seq + 2 * nc : NULL;
    m->stage = m->seq ? m->seq + 3 * nc : NULL;
    m->S = m->def->allreduce ? 1 : (servers < nc ? servers : nc);
    m->srv = calloc((size_t)m->S, sizeof(server_sim_t));
    m->pt = m->def->allreduce ? NULL : malloc(sizeof(pc_plan_tensor_t) * (size_t)nc);
    if (!m->end || !m->cc || !m->sent || !m->seq || !m->srv || (!m->def->allreduce && !m->pt))
        return PC_ENOMEM;
    if (m->def->allreduce)
        return PC_OK;
    size_t most = 1;
    for (int i = 0; i < nc; i++) {
        m->pt[i] = (pc_plan_tensor_t){.n = m->ch[i].n};
        most = m->ch[i].n > most ? m->ch[i].n : most;
    }
    return pc_plan_create(m->pt, nc, most, m->S, &m->plan);
}

/* Backward from time 0, the last layer first: each layer's end, the hand-over order
 * (backward's, within a layer by id) and every chunk's costs; returns the compute time. */
static double sim_backward(sim_t *m)
{
    const pc_cost_t *c = m->c;
    double compute = 0;
    for (int l = m->L - 1; l >= 0; l--) {
        compute += c->layers[l].fwd + c->layers[l].bwd;
        m->end[l] = (l + 1 < m->L ? m->end[l + 1] : 0) + c->layers[l].bwd;
    }
    int ns = 0;
    for (int l = m->L - 1; l >= 0; l--)
        for (int i = 0; i < m->nc; i++)
            if (m->ch[i].layer == l)
                m->seq[ns++] = i;
    for (int i = 0; i < m->nc; i++)
        m->cc[i] = chunk_cost(c, m->def, &m->ch[i], m->W);
    m->back_end = m->end[0];
    return compute;
}

/* allreduce: the communication thread runs one allreduce per chunk as it becomes ready,
 * then the local step, in hand-over order. */
static void sim_allreduce(sim_t *m, pc_cost_result_t *r)
{
    const pc_cost_t *c = m->c;
    const double w = (double)m->W;
    double t = 0;
    for (int j = 0; j < m->nc; j++) {
        int i = m->seq[j];
        double n = (double)m->ch[i].n, ring = pc_cost_ring(4.0 * n, m->W, m->lk);
        double step = n * c->server.step_dense;
        t = maxd(t, m->end[m->ch[i].layer]) + ring + step;
        m->upd[i] = t;
        r->comm_busy += ring;
        r->server_busy += step;
        r->bytes_up += m->W > 1 ? 2.0 * (w - 1.0) / w * 4.0 * n : 0;
    }
    r->bytes_down = r->bytes_up;
}

/* Hand the chunks whose backward has ended by t to the pipelined compressor's heap. */
static void sim_ready(sim_t *m, double t, int *next, int *len)
{
    while (*next < m->nc && m->end[m->ch[m->seq[*next]].layer] <= t)
        heap_push(m->heap, len, m->seq[(*next)++]);
}

/* ps, step 1: the worker's compression, the order it picks (order[]) and when each chunk
 * leaves (sent[]). Pipelined, the compressor thread beside backprop takes the lowest id
 * among the chunks ready (--priority forward) and idles until the next is ready; inline,
 * each layer's chunks are compressed and sent by the backprop thread right after the
 * layer's backward, which waits for it. */
static void sim_compress(sim_t *m)
{
    const int nc = m->nc;
    double t = 0;
    if (m->def->pipelined) {
        int next = 0, len = 0;
        for (int j = 0; j < nc; j++) {
            sim_ready(m, t, &next, &len);
            if (len == 0) { /* idle: jump to the next hand-over */
                t = m->end[m->ch[m->seq[next]].layer];
                sim_ready(m, t, &next, &len);
            }
            int i = heap_pop(m->heap, &len);
            t += m->cc[i].compress / m->speed;
            m->sent[i] = t;
            m->order[j] = i;
        }
        return;
    }
    int j = 0;
    for (int l = m->L - 1; l >= 0; l--) {
        t += m->c->layers[l].bwd;
        for (; j < nc && m->ch[m->seq[j]].layer == l; j++) {
            t += m->cc[m->seq[j]].compress;
            m->sent[m->seq[j]] = t;
            m->order[j] = m->seq[j];
        }
    }
    m->back_end = t;
}

/* One message of chunk i leaving the worker at `sent` (push bytes) to its server, which
 * works `work` seconds on it once all W workers' are in and answers each (pull bytes):
 * the worker's uplink, the server's downlink (W messages), thread and uplink (W answers),
 * the worker's downlink, each taken in the order of the calls. Returns when the answer is
 * in at the worker. */
static double sim_pass(sim_t *m, int i, double sent, double push_bytes, double work,
                       double pull_bytes)
{
    const double B = m->lk->bandwidth, alpha = m->lk->latency, w = (double)m->W;
    server_sim_t *v = &m->srv[m->plan->chunks[i].server];
    double push = push_bytes / B, pull = pull_bytes / B;
    m->up = maxd(m->up, sent) + push;            /* the worker's uplink: its own message */
    v->in = maxd(v->in, sent) + w * push;        /* the server's downlink: W messages */
    double arrived = maxd(m->up, v->in) + alpha; /* the last worker's message is in */
    v->thr = maxd(v->thr, arrived) + work;
    v->out = maxd(v->out, v->thr) + w * pull; /* the server's uplink: W answers */
    m->down = maxd(m->down, v->thr) + pull;   /* the worker's downlink */
    m->up_busy += push;
    m->down_busy += pull;
    v->in_busy += w * push;
    v->thr_busy += work;
    v->out_busy += w * pull;
    return maxd(v->out, m->down) + alpha;
}

/* ps, the totals every mode reports: the busiest link direction and server thread, the
 * servers used, and per chunk the worker's codec time and the bytes each way. */
static void sim_totals(sim_t *m, pc_cost_result_t *r)
{
    for (int i = 0; i < m->nc; i++) {
        const ccost_t *k = &m->cc[i];
        r->compress += k->compress + k->round2 + k->finish;
        r->bytes_up += k->push + k->push2;
        r->bytes_down += k->pull + k->pull2;
    }
    r->comm_busy = maxd(m->up_busy, m->down_busy);
    for (int s = 0; s < m->S; s++) {
        r->comm_busy = maxd(r->comm_busy, maxd(m->srv[s].in_busy, m->srv[s].out_busy));
        r->server_busy = maxd(r->server_busy, m->srv[s].thr_busy);
        r->servers_used += m->plan->server_elems[s] > 0;
    }
}

/* ps, steps 2-4: push, server, pull, every resource taken in the order the chunks left. */
static void sim_exchange(sim_t *m)
{
    for (int j = 0; j < m->nc; j++) {
        int i = m->order[j];
        m->upd[i] = sim_pass(m, i, m->sent[i], m->cc[i].push, m->cc[i].server, m->cc[i].pull);
    }
}

/* The powersgd chunk whose answer is in earliest by t (stage 1 or 2), or -1. */
static int sim_answer(const sim_t *m, double t)
{
    int a = -1;
    for (int i = 0; i < m->nc; i++)
        if ((m->stage[i] == 1 || m->stage[i] == 2) && m->due[i] <= t &&
            (a < 0 || m->due[i] < m->due[a]))
            a = i;
    return a;
}

/* powersgd, steps 1-4 as one event loop on the compressor thread: an answer that is in
 * goes first (P^: round 2 and its send; Q: the worker's step, then the chunk is done),
 * then the lowest ready id's round 1 (or a dense chunk's compression); idle until the next
 * hand-over or answer otherwise. Each message takes the resources as it leaves. */
static void sim_lowrank(sim_t *m)
{
    int next = 0, len = 0, done = 0;
    double t = 0;
    while (done < m->nc) {
        sim_ready(m, t, &next, &len);
        int a = sim_answer(m, t);
        if (a >= 0 && m->stage[a] == 1) {
            t += m->cc[a].round2 / m->speed;
            m->due[a] = sim_pass(m, a, t, m->cc[a].push2, m->cc[a].server2, m->cc[a].pull2);
            m->stage[a] = 2;
        } else if (a >= 0) {
            t += m->cc[a].finish / m->speed;
            m->upd[a] = t;
            m->stage[a] = 3;
            done++;
        } else if (len > 0) {
            int i = heap_pop(m->heap, &len);
            t += m->cc[i].compress / m->speed;
            double back = sim_pass(m, i, t, m->cc[i].push, m->cc[i].server, m->cc[i].pull);
            m->stage[i] = m->ch[i].rows ? 1 : 3;
            done += m->ch[i].rows ? 0 : 1;
            m->due[i] = back;
            m->upd[i] = back;
        } else { /* idle: the next hand-over or answer (one is pending: done < nc) */
            double wake = next < m->nc ? m->end[m->ch[m->seq[next]].layer] : INFINITY;
            for (int i = 0; i < m->nc; i++)
                if (m->stage[i] == 1 || m->stage[i] == 2)
                    wake = m->due[i] < wake ? m->due[i] : wake;
            t = wake;
        }
    }
}

/* Step 5, the next forward: layer l runs once every chunk first needed there is back.
 * Returns the iteration's end. */
static double sim_forward(sim_t *m)
{
    const pc_cost_t *c = m->c;
    for (int i = 0; i < m->nc; i++)
        m->need[m->ch[i].layer] = maxd(m->need[m->ch[i].layer], m->upd[i]);
    double t = m->back_end;
    for (int l = 0; l < m->L; l++)
        t = maxd(t, m->need[l]) + c->layers[l].fwd;
    return t;
}

_Static_assert(sizeof(pc_cost_result_t) == 12 * sizeof(double),
               "no padding in pc_cost_result_t: predictions compare bytewise (test_cost)");

bool pc_cost_mode_pooled(pc_cost_mode_t mode)
{
    return (int)mode >= 0 && mode < PC_COST_MODES && !modes[mode].allreduce &&
           modes[mode].pipelined;
}

double pc_cost_pool_speedup(int n, double efficiency)
{
    return n <= 1 ? 1.0 : 1.0 + (double)(n - 1) * (efficiency > 0 ? efficiency : 1.0);
}

int pc_cost_predict(const pc_cost_t *c, pc_cost_mode_t mode, int workers, int servers,
                    const pc_cost_link_t *link, pc_cost_result_t *out)
{
    return pc_cost_predict_pool(c, mode, workers, servers, link, 1, out);
}

int pc_cost_predict_pool(const pc_cost_t *c, pc_cost_mode_t mode, int workers, int servers,
                         const pc_cost_link_t *link, int compressors, pc_cost_result_t *out)
{
    if (!c || !out || (int)mode < 0 || mode >= PC_COST_MODES || workers < 1 ||
        workers > PC_COST_MAX_RANKS || compressors < 1 || compressors > PC_COST_MAX_COMPRESSORS ||
        (compressors > 1 && !pc_cost_mode_pooled(mode)))
        return PC_EINVAL;
    const mode_def_t *def = &modes[mode];
    if (!def->allreduce && (servers < 1 || servers > PC_COST_MAX_RANKS))
        return PC_EINVAL;
    const pc_cost_link_t *lk = link ? link : &c->link;
    if (!link_ok(lk))
        return PC_EINVAL;
    const cplan_t *plan = def->lowrank ? &c->lr : &c->plain;
    sim_t m = {.c = c,
               .def = def,
               .ch = plan->chunks,
               .lk = lk,
               .L = c->nlayers,
               .nc = plan->n,
               .W = workers,
               .speed = pc_cost_pool_speedup(compressors, c->pool_efficiency)};
    int rc = sim_alloc(&m, servers);
    if (rc == PC_OK) {
        pc_cost_result_t r = {.compute = sim_backward(&m), .nchunks = m.nc};
        if (def->allreduce) {
            sim_allreduce(&m, &r);
        } else {
            if (def->lowrank) {
                sim_lowrank(&m);
            } else {
                sim_compress(&m);
                sim_exchange(&m);
            }
            sim_totals(&m, &r);
        }
        r.iter = sim_forward(&m);
        r.exposed = r.iter - r.compute;
        r.compressors = compressors;
        r.compress_busy = r.compress / m.speed;
        for (int l = 0; l < c->nlayers; l++)
            r.backward += c->layers[l].bwd;
        r.keeps_up = r.compress_busy <= r.backward;
        *out = r;
    }
    sim_free(&m);
    return rc;
}

int pc_cost_pool_size(const pc_cost_t *c, pc_cost_mode_t mode, int workers, int servers,
                      const pc_cost_link_t *link, int max, int *n, pc_cost_result_t *out)
{
    if (!n || max < 1 || max > PC_COST_MAX_COMPRESSORS)
        return PC_EINVAL;
    if (!pc_cost_mode_pooled(mode))
        max = 1;
    /* The least N that fits: compress_busy falls as N grows (the speed-up does), so the
     * first that fits is the least; at most max predictions. */
    pc_cost_result_t r;
    int k = 1, rc;
    for (;; k++) {
        if ((rc = pc_cost_predict_pool(c, mode, workers, servers, link, k, &r)) != PC_OK)
            return rc;
        if (k == max || r.keeps_up)
            break;
    }
    *n = k;
    if (out)
        *out = r;
    return PC_OK;
}

int pc_cost_choose(const pc_cost_t *c, unsigned candidates, int ranks, int servers,
                   const pc_cost_link_t *link, pc_cost_choice_t *out)
{
    if (!c || !out || ranks < 1 || ranks > PC_COST_MAX_RANKS || servers < 0 ||
        (candidates & ~((1u << PC_COST_MODES) - 1)) != 0)
        return PC_EINVAL;
    pc_cost_choice_t r = {.best = PC_COST_MODES};
    for (int m = 0; m < PC_COST_MODES; m++) {
        if (!(candidates & (1u << m)))
            continue;
        int W = m == PC_COST_ALLREDUCE ? ranks : ranks - servers;
        if (W < 1 || (m != PC_COST_ALLREDUCE && servers < 1))
            continue; /* no layout of this mode on these ranks */
        int rc = pc_cost_predict(c, (pc_cost_mode_t)m, W, m == PC_COST_ALLREDUCE ? 0 : servers,
                                 link, &r.pred[m]);
        if (rc != PC_OK)
            return rc;
        r.candidate[m] = true;
        r.workers[m] = W;
        r.rate[m] = r.pred[m].iter > 0 ? W / r.pred[m].iter : HUGE_VAL;
        if (r.best == PC_COST_MODES || r.rate[m] > r.rate[r.best])
            r.best = (pc_cost_mode_t)m;
    }
    if (r.best == PC_COST_MODES)
        return PC_EINVAL;
    *out = r;
    return PC_OK;
}

const char *pc_cost_mode_name(int mode)
{
    static const char *const names[] = {
#define MODE_NAME(name, text, e2e) text,
        PC_COST_MODE_TABLE(MODE_NAME)
#undef MODE_NAME
    };
    return mode >= 0 && mode < PC_COST_MODES ? names[mode] : "?";
}

int pc_cost_mode_e2e(int mode)
{
    static const int nums[] = {
#define MODE_E2E(name, text, e2e) e2e,
        PC_COST_MODE_TABLE(MODE_E2E)
#undef MODE_E2E
    };
    return mode >= 0 && mode < PC_COST_MODES ? nums[mode] : 0;
}

int pc_cost_mode_parse(const char *text, pc_cost_mode_t *out)
{
    if (!text || !out)
        return PC_EINVAL;
    for (int m = 0; m < PC_COST_MODES; m++) {
        char num[4];
        snprintf(num, sizeof(num), "%d", pc_cost_mode_e2e(m));
        if (strcmp(text, pc_cost_mode_name(m)) == 0 || strcmp(text, num) == 0) {
            *out = (pc_cost_mode_t)m;
            return PC_OK;
        }
    }
    return PC_EINVAL;
}

const char *pc_cost_codec_name(int codec)
{
    static const char *const names[] = {
#define CODEC_NAME(name, text) text,
        PC_COST_CODEC_TABLE(CODEC_NAME)
#undef CODEC_NAME
    };
    return codec >= 0 && codec < PC_COST_CODECS ? names[codec] : "?";
}
