/* pc_runtime: roles, communicators, thread placement and metrics shared by the worker
 * pipeline (pc_worker.c) and the server loop (pc_server.c). Their messages are in
 * runtime_proto.c. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_file.h"
#include "pipecompress/pc_time.h"
#include "runtime_impl.h"

int pc_runtime_check_config(pc_config_t *cfg, int world_size, char *err, size_t errlen)
{
    return pc_config_check(cfg, world_size, err, errlen);
}

void pc_rt__spec_update(pc_runtime_t *rt)
{
    pc_codec_spec_parse(rt->cfg.compress, &rt->spec, NULL, 0); /* checked by the caller */
    rt->spec.seed = (uint64_t)rt->cfg.seed;
}

int pc_rt__codecs_create(const pc_runtime_t *rt, pc_codec_t **codec, pc_codec_t **dense)
{
    pc_codec_spec_t none;
    pc_codec_spec_parse("none", &none, NULL, 0);
    pc_codec_t *c = NULL, *d = NULL;
    int rc = pc_codec_create(&rt->spec, &c);
    if (rc == PC_OK && (rc = pc_codec_create(&none, &d)) != PC_OK) {
        pc_codec_destroy(c);
        return rc;
    }
    if (rc == PC_OK) {
        *codec = c;
        *dense = d;
    }
    return rc;
}

/* Workers with device tensors: open this rank's device (rt->gpu). --device cuda: node-local
 * worker i takes --gpu's LIST[i % len], or i modulo the visible devices. Collective over
 * rt->comm: when a worker cannot open its device every rank returns PC_ENODEV with the
 * same message (the lowest failing rank's reason). */
static int open_gpu(pc_runtime_t *rt, char *err, size_t errlen)
{
    const pc_config_t *cfg = &rt->cfg;
    int rc = PC_OK;
    char why[384] = "";
    if (rt->role == PC_ROLE_WORKER && cfg->device == PC_DEVICE_EMULATE) {
        rc = pc_gpu_create(PC_GPU_EMULATE, &rt->gpu, why, sizeof(why));
    } else if (rt->role == PC_ROLE_WORKER && cfg->device == PC_DEVICE_CUDA) {
        MPI_Comm node = MPI_COMM_NULL;
        int idx = 0;
        rc = PC_MPI_CHECK(
            MPI_Comm_split_type(rt->workers, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &node),
            err, errlen);
        if (rc == PC_OK)
            rc = PC_MPI_CHECK(MPI_Comm_rank(node, &idx), err, errlen);
        if (node != MPI_COMM_NULL) {
            int frc = PC_MPI_CHECK(MPI_Comm_free(&node), err, errlen);
            rc = rc == PC_OK ? frc : rc;
        }
        if (rc != PC_OK)
            return rc; /* MPI failed: the job cannot agree on anything anymore */
        int list[PC_CONFIG_GPU_MAX], n = 0;
        char status[160];
        pc_config_gpu_parse(cfg->gpu, list, &n, NULL, 0); /* checked: pc_config_check */
        int count = pc_cuda_status(status, sizeof(status));
        int dev = n ? list[idx % n] : count ? idx % count : 0;
        if (count == 0)
            rc = pc_error_fmt(PC_ENODEV, why, sizeof(why), "no usable CUDA device on %s: %s",
                              pc_rt__host(rt, rt->rank), status);
        else if (dev >= count)
            rc = pc_error_fmt(PC_ENODEV, why, sizeof(why),
                              "--gpu %s: device %d does not exist on %s (%d visible)", cfg->gpu,
                              dev, pc_rt__host(rt, rt->rank), count);
        else if ((rc = pc_gpu_create(dev, &rt->gpu, why, sizeof(why))) == PC_OK)
            /* This thread (the backprop thread) works on it from now on. */
            rc = pc_gpu_use(rt->gpu, why, sizeof(why));
    }
    /* The lowest rank that failed tells everyone its reason: every rank returns the same
     * one-line error (a program may then print it once). */
    int first = -1;
    if ((rc = pc_comm_agree(rt->comm, rc, why, sizeof(why), &first)) == PC_OK)
        return PC_OK;
    if (first < 0) /* MPI itself failed */
        return pc_error_fmt(rc, err, errlen, "%s", why);
    return pc_error_fmt(PC_ENODEV, err, errlen, "--device %s: rank %d: %s",
                        pc_config_device_name(cfg->device), first, why);
}

