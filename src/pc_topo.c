/* pc_topo: hwloc topology, node-wide thread placement plans, binding with verification.
 *
 * See pc_topo.h for the placement rules. Plans store, per (rank, thread), a logical core
 * index and the cpuset to bind to (the core's PUs, restricted to the rank's launcher
 * cpuset when the plan came from that cpuset). */
#include "config.h"

#include <ctype.h>
#include <hwloc.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_topo.h"

struct pc_topo {
    hwloc_topology_t h;
    int ncores;
    int npus;
    bool real;
};

typedef struct place {
    int core;           /* logical core index, -1 unbound */
    hwloc_bitmap_t set; /* PUs to bind to; NULL when unbound */
    bool shared;
} place_t;

struct pc_topo_plan {
    int nranks;
    int ncores; /* cores in the topology, for the description */
    int nthreads_total;
    int nshared;
    place_t *places;       /* nranks * PC_TOPO_MAX_THREADS */
    pc_topo_rank_t *ranks; /* copy of the input, for names in messages */
};

int pc_topo_create(const char *synthetic, pc_topo_t **out, char *err, size_t errlen)
{
    pc_topo_t *t = calloc(1, sizeof(*t));
    if (!t)
        return PC_ENOMEM;
    if (hwloc_topology_init(&t->h) != 0) {
        free(t);
        return pc_error_fmt(PC_ETOPO, err, errlen, "hwloc_topology_init failed");
    }
    if (synthetic && hwloc_topology_set_synthetic(t->h, synthetic) != 0) {
        hwloc_topology_destroy(t->h);
        free(t);
        return pc_error_fmt(PC_ETOPO, err, errlen, "bad synthetic topology '%s'", synthetic);
    }
    if (hwloc_topology_load(t->h) != 0) {
        hwloc_topology_destroy(t->h);
        free(t);
        return pc_error_fmt(PC_ETOPO, err, errlen, "hwloc could not load the topology");
    }
    t->ncores = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE);
    t->npus = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU);
    t->real = hwloc_topology_is_thissystem(t->h) != 0;
    if (t->ncores <= 0 || t->npus <= 0) {
        hwloc_topology_destroy(t->h);
        free(t);
        return pc_error_fmt(PC_ETOPO, err, errlen, "topology has no cores");
    }
    *out = t;
    return PC_OK;
}

void pc_topo_destroy(pc_topo_t *topo)
{
    if (!topo)
        return;
    hwloc_topology_destroy(topo->h);
    free(topo);
}

int pc_topo_ncores(const pc_topo_t *topo)
{
    return topo->ncores;
}

int pc_topo_npus(const pc_topo_t *topo)
{
    return topo->npus;
}

bool pc_topo_is_real(const pc_topo_t *topo)
{
    return topo->real;
}

int pc_topo_self(const pc_topo_t *topo, int rank, int nthreads, const char *const names[],
                 pc_topo_rank_t *me)
{
    if (nthreads < 1 || nthreads > PC_TOPO_MAX_THREADS)
        return PC_EINVAL;
    memset(me, 0, sizeof(*me));
    me->rank = rank;
    me->nthreads = nthreads;
    for (int i = 0; i < nthreads; i++)
        snprintf(me->names[i], PC_TOPO_NAME_LEN, "%s", names && names[i] ? names[i] : "thread");
    if (!topo->real)
        return PC_OK; /* synthetic: the whole machine */
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return PC_ENOMEM;
    int rc = PC_OK;
    if (hwloc_get_cpubind(topo->h, set, HWLOC_CPUBIND_PROCESS) != 0)
        rc = PC_ETOPO;
    else if (hwloc_bitmap_list_snprintf(me->cpuset, sizeof(me->cpuset), set) >=
             (int)sizeof(me->cpuset))
        rc = PC_ETOPO; /* too long to travel: refuse rather than plan on a cut set */
    hwloc_bitmap_free(set);
    return rc;
}

