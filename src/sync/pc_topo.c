/* pc_topo: hwloc topology, node-wide thread placement plans, binding with verification,
 * and the CPU locality of PCI devices (GPUs).
 *
 * See pc_topo.h for the placement rules. Plans store, per (rank, thread), a logical core
 * index and the cpuset to bind to (the core's PUs, restricted to the rank's launcher
 * cpuset when the plan came from that cpuset), and whether that cpuset lies inside the
 * rank's `near` set (the cores next to its GPU). */
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
    bool near; /* bound, and set lies inside the rank's `near` cpuset */
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
    if (!synthetic) {
        /* PCI devices and bridges, for pc_topo_pci_cpuset: only the important ones (GPUs,
         * NICs, storage; hwloc skips the rest while discovering). No OS devices: those come
         * from hwloc's CUDA, NVML, OpenCL... plugins, which would initialise the GPU
         * drivers inside every rank at start-up, and a bus id finds the PCI device alone.
         * I/O objects carry no cpuset: cores, PUs and the allowed cpuset do not change. A
         * failure here only means no I/O objects (pc_topo_pci_cpuset: PC_ENOENT). */
        (void)hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
        (void)hwloc_topology_set_type_filter(t->h, HWLOC_OBJ_OS_DEVICE,
                                             HWLOC_TYPE_FILTER_KEEP_NONE);
#if HWLOC_API_VERSION >= 0x00020100
        /* On Linux hwloc's own backend reads the PCI devices and their locality from sysfs;
         * the libpciaccess plugin ("pci") would only read them again, slower, and it leaks
         * about 1 KB per load (LeakSanitizer fails every test that loads a topology). */
        (void)hwloc_topology_set_components(t->h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
#endif
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

int pc_topo_cores_in(const pc_topo_t *topo, const char *cpuset)
{
    if (!cpuset || !cpuset[0])
        return topo->ncores;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return 0;
    int n = 0;
    if (hwloc_bitmap_list_sscanf(set, cpuset) == 0)
        for (int c = 0; c < topo->ncores; c++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo->h, HWLOC_OBJ_CORE, (unsigned)c);
            n += core && hwloc_bitmap_intersects(core->cpuset, set);
        }
    hwloc_bitmap_free(set);
    return n;
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

/* Read 1..8 hex digits at *p into *out and advance *p past them; returns how many, or -1
 * when there are none or more than 8 (values are at most 32 bits). */
static int hex_field(const char **p, unsigned *out)
{
    unsigned v = 0;
    int n = 0;
    while (isxdigit((unsigned char)**p)) {
        if (++n > 8)
            return -1;
        int c = tolower((unsigned char)**p);
        v = v * 16 + (unsigned)(isdigit(c) ? c - '0' : c - 'a' + 10);
        (*p)++;
    }
    *out = v;
    return n > 0 ? n : -1;
}

/* "[DOMAIN:]BUS:DEVICE.FUNCTION" in hex, as cudaDeviceGetPCIBusId writes it: domain 1-8
 * digits (hwloc's is 32 bits), bus 1-2, device 1-2 (at most 0x1f), function 1 (at most 7),
 * nothing after. Returns 0, or -1 for anything else. */
static int parse_busid(const char *text, unsigned *domain, unsigned *bus, unsigned *dev,
                       unsigned *func)
{
    const char *p = text;
    unsigned f[3];
    int nd[3], n = 0;
    for (;;) { /* two or three fields separated by ':' */
        if ((nd[n] = hex_field(&p, &f[n])) < 0)
            return -1;
        n++;
        if (*p != ':' || n == 3)
            break;
        p++;
    }
    if (n < 2 || *p != '.')
        return -1;
    p++;
    int k = n - 2; /* index of the bus field */
    *domain = n == 3 ? f[0] : 0;
    *bus = f[k];
    *dev = f[k + 1];
    if (nd[k] > 2 || nd[k + 1] > 2 || *dev > 0x1f || hex_field(&p, func) != 1 || *func > 7 ||
        *p != '\0')
        return -1;
    return 0;
}

int pc_topo_pci_cpuset(const pc_topo_t *topo, const char *busid, char *cpuset, size_t len,
                       char *err, size_t errlen)
{
    if (cpuset && len > 0)
        cpuset[0] = '\0';
    if (!topo || !busid || !cpuset || len == 0)
        return pc_error_fmt(PC_EINVAL, err, errlen, "PCI locality: no bus id or no buffer");
    unsigned domain = 0, bus = 0, dev = 0, func = 0;
    if (parse_busid(busid, &domain, &bus, &dev, &func) != 0)
        return pc_error_fmt(
            PC_EINVAL, err, errlen,
            "'%s' is not a PCI bus id like 0000:3b:00.0 ([domain:]bus:device.function)", busid);
    if (!topo->real)
        return pc_error_fmt(PC_ENOENT, err, errlen,
                            "PCI device %04x:%02x:%02x.%x: a synthetic topology has no I/O devices",
                            domain, bus, dev, func);
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topo->h, domain, bus, dev, func);
    if (!pci)
        return pc_error_fmt(PC_ENOENT, err, errlen,
                            "PCI device %04x:%02x:%02x.%x is not in hwloc's topology (no such "
                            "device, not one hwloc keeps, or no I/O discovery)",
                            domain, bus, dev, func);
    /* I/O objects have no cpuset: the first ancestor that is not I/O (a package, a group
     * of cores, the machine: where hwloc attached the device) has it. */
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo->h, pci);
    if (!anc || !anc->cpuset || hwloc_bitmap_iszero(anc->cpuset))
        return pc_error_fmt(PC_ENOENT, err, errlen,
                            "PCI device %04x:%02x:%02x.%x: hwloc gives it no CPU locality", domain,
                            bus, dev, func);
    int n = hwloc_bitmap_list_snprintf(cpuset, len, anc->cpuset);
    if (n < 0 || (size_t)n >= len) {
        cpuset[0] = '\0';
        return pc_error_fmt(PC_ERANGE, err, errlen,
                            "PCI device %04x:%02x:%02x.%x: its cpuset needs %d bytes, %zu given",
                            domain, bus, dev, func, n + 1, len);
    }
    return PC_OK;
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

/* True when core c's PUs inside set lie in want (the rank's cpuset near its GPU); tmp is
 * scratch. */
static bool core_near(const pc_topo_t *topo, int c, hwloc_const_bitmap_t set,
                      hwloc_const_bitmap_t want, hwloc_bitmap_t tmp)
{
    hwloc_obj_t core = hwloc_get_obj_by_type(topo->h, HWLOC_OBJ_CORE, (unsigned)c);
    hwloc_bitmap_and(tmp, core->cpuset, set);
    return !hwloc_bitmap_iszero(tmp) && hwloc_bitmap_isincluded(tmp, want);
}

/* Fewer cores than threads in a group (ranks with the same cpuset, members[0..nm)):
 * threads in priority order (then local rank, then thread) each take the least-loaded
 * core, preferring one that holds no other thread of their rank, then one near the rank's
 * GPU (want[r], NULL without one), then the lowest. So backprop threads spread over the
 * cores before anything shares with them, and a worker's compressor avoids its own
 * backprop's core (time-sharing with it would serialise the two even near the GPU). */
static void plan_short(const pc_topo_t *topo, pc_topo_plan_t *plan, const int *members, int nm,
                       const int *cores, int nc, int *load, hwloc_bitmap_t *sets,
                       hwloc_bitmap_t *want, hwloc_bitmap_t tmp)
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
                bool best_mine = true, best_near = false;
                for (int c = 0; c < nc; c++) {
                    bool mine = false;
                    for (int u = 0; u < plan->ranks[r].nthreads; u++)
                        if (u != t && place_at(plan, r, u)->core == cores[c])
                            mine = true;
                    bool near = want[r] && core_near(topo, cores[c], sets[r], want[r], tmp);
                    bool better;
                    if (best < 0)
                        better = true;
                    else if (load[c] != load[best])
                        better = load[c] < load[best];
                    else if (mine != best_mine)
                        better = !mine;
                    else
                        better = near && !best_near; /* never for a rank without a GPU */
                    if (better) {
                        best = c;
                        best_mine = mine;
                        best_near = near;
                    }
                }
                place_at(plan, r, t)->core = cores[best];
                load[best]++;
            }
        }
}