/* --metrics and --timeline: rank 0 writes them at the end (pc_rt__metrics_write), so it
 * checks now that it will be able to, before any training that the files would be lost
 * for. Collective over rt->comm: every rank returns rank 0's verdict. */
static int check_outputs(pc_runtime_t *rt, char *err, size_t errlen)
{
    static const struct {
        const char *flag;
        size_t offset;
    } files[] = {{"--metrics", offsetof(pc_config_t, metrics)},
                 {"--timeline", offsetof(pc_config_t, timeline)}};
    char why[PC_COMM_AGREE_LEN] = "", msg[PC_COMM_AGREE_LEN];
    int rc = PC_OK;
    for (size_t i = 0; rt->rank == 0 && rc == PC_OK && i < sizeof(files) / sizeof(files[0]); i++) {
        const char *path = (const char *)&rt->cfg + files[i].offset;
        if (path[0] && (rc = pc_file_check_writable(path, why, sizeof(why))) != PC_OK)
            pc_error_fmt(rc, msg, sizeof(msg), "%s: %s", files[i].flag, why);
    }
    if ((rc = pc_comm_agree(rt->comm, rc, msg, sizeof(msg), NULL)) != PC_OK)
        return pc_error_fmt(rc, err, errlen, "%s", msg);
    return PC_OK;
}

/* The communicators: rt->comm (a duplicate of the caller's, errors returned), the rank,
 * the roles, and for workers rt->workers and rt->workers_ctl (the control collectives:
 * stop votes, broadcasts, breakdowns, apart from the allreduces). Collective over comm. */
static int open_comms(pc_runtime_t *rt, MPI_Comm comm, char *err, size_t errlen)
{
    int rc;
    if ((rc = PC_MPI_CHECK(MPI_Comm_dup(comm, &rt->comm), err, errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_set_errhandler(rt->comm, MPI_ERRORS_RETURN), err, errlen)) !=
            PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_rank(rt->comm, &rt->rank), err, errlen)) != PC_OK)
        return rc;
    rt->nservers = rt->cfg.mode == PC_MODE_PS ? rt->cfg.servers : 0;
    rt->nworkers = rt->size - rt->nservers;
    rt->role = rt->rank < rt->nworkers ? PC_ROLE_WORKER : PC_ROLE_SERVER;
    return PC_OK;
}

/* The workers' communicators (rt->workers, rt->workers_ctl) and the servers' (rt->servers:
 * the same split, the other color). Collective over rt->comm. */
static int open_worker_comms(pc_runtime_t *rt, char *err, size_t errlen)
{
    bool worker = rt->role == PC_ROLE_WORKER;
    MPI_Comm mine = MPI_COMM_NULL;
    int rc = PC_MPI_CHECK(MPI_Comm_split(rt->comm, worker ? 0 : 1, rt->rank, &mine), err, errlen);
    if (rc != PC_OK)
        return rc;
    if (!worker) {
        rt->servers = mine;
        return PC_MPI_CHECK(MPI_Comm_set_errhandler(rt->servers, MPI_ERRORS_RETURN), err, errlen);
    }
    rt->workers = mine;
    if ((rc = PC_MPI_CHECK(MPI_Comm_set_errhandler(rt->workers, MPI_ERRORS_RETURN), err, errlen)) !=
            PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_dup(rt->workers, &rt->workers_ctl), err, errlen)) != PC_OK)
        return rc;
    return PC_MPI_CHECK(MPI_Comm_set_errhandler(rt->workers_ctl, MPI_ERRORS_RETURN), err, errlen);
}