/* The cpuset a rank may use: its launcher's, or the topology's allowed set. */
static int rank_cpuset(const pc_topo_t *topo, const pc_topo_rank_t *r, hwloc_bitmap_t set,
                       char *err, size_t errlen)
{
    hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(topo->h);
    if (r->cpuset[0] == '\0') {
        hwloc_bitmap_copy(set, allowed);
    } else if (hwloc_bitmap_list_sscanf(set, r->cpuset) != 0) {
        return pc_error_fmt(PC_ETOPO, err, errlen, "rank %d: unreadable cpuset '%s'", r->rank,
                            r->cpuset);
    } else {
        hwloc_bitmap_and(set, set, allowed);
    }
    if (hwloc_bitmap_iszero(set))
        return pc_error_fmt(PC_ETOPO, err, errlen, "rank %d: cpuset '%s' has no usable PU", r->rank,
                            r->cpuset);
    return PC_OK;
}

void pc_topo_plan_destroy(pc_topo_plan_t *plan)
{
    if (!plan)
        return;
    if (plan->places) {
        for (int i = 0; i < plan->nranks * PC_TOPO_MAX_THREADS; i++)
            hwloc_bitmap_free(plan->places[i].set);
    }
    free(plan->places);
    free(plan->ranks);
    free(plan);
}

static place_t *place_at(const pc_topo_plan_t *plan, int r, int t)
{
    return &plan->places[r * PC_TOPO_MAX_THREADS + t];
}

/* A thread's claim on a core of its own when cores are short: backprop threads (thread 0
 * of a worker) first, they are the critical path; then server threads; then the rest
 * (compressor threads: background work by design). */
static int thread_priority(const pc_topo_rank_t *r, int t)
{
    if (t > 0)
        return 2;
    return strcmp(r->names[0], "server") == 0 ? 1 : 0;
}

/* Fewer cores than threads in a group (ranks with the same cpuset, members[0..nm)):
 * threads in priority order (then local rank, then thread) each take the least-loaded
 * core, preferring one that holds no other thread of their rank, then the lowest. So
 * backprop threads spread over the cores before anything shares with them, and a worker's
 * compressor avoids its own backprop's core. */
static void plan_short(pc_topo_plan_t *plan, const int *members, int nm, const int *cores, int nc,
                       int *load)
{
    for (int c = 0; c < nc; c++)
        load[c] = 0;
    for (int prio = 0; prio <= 2; prio++)
        for (int i = 0; i < nm; i++) {
            int r = members[i];
            for (int t = 0; t < plan->ranks[r].nthreads; t++) {
                if (thread_priority(&plan->ranks[r], t) != prio)
                    continue;
                int best = -1;
                bool best_mine = true;
                for (int c = 0; c < nc; c++) {
                    bool mine = false;
                    for (int u = 0; u < plan->ranks[r].nthreads; u++)
                        if (u != t && place_at(plan, r, u)->core == cores[c])
                            mine = true;
                    if (best < 0 || load[c] < load[best] ||
                        (load[c] == load[best] && best_mine && !mine)) {
                        best = c;
                        best_mine = mine;
                    }
                }
                place_at(plan, r, t)->core = cores[best];
                load[best]++;
            }
        }
}

/* Assign cores for ranks with --bind auto. Ranks with equal cpusets form a group that
 * shares the group's cores: with enough cores, a thread's slot counts across the group in
 * local-rank order (a rank's threads on neighbouring cores); with too few, plan_short. */