/* Assign cores for ranks with --bind auto. Ranks with equal cpusets form a group that
 * shares the group's cores. With enough cores, the ranks near a GPU (want[r] = their cpuset
 * & near, NULL for the others) first take the free cores inside want[r], in local-rank
 * order; then every thread still unplaced takes the lowest free core, in local-rank order:
 * without GPUs, a thread's slot counts across the group (a rank's threads on neighbouring
 * cores). With too few cores, plan_short. */
static int plan_auto(const pc_topo_t *topo, pc_topo_plan_t *plan, hwloc_bitmap_t *sets,
                     hwloc_bitmap_t *want, char *err, size_t errlen)
{
    int *cores = malloc(sizeof(int) * (size_t)topo->ncores);
    int *load = malloc(sizeof(int) * (size_t)topo->ncores);
    int *members = malloc(sizeof(int) * (size_t)plan->nranks);
    hwloc_bitmap_t tmp = hwloc_bitmap_alloc();
    if (!cores || !load || !members || !tmp) {
        free(cores);
        free(load);
        free(members);
        hwloc_bitmap_free(tmp);
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
            plan_short(topo, plan, members, nm, cores, nc, load, sets, want, tmp);
        } else {
            for (int c = 0; c < nc; c++)
                load[c] = 0; /* here: taken */
            for (int i = 0; i < nm; i++) {
                int q = members[i];
                for (int t = 0; t < plan->ranks[q].nthreads && want[q]; t++)
                    for (int c = 0; c < nc; c++)
                        if (!load[c] && core_near(topo, cores[c], sets[q], want[q], tmp)) {
                            place_at(plan, q, t)->core = cores[c];
                            load[c] = 1;
                            break;
                        }
            }
            for (int i = 0; i < nm; i++)
                for (int t = 0; t < plan->ranks[members[i]].nthreads; t++) {
                    place_t *p = place_at(plan, members[i], t);
                    for (int c = 0; c < nc && p->core < 0; c++)
                        if (!load[c]) {
                            p->core = cores[c];
                            load[c] = 1;
                        }
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
    hwloc_bitmap_free(tmp);
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

/* Free an array of n bitmaps (NULL entries and a NULL array accepted). */
static void free_sets(hwloc_bitmap_t *sets, int n)
{
    if (!sets)
        return;
    for (int i = 0; i < n; i++)
        hwloc_bitmap_free(sets[i]);
    free(sets);
}

/* Rank rk's sets: its cpuset (*set), and when it names the cores near its GPU those (&
 * allowed: *near) and, for --bind auto, the part of its cpuset near them (*want); both
 * stay NULL for a rank without a GPU. PC_ENOMEM (the caller says it), or an error named
 * in err. */
static int rank_sets(const pc_topo_t *topo, const pc_topo_rank_t *rk, hwloc_bitmap_t *set,
                     hwloc_bitmap_t *near, hwloc_bitmap_t *want, char *err, size_t errlen)
{
    if (!(*set = hwloc_bitmap_alloc()))
        return PC_ENOMEM;
    int rc = rank_cpuset(topo, rk, *set, err, errlen);
    if (rc != PC_OK)
        return rc;
    /* near[] travelled as bytes: terminated or not, read at most its size. */
    if (memchr(rk->near, '\0', sizeof(rk->near)) == NULL)
        return pc_error_fmt(PC_ETOPO, err, errlen, "rank %d: unterminated GPU cpuset", rk->rank);
    if (rk->near[0] == '\0')
        return PC_OK;
    *near = hwloc_bitmap_alloc();
    *want = hwloc_bitmap_alloc();
    if (!*near || !*want)
        return PC_ENOMEM;
    if (hwloc_bitmap_list_sscanf(*near, rk->near) != 0)
        return pc_error_fmt(PC_ETOPO, err, errlen, "rank %d: unreadable GPU cpuset '%s'", rk->rank,
                            rk->near);
    /* Advice only: a set outside the topology or the rank's cpuset is no error; its threads
     * are then planned as usual and reported as not near. */
    hwloc_bitmap_and(*near, *near, hwloc_topology_get_allowed_cpuset(topo->h));
    hwloc_bitmap_and(*want, *near, *set);
    return PC_OK;
}

/* Sharing: count the planned threads per core across the node, then mark each thread
 * shared (its core has another) and near (its set lies in its rank's GPU cores, nears[r],
 * whatever chose the core: auto or a --bind list). */
static int mark_sharing(const pc_topo_t *topo, pc_topo_plan_t *plan, hwloc_bitmap_t *nears)
{
    int *count = calloc((size_t)topo->ncores, sizeof(int));
    if (!count)
        return PC_ENOMEM;
    for (int r = 0; r < plan->nranks; r++)
        for (int t = 0; t < plan->ranks[r].nthreads; t++)
            if (place_at(plan, r, t)->core >= 0)
                count[place_at(plan, r, t)->core]++;
    for (int c = 0; c < topo->ncores; c++)
        plan->nshared += count[c] > 1;
    for (int r = 0; r < plan->nranks; r++)
        for (int t = 0; t < plan->ranks[r].nthreads; t++) {
            place_t *p = place_at(plan, r, t);
            p->shared = p->core >= 0 && count[p->core] > 1;
            p->near = p->core >= 0 && nears[r] && hwloc_bitmap_isincluded(p->set, nears[r]);
        }
    free(count);
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
    /* Per rank: its cpuset; its `near` cpuset (& allowed) and, for --bind auto, the part
     * of its cpuset near its GPU (both NULL for a rank without one). */
    hwloc_bitmap_t *sets = NULL, *nears = NULL, *want = NULL;
    pc_topo_plan_t *plan = calloc(1, sizeof(*plan));
    if (!plan)
        goto err;
    plan->nranks = nranks;
    plan->ncores = topo->ncores;
    plan->places = calloc((size_t)nranks * PC_TOPO_MAX_THREADS, sizeof(place_t));
    plan->ranks = malloc(sizeof(pc_topo_rank_t) * (size_t)nranks);
    sets = calloc((size_t)nranks, sizeof(hwloc_bitmap_t));
    nears = calloc((size_t)nranks, sizeof(hwloc_bitmap_t));
    want = calloc((size_t)nranks, sizeof(hwloc_bitmap_t));
    if (!plan->places || !plan->ranks || !sets || !nears || !want)
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
        if ((rc = rank_sets(topo, &ranks[r], &sets[r], &nears[r], &want[r], err, errlen)) != PC_OK)
            goto err;
    }
    if (bind->mode == PC_BIND_AUTO)
        rc = plan_auto(topo, plan, sets, want, err, errlen);
    else if (bind->mode == PC_BIND_LIST)
        rc = plan_list(topo, plan, bind, err, errlen);
    else
        rc = PC_OK;
    if (rc != PC_OK)
        goto err;
    if ((rc = mark_sharing(topo, plan, nears)) != PC_OK)
        goto err;
    free_sets(sets, nranks);
    free_sets(nears, nranks);
    free_sets(want, nranks);
    *out = plan;
    return PC_OK;
err:
    free_sets(sets, nranks);
    free_sets(nears, nranks);
    free_sets(want, nranks);
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

bool pc_topo_plan_near(const pc_topo_plan_t *plan, int r, int t)
{
    if (r < 0 || r >= plan->nranks || t < 0 || t >= plan->ranks[r].nthreads)
        return false;
    return place_at(plan, r, t)->near;
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

/* "; fewer cores than threads, sharing: core C {rR.name ...} ..." */
static void describe_sharing(const pc_topo_plan_t *plan, char *buf, size_t len, size_t *pos)
{
    append(buf, len, pos, "; fewer cores than threads, sharing:");
    for (int c = 0; c < plan->ncores; c++) {
        int n = 0;
        for (int r = 0; r < plan->nranks; r++)
            for (int t = 0; t < plan->ranks[r].nthreads; t++)
                n += place_at(plan, r, t)->core == c;
        if (n < 2)
            continue;
        append(buf, len, pos, " core %d {", c);
        const char *sep = "";
        for (int r = 0; r < plan->nranks; r++)
            for (int t = 0; t < plan->ranks[r].nthreads; t++)
                if (place_at(plan, r, t)->core == c) {
                    append(buf, len, pos, "%sr%d.%s", sep, plan->ranks[r].rank,
                           plan->ranks[r].names[t]);
                    sep = " ";
                }
        append(buf, len, pos, "}");
    }
}

/* "LEAD rR GPUNAME ..." for the ranks that named a GPU and, with only_far, gave no `near`
 * set; nothing when there are none. */
static void describe_gpus(const pc_topo_plan_t *plan, const char *lead, bool only_far, char *buf,
                          size_t len, size_t *pos)
{
    for (int r = 0; r < plan->nranks; r++) {
        const pc_topo_rank_t *rk = &plan->ranks[r];
        if (rk->gpu[0] == '\0' || (only_far && rk->near[0] != '\0'))
            continue;
        /* gpu[] travelled as bytes: print at most its size. */
        append(buf, len, pos, "%s r%d %.*s", lead, rk->rank, (int)sizeof(rk->gpu), rk->gpu);
        lead = "";
    }
}

/* "; near GPU: rR GPUNAME {name core[ far], ...} ...; N thread(s) not near ..." for the
 * ranks that gave a `near` set; nothing when none did. */
static void describe_near(const pc_topo_plan_t *plan, char *buf, size_t len, size_t *pos)
{
    int nfar = 0;
    const char *lead = "; near GPU:";
    for (int r = 0; r < plan->nranks; r++) {
        const pc_topo_rank_t *rk = &plan->ranks[r];
        if (rk->near[0] == '\0')
            continue;
        /* gpu[] travelled as bytes: print at most its size. */
        append(buf, len, pos, "%s r%d %.*s {", lead, rk->rank, (int)sizeof(rk->gpu),
               rk->gpu[0] ? rk->gpu : "GPU");
        lead = "";
        for (int t = 0; t < rk->nthreads; t++) {
            const place_t *p = place_at(plan, r, t);
            append(buf, len, pos, "%s%s %d%s", t ? ", " : "", rk->names[t], p->core,
                   p->near ? "" : " far");
            nfar += !p->near;
        }
        append(buf, len, pos, "}");
    }
    if (nfar > 0)
        append(buf, len, pos, "; %d thread%s not near %s GPU", nfar, nfar == 1 ? "" : "s",
               nfar == 1 ? "its" : "their");
    /* Ranks that named a GPU whose locality the topology does not know (a VM, or hwloc
     * without I/O discovery): named all the same, so that the line says which GPU each
     * rank drives. */
    describe_gpus(plan, "; GPU (locality unknown):", true, buf, len, pos);
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
        /* Nothing is near anything: only which GPU each rank drives. */
        describe_gpus(plan, "; GPU:", false, buf, len, &pos);
        return;
    }
    append(buf, len, &pos, "placement: %d threads of %d ranks on %d cores", plan->nthreads_total,
           plan->nranks, plan->ncores);
    if (plan->nshared == 0)
        append(buf, len, &pos, "; one core each");
    else
        describe_sharing(plan, buf, len, &pos);
    describe_near(plan, buf, len, &pos);
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