/* --compressors auto: the cores free near this worker, shared with the ranks of its node
 * that count the same cores (their GPU's cpuset, else their launcher's cpuset, the same as
 * this worker's), less one per server and one per worker's backprop thread there, split
 * over those workers; at least 1, at most PC_CONFIG_COMPRESSORS_AUTO_CAP. Servers take
 * part (0 threads). Collective over rt->comm (a split by node and an allgather). */
static int compressors_auto(pc_runtime_t *rt, const char *near, int *n, char *err, size_t errlen)
{
    bool worker = rt->role == PC_ROLE_WORKER;
    pc_topo_rank_t self;
    const char *const names[] = {"backprop"};
    char cpuset[PC_TOPO_CPUSET_LEN] = "";
    if (pc_topo_self(rt->topo, rt->rank, 1, names, &self) == PC_OK)
        snprintf(cpuset, sizeof(cpuset), "%s", self.cpuset);
    const char *mine = near && near[0] ? near : cpuset;
    /* Which cores: a hash of the cpuset's text (FNV-1a), equal for equal sets. */
    uint32_t key = 2166136261u;
    for (const char *p = mine; *p; p++)
        key = (key ^ (uint8_t)*p) * 16777619u;
    int me[2] = {worker, (int)key}, lsize = 0, rc;
    MPI_Comm node = MPI_COMM_NULL;
    int *all = NULL;
    rc = PC_MPI_CHECK(
        MPI_Comm_split_type(rt->comm, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &node), err,
        errlen);
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(MPI_Comm_size(node, &lsize), err, errlen);
    if (rc == PC_OK && !(all = malloc(sizeof(int) * 2 * (size_t)lsize)))
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    /* A rank out of memory still joins the allgather (into a buffer of one rank's size it
     * could not hold): all ranks fail alike below. */
    int fail = rc != PC_OK;
    if (node != MPI_COMM_NULL &&
        PC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, node), err, errlen) ==
            PC_OK &&
        !fail)
        rc = PC_MPI_CHECK(MPI_Allgather(me, 2, MPI_INT, all, 2, MPI_INT, node), err, errlen);
    else if (rc == PC_OK)
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory on another rank of this node");
    int workers = 0, servers = 0;
    for (int i = 0; rc == PC_OK && i < lsize; i++)
        if (all[2 * i + 1] == me[1]) {
            workers += all[2 * i] != 0;
            servers += all[2 * i] == 0;
        }
    free(all);
    if (node != MPI_COMM_NULL) {
        int frc =
            PC_MPI_CHECK(MPI_Comm_free(&node), rc == PC_OK ? err : NULL, rc == PC_OK ? errlen : 0);
        if (rc == PC_OK)
            rc = frc; /* the first failure's message stays */
    }
    if (rc != PC_OK)
        return rc;
    int cores = pc_topo_cores_in(rt->topo, mine);
    int k = workers > 0 ? (cores - servers - workers) / workers : 1;
    *n = k < 1 ? 1 : k > PC_CONFIG_COMPRESSORS_AUTO_CAP ? PC_CONFIG_COMPRESSORS_AUTO_CAP : k;
    if (worker && rt->cfg.pipeline) /* what auto chose, and from what: one line a worker */
        pc_log_write(rt->log, PC_LOG_INFO, NULL,
                     "worker r%d: --compressors auto: %d (%d cores %s, less %d server and %d "
                     "backprop threads, over %d workers; at least 1, at most %d)",
                     rt->rank, *n, cores, near && near[0] ? "near its GPU" : "of its cpuset",
                     servers, workers, workers, PC_CONFIG_COMPRESSORS_AUTO_CAP);
    return PC_OK;
}

/* Placement: a worker's backprop thread (this one) and its compressor threads
 * (--compressors: rt->ncomp, resolved here when auto); a server's one thread (in allreduce
 * mode the second thread carries the allreduces), planned over the node's ranks
 * (pc_comm_plan_node) near the rank's GPU if it has one; node rank 0 logs the plan, and a
 * worker with more than one compressor thread logs where each went. Collective over
 * rt->comm. */