static int plan_auto(const pc_topo_t *topo, pc_topo_plan_t *plan, hwloc_bitmap_t *sets, char *err,
                     size_t errlen)
{
    int *cores = malloc(sizeof(int) * (size_t)topo->ncores);
    int *load = malloc(sizeof(int) * (size_t)topo->ncores);
    int *members = malloc(sizeof(int) * (size_t)plan->nranks);
    if (!cores || !load || !members) {
        free(cores);
        free(load);
        free(members);
        return PC_ENOMEM;
    }
    int rc = PC_OK;
    for (int r = 0; r < plan->nranks && rc == PC_OK; r++) {
        /* Groups are planned once, by their first rank. */
        bool first = true;
        for (int q = 0; q < r && first; q++)
            if (hwloc_bitmap_isequal(sets[q], sets[r]))
                first = false;
        if (!first)
            continue;
        int nm = 0, nthreads = 0;
        for (int q = r; q < plan->nranks; q++)
            if (hwloc_bitmap_isequal(sets[q], sets[r])) {
                members[nm++] = q;
                nthreads += plan->ranks[q].nthreads;
            }
        int nc = 0;
        for (int c = 0; c < topo->ncores; c++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo->h, HWLOC_OBJ_CORE, (unsigned)c);
            if (core && hwloc_bitmap_intersects(core->cpuset, sets[r]))
                cores[nc++] = c;
        }
        if (nc == 0) {
            rc = pc_error_fmt(PC_ETOPO, err, errlen, "rank %d: cpuset '%s' covers no core",
                              plan->ranks[r].rank, plan->ranks[r].cpuset);
            break;
        }
        if (nthreads > nc) {
            plan_short(plan, members, nm, cores, nc, load);
        } else {
            int slot = 0;
            for (int i = 0; i < nm; i++) {
                for (int t = 0; t < plan->ranks[members[i]].nthreads; t++)
                    place_at(plan, members[i], t)->core = cores[slot + t];
                slot += plan->ranks[members[i]].nthreads;
            }
        }
        for (int i = 0; i < nm; i++)
            for (int t = 0; t < plan->ranks[members[i]].nthreads; t++) {
                place_t *p = place_at(plan, members[i], t);
                hwloc_obj_t core =
                    hwloc_get_obj_by_type(topo->h, HWLOC_OBJ_CORE, (unsigned)p->core);
                hwloc_bitmap_and(p->set, core->cpuset, sets[members[i]]);
            }
    }
    free(cores);
    free(load);
    free(members);
    return rc;
}

static int plan_list(const pc_topo_t *topo, pc_topo_plan_t *plan, const pc_bind_t *bind, char *err,
                     size_t errlen)
{
    int need = 0;
    for (int r = 0; r < plan->nranks; r++)
        need += plan->ranks[r].nthreads;
    if (bind->ncores < need)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--bind: the list names %d cores but this node's ranks have %d threads",
                            bind->ncores, need);
    int k = 0;
    for (int r = 0; r < plan->nranks; r++) {
        for (int t = 0; t < plan->ranks[r].nthreads; t++, k++) {
            int c = bind->cores[k];
            if (c >= topo->ncores)
                return pc_error_fmt(PC_EUSAGE, err, errlen,
                                    "--bind: core %d does not exist (this node has %d cores)", c,
                                    topo->ncores);
            hwloc_obj_t core = hwloc_get_obj_by_type(topo->h, HWLOC_OBJ_CORE, (unsigned)c);
            place_t *p = place_at(plan, r, t);
            p->core = c;
            hwloc_bitmap_copy(p->set, core->cpuset);
        }
    }
    return PC_OK;
}