static int plan_placement(pc_runtime_t *rt, char *err, size_t errlen)
{
    static const char *const server_names[] = {"server"};
    char comp_names[PC_CONFIG_COMPRESSORS_MAX][PC_TOPO_NAME_LEN];
    const char *worker_names[1 + PC_CONFIG_COMPRESSORS_MAX] = {"backprop"};
    bool server = rt->role == PC_ROLE_SERVER;
    int rc, ncomp = 0;
    pc_bind_t bind;
    if ((rc = pc_topo_bind_parse(rt->cfg.bind, &bind, err, errlen)) != PC_OK ||
        (rc = pc_topo_create(NULL, &rt->topo, err, errlen)) != PC_OK ||
        (rc = pc_config_compressors_parse(rt->cfg.compressors, &ncomp, err, errlen)) != PC_OK)
        return rc;
    /* A worker with a GPU: its name for the placement line, and the cores near it (where
     * the topology knows the device; otherwise no preference). */
    char near[PC_TOPO_CPUSET_LEN] = "", gpu[PC_TOPO_NAME_LEN] = "", bus[32];
    if (rt->gpu && pc_gpu_device(rt->gpu) >= 0) {
        snprintf(gpu, sizeof(gpu), "cuda:%d", pc_gpu_device(rt->gpu));
        if (pc_gpu_pci_bus_id(rt->gpu, bus, sizeof(bus)) == PC_OK)
            pc_topo_pci_cpuset(rt->topo, bus, near, sizeof(near), NULL, 0);
    } else if (rt->gpu) {
        snprintf(gpu, sizeof(gpu), "emulated");
    }
    /* auto is resolved on every rank or none (pc_config_check: every rank's flags are the
     * same), so the collective is everyone's. */
    if (ncomp == 0 && (rc = compressors_auto(rt, near, &ncomp, err, errlen)) != PC_OK)
        return rc;
    rt->ncomp = server || !rt->cfg.pipeline ? 0 : ncomp;
    for (int k = 0; k < rt->ncomp; k++) {
        /* One thread keeps today's name; a pool's are numbered. */
        if (rt->ncomp == 1)
            snprintf(comp_names[k], sizeof(comp_names[k]), "compressor");
        else
            /* k < PC_CONFIG_COMPRESSORS_MAX = 64: the mask only shows the compiler it fits */
            snprintf(comp_names[k], sizeof(comp_names[k]), "compressor%d", k & 63);
        worker_names[1 + k] = comp_names[k];
    }
    int nthreads = server ? 1 : 1 + rt->ncomp;
    rc =
        pc_comm_plan_node(rt->comm, rt->topo, &bind, nthreads, server ? server_names : worker_names,
                          near, gpu, &rt->place, &rt->local_rank, err, errlen);
    if (rc != PC_OK)
        return rc;
    if (rt->local_rank == 0) {
        char d[1024];
        pc_topo_plan_describe(rt->place, d, sizeof(d));
        /* The node's name: on several nodes, which placement is whose. */
        pc_log_write(rt->log, pc_topo_plan_nshared(rt->place) ? PC_LOG_WARN : PC_LOG_INFO, NULL,
                     "%s: %s", pc_rt__host(rt, rt->rank), d);
    }
    if (rt->ncomp > 1) {
        /* One line per worker: where each compressor thread of its pool went. */
        char line[8 * (1 + PC_CONFIG_COMPRESSORS_MAX)];
        size_t at = 0;
        for (int k = 0; k < rt->ncomp && at < sizeof(line); k++) {
            int core = pc_topo_plan_core(rt->place, rt->local_rank, 1 + k);
            int m = core >= 0 ? snprintf(line + at, sizeof(line) - at, "%s%d", k ? "," : "", core)
                              : snprintf(line + at, sizeof(line) - at, "%s-", k ? "," : "");
            at += m > 0 ? (size_t)m : 0;
        }
        pc_log_write(rt->log, PC_LOG_INFO, NULL,
                     "worker r%d: %d compressor threads on cores %s (backprop on %d; -: unbound)",
                     rt->rank, rt->ncomp, line, pc_topo_plan_core(rt->place, rt->local_rank, 0));
    }
    return PC_OK;
}

/* --timeline: every rank's recorder, with a common origin for the timestamps right after a
 * barrier, and its tracks. Collective over rt->comm when the flag is set. */
static int open_timeline(pc_runtime_t *rt, char *err, size_t errlen)
{
    if (!rt->cfg.timeline[0])
        return PC_OK;
    bool server = rt->role == PC_ROLE_SERVER;
    int rc = PC_MPI_CHECK(MPI_Barrier(rt->comm), err, errlen);
    if (rc != PC_OK)
        return rc;
    if (pc_timeline_create(rt->rank, pc_time_ns(), &rt->tl) != PC_OK)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    pc_timeline_track(rt->tl, server ? "server" : "backprop");
    /* Tracks TRACK_COMPRESSOR + k, in order: one writer each. */
    for (int k = 0; !server && k < rt->ncomp; k++) {
        char name[32];
        snprintf(name, sizeof(name), rt->ncomp == 1 ? "compressor" : "compressor %d", k);
        pc_timeline_track(rt->tl, name);
    }
    return PC_OK;
}

/* The runtime object with what needs no MPI: the checked flags, the codec spec, the
 * optimizer, the collectives' receive buffers for size ranks. NULL: out of memory. */
static pc_runtime_t *runtime_alloc(const pc_config_t *checked, int size)
{
    pc_runtime_t *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return NULL;
    rt->comm = rt->workers = rt->workers_ctl = rt->servers = MPI_COMM_NULL;
    /* The collectives' receive buffers, before the first collective (runtime_impl.h). */
    rt->ckpt_outcomes = malloc((size_t)CKPT_OUTCOME_BYTES * (size_t)size);
    rt->gather_counts = malloc(sizeof(int) * (size_t)size);
    rt->gather_displs = malloc(sizeof(int) * (size_t)size);
    rt->hosts = calloc((size_t)size, PC_COMM_HOST_LEN);
    if (!rt->ckpt_outcomes || !rt->gather_counts || !rt->gather_displs || !rt->hosts) {
        pc_runtime_destroy(rt);
        return NULL;
    }
    rt->size = size;
    rt->cfg = *checked;
    const pc_config_t *cfg = &rt->cfg;
    pc_rt__spec_update(rt);
    pc_config_optim(cfg, &rt->optim); /* adam(w)'s betas checked by pc_config_check */
    return rt;
}

int pc_runtime_create(const pc_config_t *cfg, MPI_Comm comm, pc_log_t *log, pc_runtime_t **out,
                      char *err, size_t errlen)
{
    int provided = 0, size = 0, rc;
    if ((rc = PC_MPI_CHECK(MPI_Query_thread(&provided), err, errlen)) != PC_OK)
        return rc;
    if (provided < MPI_THREAD_MULTIPLE)
        return pc_error_fmt(PC_EMPI, err, errlen,
                            "MPI was not initialised with MPI_THREAD_MULTIPLE (got level %d)",
                            provided);
    if ((rc = PC_MPI_CHECK(MPI_Comm_size(comm, &size), err, errlen)) != PC_OK)
        return rc;
    pc_config_t checked = *cfg;
    if ((rc = pc_runtime_check_config(&checked, size, err, errlen)) != PC_OK)
        return rc;
    pc_runtime_t *rt = runtime_alloc(&checked, size);
    if (!rt)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    /* The steps, in order; the first failure undoes them all (pc_runtime_destroy). */
    if ((rc = open_comms(rt, comm, err, errlen)) != PC_OK ||
        (rc = pc_comm_hosts(rt->comm, rt->hosts, err, errlen)) != PC_OK ||
        (rc = check_outputs(rt, err, errlen)) != PC_OK)
        goto fail;
    if (log) {
        rt->log = log;
    } else if (pc_log_create(stderr, rt->rank, (pc_log_level_t)rt->cfg.log_level, &rt->own_log) !=
               PC_OK) {
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
        goto fail;
    } else {
        rt->log = rt->own_log;
    }
    if ((rc = open_worker_comms(rt, err, errlen)) != PC_OK ||
        (rc = open_gpu(rt, err, errlen)) != PC_OK ||
        (rc = plan_placement(rt, err, errlen)) != PC_OK ||
        (rc = open_timeline(rt, err, errlen)) != PC_OK)
        goto fail;
    const char *thread = rt->role == PC_ROLE_SERVER ? "server" : "backprop";
    if ((rc = pc_rt__bind(rt, 0, thread)) != PC_OK) {
        pc_error_fmt(rc, err, errlen, "cannot bind the %s thread (see the log)", thread);
        goto fail;
    }
    *out = rt;
    return PC_OK;
fail:
    pc_runtime_destroy(rt);
    return rc;
}