int pc_topo_plan_create(const pc_topo_t *topo, const pc_bind_t *bind, const pc_topo_rank_t *ranks,
                        int nranks, pc_topo_plan_t **out, char *err, size_t errlen)
{
    if (!topo || !bind || !ranks || nranks < 1 || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "invalid placement request");
    for (int r = 0; r < nranks; r++)
        if (ranks[r].nthreads < 1 || ranks[r].nthreads > PC_TOPO_MAX_THREADS)
            return pc_error_fmt(PC_EINVAL, err, errlen, "rank %d asks for %d threads (1..%d)",
                                ranks[r].rank, ranks[r].nthreads, PC_TOPO_MAX_THREADS);
    int rc = PC_ENOMEM;
    hwloc_bitmap_t *sets = NULL;
    pc_topo_plan_t *plan = calloc(1, sizeof(*plan));
    if (!plan)
        goto err;
    plan->nranks = nranks;
    plan->ncores = topo->ncores;
    plan->places = calloc((size_t)nranks * PC_TOPO_MAX_THREADS, sizeof(place_t));
    plan->ranks = malloc(sizeof(pc_topo_rank_t) * (size_t)nranks);
    sets = calloc((size_t)nranks, sizeof(hwloc_bitmap_t));
    if (!plan->places || !plan->ranks || !sets)
        goto err;
    memcpy(plan->ranks, ranks, sizeof(pc_topo_rank_t) * (size_t)nranks);
    for (int i = 0; i < nranks * PC_TOPO_MAX_THREADS; i++) {
        plan->places[i].core = -1;
        plan->places[i].set = hwloc_bitmap_alloc();
        if (!plan->places[i].set)
            goto err;
    }
    for (int r = 0; r < nranks; r++) {
        plan->nthreads_total += ranks[r].nthreads;
        sets[r] = hwloc_bitmap_alloc();
        if (!sets[r])
            goto err;
        rc = rank_cpuset(topo, &ranks[r], sets[r], err, errlen);
        if (rc != PC_OK)
            goto err;
    }
    if (bind->mode == PC_BIND_AUTO)
        rc = plan_auto(topo, plan, sets, err, errlen);
    else if (bind->mode == PC_BIND_LIST)
        rc = plan_list(topo, plan, bind, err, errlen);
    else
        rc = PC_OK;
    if (rc != PC_OK)
        goto err;
    /* Sharing: count planned threads per core across the node. */
    int *count = calloc((size_t)topo->ncores, sizeof(int));
    if (!count) {
        rc = PC_ENOMEM;
        goto err;
    }
    for (int r = 0; r < nranks; r++)
        for (int t = 0; t < ranks[r].nthreads; t++)
            if (place_at(plan, r, t)->core >= 0)
                count[place_at(plan, r, t)->core]++;
    for (int c = 0; c < topo->ncores; c++)
        plan->nshared += count[c] > 1;
    for (int r = 0; r < nranks; r++)
        for (int t = 0; t < ranks[r].nthreads; t++) {
            place_t *p = place_at(plan, r, t);
            p->shared = p->core >= 0 && count[p->core] > 1;
        }
    free(count);
    for (int r = 0; r < nranks; r++)
        hwloc_bitmap_free(sets[r]);
    free(sets);
    *out = plan;
    return PC_OK;
err:
    if (sets) {
        for (int r = 0; r < nranks; r++)
            hwloc_bitmap_free(sets[r]);
        free(sets);
    }
    pc_topo_plan_destroy(plan);
    if (rc == PC_ENOMEM)
        pc_error_fmt(rc, err, errlen, "out of memory planning placement");
    return rc;
}

int pc_topo_plan_core(const pc_topo_plan_t *plan, int r, int t)
{
    if (r < 0 || r >= plan->nranks || t < 0 || t >= plan->ranks[r].nthreads)
        return -1;
    return place_at(plan, r, t)->core;
}

bool pc_topo_plan_shared(const pc_topo_plan_t *plan, int r, int t)
{
    if (r < 0 || r >= plan->nranks || t < 0 || t >= plan->ranks[r].nthreads)
        return false;
    return place_at(plan, r, t)->shared;
}

int pc_topo_plan_nshared(const pc_topo_plan_t *plan)
{
    return plan->nshared;
}

/* Append to buf at *pos, never past len; keeps *pos <= len - 1. */
static void append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
    if (*pos + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *pos, len - *pos, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos += (size_t)n < len - *pos ? (size_t)n : len - *pos - 1;
}

void pc_topo_plan_describe(const pc_topo_plan_t *plan, char *buf, size_t len)
{
    size_t pos = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    bool any_bound = false;
    for (int r = 0; r < plan->nranks; r++)
        for (int t = 0; t < plan->ranks[r].nthreads; t++)
            any_bound |= place_at(plan, r, t)->core >= 0;
    if (!any_bound) {
        append(buf, len, &pos, "placement: %d threads unbound (--bind none)", plan->nthreads_total);
        return;
    }
    append(buf, len, &pos, "placement: %d threads of %d ranks on %d cores", plan->nthreads_total,
           plan->nranks, plan->ncores);
    if (plan->nshared == 0) {
        append(buf, len, &pos, "; one core each");
        return;
    }
    append(buf, len, &pos, "; fewer cores than threads, sharing:");
    for (int c = 0; c < plan->ncores; c++) {
        int n = 0;
        for (int r = 0; r < plan->nranks; r++)
            for (int t = 0; t < plan->ranks[r].nthreads; t++)
                n += place_at(plan, r, t)->core == c;
        if (n < 2)
            continue;
        append(buf, len, &pos, " core %d {", c);
        const char *sep = "";
        for (int r = 0; r < plan->nranks; r++)
            for (int t = 0; t < plan->ranks[r].nthreads; t++)
                if (place_at(plan, r, t)->core == c) {
                    append(buf, len, &pos, "%sr%d.%s", sep, plan->ranks[r].rank,
                           plan->ranks[r].names[t]);
                    sep = " ";
                }
        append(buf, len, &pos, "}");
    }
}