void pc_runtime_destroy(pc_runtime_t *rt)
{
    if (!rt)
        return;
    /* A communicator that cannot be freed is logged (destroy has no error to return). */
    MPI_Comm *comms[] = {&rt->workers_ctl, &rt->workers, &rt->servers, &rt->comm};
    for (size_t i = 0; i < sizeof(comms) / sizeof(comms[0]); i++) {
        char why[256];
        if (*comms[i] != MPI_COMM_NULL &&
            PC_MPI_CHECK(MPI_Comm_free(comms[i]), why, sizeof(why)) != PC_OK)
            pc_log_write(rt->log, PC_LOG_WARN, NULL, "pc_runtime_destroy: %s", why);
    }
    pc_topo_plan_destroy(rt->place);
    pc_topo_destroy(rt->topo);
    pc_gpu_destroy(rt->gpu);
    pc_log_destroy(rt->own_log);
    pc_timeline_destroy(rt->tl);
    free(rt->metrics);
    free(rt->ckpt_outcomes);
    free(rt->gather_counts);
    free(rt->hosts);
    free(rt->gather_displs);
    free(rt);
}

pc_role_t pc_runtime_role(const pc_runtime_t *rt)
{
    return rt->role;
}

int pc_runtime_workers(const pc_runtime_t *rt)
{
    return rt->nworkers;
}

int pc_runtime_servers(const pc_runtime_t *rt)
{
    return rt->nservers;
}

int pc_runtime_gpu(const pc_runtime_t *rt)
{
    return rt->gpu ? pc_gpu_device(rt->gpu) : -2;
}

void pc_runtime_set_stop_flag(pc_runtime_t *rt, volatile sig_atomic_t *flag)
{
    rt->stop_flag = flag;
}

int pc_runtime_stop_signal(const pc_runtime_t *rt)
{
    return rt->stop_signal;
}

double pc_runtime_lr(const pc_runtime_t *rt, int64_t t)
{
    /* The schedule's fields are create's; pc_worker_set_optimizer writes only the kind. */
    return pc_optim_lr(&rt->optim, t);
}

int pc_rt__bind(pc_runtime_t *rt, int t, const char *who)
{
    char err[256];
    /* --dilate: the sleeps follow pieces of work as short as microseconds; Linux's default
     * timer slack (50 us) would lengthen each by up to that much. 1 us keeps K honest;
     * best effort (the sleeps only run longer without it). */
    if (rt->cfg.dilate > 1)
        (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    int rc = pc_topo_plan_bind(rt->topo, rt->place, rt->local_rank, t, err, sizeof(err));
    if (rc != PC_OK)
        pc_log_write(rt->log, PC_LOG_ERROR, who, "%s", err);
    return rc;
}

void pc_rt__sleep_until(int64_t until)
{
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000),
                          .tv_nsec = (long)(until % 1000000000)};
    if (until <= 0)
        return;
    /* pc_time_ns reads CLOCK_MONOTONIC: the same clock, so the deadline is absolute there.
     * EINTR: a signal (the stop flag's) woke us early; the deadline stays the same. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

void pc_rt__tracef(pc_runtime_t *rt, int track, int64_t t0, int64_t t1, const char *fmt, ...)
{
    if (!rt->tl)
        return;
    char name[PC_TIMELINE_NAME_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    pc_timeline_event(rt->tl, track, name, t0, t1);
}

void pc_rt__metrics_line(pc_runtime_t *rt, const char *fmt, ...)
{
    if (!rt->cfg.metrics[0])
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) - 1 ? (size_t)n : sizeof(line) - 2;
    line[len++] = '\n';
    if (rt->metrics_len + len > rt->metrics_cap) {
        size_t cap = rt->metrics_cap ? rt->metrics_cap * 2 : 65536;
        while (cap < rt->metrics_len + len)
            cap *= 2;
        char *p = realloc(rt->metrics, cap);
        if (!p)
            return; /* metrics are best effort; training goes on */
        rt->metrics = p;
        rt->metrics_cap = cap;
    }
    memcpy(rt->metrics + rt->metrics_len, line, len);
    rt->metrics_len += len;
}