int pc_topo_plan_bind(const pc_topo_t *topo, const pc_topo_plan_t *plan, int r, int t, char *err,
                      size_t errlen)
{
    if (r < 0 || r >= plan->nranks || t < 0 || t >= plan->ranks[r].nthreads)
        return pc_error_fmt(PC_EINVAL, err, errlen, "no planned thread %d of local rank %d", t, r);
    const place_t *p = place_at(plan, r, t);
    if (p->core < 0)
        return PC_OK;
    if (!topo->real)
        return pc_error_fmt(PC_ETOPO, err, errlen, "cannot bind threads on a synthetic topology");
    char want[PC_TOPO_CPUSET_LEN];
    hwloc_bitmap_list_snprintf(want, sizeof(want), p->set);
    if (hwloc_set_cpubind(topo->h, p->set, HWLOC_CPUBIND_THREAD | HWLOC_CPUBIND_STRICT) != 0 &&
        hwloc_set_cpubind(topo->h, p->set, HWLOC_CPUBIND_THREAD) != 0)
        return pc_error_fmt(PC_ETOPO, err, errlen, "binding %s to PUs %s failed",
                            plan->ranks[r].names[t], want);
    hwloc_bitmap_t got = hwloc_bitmap_alloc();
    if (!got)
        return PC_ENOMEM;
    int rc = PC_OK;
    if (hwloc_get_cpubind(topo->h, got, HWLOC_CPUBIND_THREAD) != 0 ||
        !hwloc_bitmap_isequal(got, p->set)) {
        char have[PC_TOPO_CPUSET_LEN];
        hwloc_bitmap_list_snprintf(have, sizeof(have), got);
        rc = pc_error_fmt(PC_ETOPO, err, errlen, "%s: asked for PUs %s, bound to %s",
                          plan->ranks[r].names[t], want, have);
        goto out;
    }
    /* The kernel migrates a thread at its next scheduling point; give it a few. */
    rc = PC_ETOPO;
    for (int tries = 0; tries < 100 && rc != PC_OK; tries++) {
        if (hwloc_get_last_cpu_location(topo->h, got, HWLOC_CPUBIND_THREAD) == 0 &&
            hwloc_bitmap_isincluded(got, p->set))
            rc = PC_OK;
        else
            sched_yield();
    }
    if (rc != PC_OK)
        pc_error_fmt(rc, err, errlen, "%s: bound to PUs %s but still running elsewhere",
                     plan->ranks[r].names[t], want);
out:
    hwloc_bitmap_free(got);
    return rc;
}

/* ---- --bind: the flag's value ------------------------------------------------------ */

int pc_topo_bind_parse(const char *text, pc_bind_t *out, char *err, size_t errlen)
{
    if (strcmp(text, "auto") == 0) {
        out->mode = PC_BIND_AUTO;
        out->ncores = 0;
        return PC_OK;
    }
    if (strcmp(text, "none") == 0) {
        out->mode = PC_BIND_NONE;
        out->ncores = 0;
        return PC_OK;
    }
    pc_bind_t b = {.mode = PC_BIND_LIST, .ncores = 0};
    const char *p = text;
    for (;;) {
        char *end;
        if (!isdigit((unsigned char)*p))
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "'%s' is not auto, none or a list of cores like 0,2,4-7", text);
        long lo = strtol(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p))
                return pc_error_fmt(PC_EUSAGE, err, errlen, "'%s': a range needs an upper bound",
                                    text);
            hi = strtol(p, &end, 10);
            p = end;
        }
        if (lo > 65535 || hi > 65535 || hi < lo)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "'%s': bad core range %ld-%ld", text, lo,
                                hi);
        for (long c = lo; c <= hi; c++) {
            if (b.ncores == PC_TOPO_BIND_MAX)
                return pc_error_fmt(PC_EUSAGE, err, errlen, "'%s': more than %d cores", text,
                                    PC_TOPO_BIND_MAX);
            b.cores[b.ncores++] = (int)c;
        }
        if (*p == '\0')
            break;
        if (*p != ',')
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "'%s' is not auto, none or a list of cores like 0,2,4-7", text);
        p++;
    }
    *out = b;
    return PC_OK;
}