/* Collective: gather len bytes of data from every rank to rank 0, which writes
 * head + data... + tail to path, crash-safe (pc_file). Rank 0 decides whether it can take
 * the data (a total that fits MPI's int displacements, and the memory for it) and tells
 * every rank, so all skip the data's gather together and return the same error. */
static int gather_write(pc_runtime_t *rt, const char *data, size_t len, const char *path,
                        const char *head, const char *sep, const char *tail, char *err,
                        size_t errlen)
{
    int mine = (int)(len > INT32_MAX ? INT32_MAX : len), rc;
    int *counts = rt->gather_counts, *displs = rt->gather_displs; /* allocated at creation */
    char *all = NULL;
    rc = PC_MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, rt->comm), err, errlen);
    if (rc != PC_OK)
        return rc;
    int verdict = PC_OK;
    if (rt->rank == 0) {
        long long total = 0;
        for (int r = 0; r < rt->size; r++) {
            displs[r] = (int)total;
            total += counts[r];
            if (total > INT_MAX) {
                verdict = PC_ERANGE;
                break;
            }
        }
        if (verdict == PC_OK && !(all = malloc((size_t)total + 1)))
            verdict = PC_ENOMEM;
    }
    rc = PC_MPI_CHECK(MPI_Bcast(&verdict, 1, MPI_INT, 0, rt->comm), err, errlen);
    if (rc == PC_OK && verdict != PC_OK)
        rc = rt->rank == 0
                 ? pc_error_fmt(verdict, err, errlen, "cannot write '%s': %s", path,
                                verdict == PC_ERANGE ? "the ranks' parts exceed 2 GiB in all"
                                                     : "out of memory")
                 : pc_error_fmt(verdict, err, errlen,
                                "cannot write '%s': rank 0 cannot gather it (%s)", path,
                                pc_strerror(verdict));
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(
            MPI_Gatherv(data, mine, MPI_CHAR, all, counts, displs, MPI_CHAR, 0, rt->comm), err,
            errlen);
    if (rc == PC_OK && rt->rank == 0) {
        pc_file_writer_t *f = NULL;
        rc = pc_file_writer_open(path, &f, err, errlen);
        if (rc == PC_OK) {
            pc_file_writer_write(f, head, strlen(head));
            const char *s = "";
            for (int r = 0; r < rt->size; r++) {
                if (!counts[r])
                    continue;
                pc_file_writer_write(f, s, strlen(s));
                pc_file_writer_write(f, all + displs[r], (size_t)counts[r]);
                s = sep;
            }
            pc_file_writer_write(f, tail, strlen(tail));
            rc = pc_file_writer_commit(f, err, errlen);
        }
    }
    free(all);
    return rc;
}

int pc_rt__metrics_write(pc_runtime_t *rt, char *err, size_t errlen)
{
    int rc = PC_OK;
    if (rt->cfg.metrics[0])
        rc = gather_write(rt, rt->metrics, rt->metrics_len, rt->cfg.metrics, "", "", "", err,
                          errlen);
    if (rc == PC_OK && rt->cfg.timeline[0]) {
        size_t len = 0;
        char *json = rt->tl ? pc_timeline_json(rt->tl, &len) : NULL;
        rc = gather_write(rt, json ? json : "", json ? len : 0, rt->cfg.timeline,
                          "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", ",\n", "\n]}\n",
                          err, errlen);
        free(json);
    }
    return rc;
}
