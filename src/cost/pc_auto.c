/* pc_auto: --mode auto (see pc_auto.h; doc/scaling.md). */
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT */
#include "config.h"

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipecompress/pc_auto.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_time.h"

/* Bytes of the latency probe's message. */
#define SMALL_BYTES 8

/* The modes auto chooses among: the inline top-k is a baseline, never faster than the
 * pipelined one. */
#define CANDIDATES                                                                                 \
    ((1u << PC_COST_ALLREDUCE) | (1u << PC_COST_PS_NONE) | (1u << PC_COST_PS_TOPK_PIPELINED) |     \
     (1u << PC_COST_PS_DGC_PIPELINED) | (1u << PC_COST_PS_TOPK_SERVERMOM) |                        \
     (1u << PC_COST_PS_POWERSGD_PIPELINED))

int pc_auto_check(const pc_config_t *cfg, int world_size, char *err, size_t errlen)
{
    if (!cfg || cfg->mode != PC_MODE_AUTO || world_size < 1)
        return pc_error_fmt(PC_EINVAL, err, errlen, "pc_auto_check: not a --mode auto config");
    if (pc_config_given(cfg, "compress"))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compress %s with --mode auto: auto chooses the codec (none, "
                            "topk:ratio=%g, dgc:ratio=%g or powersgd:rank=%d); drop --compress, "
                            "or choose the mode yourself with --mode ps",
                            cfg->compress, PC_AUTO_TOPK_RATIO, PC_AUTO_DGC_RATIO,
                            PC_AUTO_POWERSGD_RANK);
    if (cfg->device != PC_DEVICE_CPU)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--device %s with --mode auto: the cost model profiles the model "
                            "and the codecs on the CPU and knows no device copies; choose "
                            "--mode ps or allreduce",
                            pc_config_device_name(cfg->device));
    if (pc_config_given(cfg, "pipeline"))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--pipeline with --mode auto: auto chooses it (on for the "
                            "compressing modes); drop --pipeline, or use --mode ps");
    if (pc_config_given(cfg, "pull") && cfg->pull != PC_PULL_AUTO)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--pull with --mode auto: the cost model predicts --pull auto "
                            "only; drop --pull, or use --mode ps");
    if (cfg->priority != PC_PRIORITY_FORWARD)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--priority fifo with --mode auto: the cost model predicts "
                            "--priority forward only; drop --priority, or use --mode ps");
    if (cfg->nesterov)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--nesterov with --mode auto: the sparsifiers' momentum correction "
                            "has no Nesterov form, so a choice of topk or dgc would drop it; "
                            "use --mode ps or allreduce");
    if (cfg->resume)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--resume with --mode auto: the probe may choose another mode than "
                            "the run that wrote the checkpoint; resume with the flags that run "
                            "printed after 'auto: chose'");
    if (pc_config_given(cfg, "servers") && (cfg->servers < 1 || cfg->servers >= world_size))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--servers %d with --mode auto leaves no %s among %d ranks",
                            cfg->servers, cfg->servers < 1 ? "server" : "worker", world_size);
    return PC_OK;
}

/* What rank 0 broadcasts at the end of the measurement: its status, message and figures. */
typedef struct shared {
    int rc;
    char msg[256];
    pc_auto_measured_t m;
} shared_t;

/* The worst status over comm's ranks (codes are negative): PC_OK when all are. */
static int agree(MPI_Comm comm, int rc, char *err, size_t errlen)
{
    int worst = rc;
    int mrc = PC_MPI_CHECK(MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, comm), err, errlen);
    return mrc != PC_OK ? mrc : worst;
}

/* The link between rank 0 and m->link_peer (every rank calls; only those two take part);
 * rank 0 fills m's link figures. */
static int measure_link(MPI_Comm comm, size_t big, int reps, pc_auto_measured_t *m, char *err,
                        size_t errlen)
{
    int peer = m->link_peer;
    int rc = pc_comm_pingpong(comm, 0, peer, SMALL_BYTES, SMALL_BYTES, 20 * reps + 1, &m->rtt_small,
                              err, errlen);
    if (rc == PC_OK)
        rc = pc_comm_pingpong(comm, 0, peer, big, SMALL_BYTES, 2 * reps + 1, &m->rtt_ab, err,
                              errlen);
    if (rc == PC_OK)
        rc = pc_comm_pingpong(comm, 0, peer, SMALL_BYTES, big, 2 * reps + 1, &m->rtt_ba, err,
                              errlen);
    if (rc == PC_OK && m->rtt_small > 0) {
        /* A round trip of (a, b) bytes is 2 alpha + (a + b) / B: the small one gives alpha,
         * the difference of a large one and the small one (big - small) / B. */
        double dab = m->rtt_ab - m->rtt_small, dba = m->rtt_ba - m->rtt_small;
        m->bw_ab = (double)(big - SMALL_BYTES) / (dab > 0 ? dab : m->rtt_ab);
        m->bw_ba = (double)(big - SMALL_BYTES) / (dba > 0 ? dba : m->rtt_ba);
        m->link = (pc_cost_link_t){.bandwidth = m->bw_ab < m->bw_ba ? m->bw_ab : m->bw_ba,
                                   .latency = m->rtt_small / 2};
    }
    return rc;
}

/* x in the fewest digits that read back as x (0.9, not 0.90000000000000002): the printed
 * flags must give bitwise the same configuration. */
static void exact(char *buf, size_t len, double x)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

/* The codec specs of the cost model's slots. */
static void codec_specs(double topk, double dgc, double mom,
                        char spec[PC_COST_CODECS][PC_AUTO_SPEC_LEN])
{
    char t[25], d[25], m[25]; /* %.17g: at most 24 characters */
    exact(t, sizeof(t), topk);
    exact(d, sizeof(d), dgc);
    exact(m, sizeof(m), mom);
    snprintf(spec[PC_COST_CODEC_NONE], PC_AUTO_SPEC_LEN, "none");
    snprintf(spec[PC_COST_CODEC_TOPK], PC_AUTO_SPEC_LEN, "topk:ratio=%s,momentum=%s", t, m);
    snprintf(spec[PC_COST_CODEC_TOPK_EF], PC_AUTO_SPEC_LEN, "topk:ratio=%s,momentum=0", t);
    snprintf(spec[PC_COST_CODEC_DGC], PC_AUTO_SPEC_LEN, "dgc:ratio=%s,momentum=%s", d, m);
    snprintf(spec[PC_COST_CODEC_POWERSGD], PC_AUTO_SPEC_LEN, "powersgd:rank=%d",
             PC_AUTO_POWERSGD_RANK);
}

/* Rank 0: the codecs and the server, into *m. */
static int measure_rates(const pc_auto_measure_cfg_t *mc, const pc_auto_probe_t *probe,
                         pc_auto_measured_t *m, char *err, size_t errlen)
{
    pc_codec_spec_t spec[PC_COST_CODECS];
    codec_specs(mc->topk_ratio, mc->dgc_ratio, mc->momentum, m->codec_spec);
    for (int q = 0; q < PC_COST_CODECS; q++) {
        char why[192];
        if (pc_codec_spec_parse(m->codec_spec[q], &spec[q], why, sizeof(why)) != PC_OK)
            return pc_error_fmt(PC_EINVAL, err, errlen, "%s", why);
        spec[q].seed = mc->seed;
    }
    int rc = pc_cost_measure_codecs(probe->tensors, probe->ntensors, mc->chunk_bytes,
                                    mc->compress_min_bytes, spec, mc->reps, m->codec, &m->lowrank,
                                    &m->chunks, err, errlen);
    if (rc != PC_OK)
        return rc;
    size_t n = m->chunks.largest < 1024 ? 1024 : m->chunks.largest;
    size_t share = m->chunks.elements / (size_t)mc->servers;
    m->server_n = n;
    m->server_total = share > n ? share : n;
    return pc_cost_measure_server(m->server_n, m->server_total, mc->reps, &m->server, err, errlen);
}

static bool probe_ok(const pc_auto_probe_t *p)
{
    return p && p->layers && p->tensors && p->tensor_layer && p->ntensors > 0 && p->nlayers > 0 &&
           p->nlayers <= PC_AUTO_MAX_LAYERS;
}

static bool mcfg_ok(const pc_auto_measure_cfg_t *mc)
{
    return mc && mc->chunk_bytes >= sizeof(float) && mc->topk_ratio > 0 && mc->topk_ratio <= 1 &&
           mc->dgc_ratio > 0 && mc->dgc_ratio <= 1 && mc->momentum >= 0 && mc->momentum < 1 &&
           mc->servers >= 1 && mc->link_bytes >= 4096 && mc->reps >= 1;
}

/* pc_auto_measure's state: its communicator (a duplicate, errors returned), this rank,
 * the buffers its collectives use, and the result being built (sh->m). */
typedef struct probe_run {
    MPI_Comm c;
    int rank, size, L;
    shared_t *sh;
    char *hosts, *boots;
    int *cores;
    double *times, *slowest;
} probe_run_t;

/* Bytes of a machine's key: its kernel's boot id (36 characters), or its host name. */
#define BOOT_LEN PC_AUTO_KEY_LEN

/* Step 1: every rank's arguments and buffers are usable, and the models agree (local:
 * this rank's verdict). Collective. */
static int check_ranks(probe_run_t *p, int local, char *err, size_t errlen)
{
    int rc = agree(p->c, local, err, errlen);
    if (rc != PC_OK) {
        if (rc != PC_EMPI)
            pc_error_fmt(rc, err, errlen, "--mode auto: %s on %s rank",
                         rc == PC_ENOMEM ? "out of memory" : "bad arguments or probe",
                         local == PC_OK ? "another" : "this");
        return rc;
    }
    int counts[2] = {p->L, -p->L}, agreed[2];
    if ((rc = PC_MPI_CHECK(MPI_Allreduce(counts, agreed, 2, MPI_INT, MPI_MIN, p->c), err,
                           errlen)) != PC_OK)
        return rc;
    if (agreed[0] != -agreed[1])
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "--mode auto: the ranks' models differ (%d to %d layers)", agreed[0],
                            -agreed[1]);
    return PC_OK;
}

/* The profile of the ranks that ran one (mine: this rank's, NULL if it did not; n of
 * them) into out[0..L) and its sums into *sum: per layer the ranks' mean, scaled so that
 * the layers add up to the slowest rank's whole pass. (The slowest rank's time per layer,
 * summed, counts every rank's pauses where ranks take turns on shared cores: ResNet-18 on
 * 4 ranks of 2 cores, 3258 ms against a 2783 ms iteration.) Collective. */
static int merge_profiles(probe_run_t *p, const pc_cost_layer_t *mine, int n, pc_cost_layer_t *out,
                          pc_cost_layer_t *sum, char *err, size_t errlen)
{
    const int L = p->L;
    double total = 0, slowest = 0, mean = 0;
    for (int l = 0; l < L; l++) {
        p->times[2 * l] = mine ? mine[l].fwd : 0;
        p->times[2 * l + 1] = mine ? mine[l].bwd : 0;
        total += p->times[2 * l] + p->times[2 * l + 1];
    }
    int rc = PC_MPI_CHECK(MPI_Allreduce(p->times, p->slowest, 2 * L, MPI_DOUBLE, MPI_SUM, p->c),
                          err, errlen);
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(MPI_Allreduce(&total, &slowest, 1, MPI_DOUBLE, MPI_MAX, p->c), err,
                          errlen);
    if (rc != PC_OK)
        return rc;
    for (int i = 0; i < 2 * L; i++)
        mean += p->slowest[i] / n;
    double scale = mean > 0 ? slowest / mean : 0;
    *sum = (pc_cost_layer_t){0};
    for (int l = 0; l < L; l++) {
        out[l] = (pc_cost_layer_t){.fwd = p->slowest[2 * l] / n * scale,
                                   .bwd = p->slowest[2 * l + 1] / n * scale};
        sum->fwd += out[l].fwd;
        sum->bwd += out[l].bwd;
    }
    return PC_OK;
}

/* Step 2: every rank's profile (all ranks profiled at once). Collective. */
static int layer_times(probe_run_t *p, const pc_auto_probe_t *probe, char *err, size_t errlen)
{
    pc_auto_measured_t *m = &p->sh->m;
    m->nlayers = p->L;
    int rc = merge_profiles(p, probe->layers, p->size, m->layers, &m->compute, err, errlen);
    memcpy(m->layers_ps, m->layers, sizeof(m->layers));
    m->compute_ps = m->compute;
    return rc;
}

/* Complete *req without spinning: test it, and sleep 2 ms between tests (a rank that
 * spins takes a core from one still profiling or measuring). */
static int wait_quietly(MPI_Request *req, char *err, size_t errlen)
{
    int rc = PC_OK;
    for (int flag = 0; rc == PC_OK && !flag;) {
        rc = PC_MPI_CHECK(MPI_Test(req, &flag, MPI_STATUS_IGNORE), err, errlen);
        if (rc == PC_OK && !flag)
            nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
    }
    return rc;
}

/* Wait for every rank of p->c without spinning. Collective. */
static int quiet_barrier(probe_run_t *p, char *err, size_t errlen)
{
    MPI_Request req;
    int rc = PC_MPI_CHECK(MPI_Ibarrier(p->c, &req), err, errlen);
    return rc == PC_OK ? wait_quietly(&req, err, errlen) : rc;
}

static bool layers_ok(const pc_cost_layer_t *l, int n)
{
    for (int i = 0; i < n; i++)
        if (!(l[i].fwd >= 0 && l[i].bwd >= 0 && isfinite(l[i].fwd) && isfinite(l[i].bwd)))
            return false;
    return true;
}

/* Step 2b: the parameter-server layout's workers (ranks below size - servers) profile
 * again with the probe's callback, at once, while its servers wait without spinning
 * (merge_profiles of theirs). Skipped (layers_ps stays layers) where no rank
 * has a callback or the layout has no worker. Collective. */
static int ps_layer_times(probe_run_t *p, const pc_auto_measure_cfg_t *mc,
                          const pc_auto_probe_t *probe, char *err, size_t errlen)
{
    pc_auto_measured_t *m = &p->sh->m;
    int W = p->size - mc->servers;
    int has = probe->profile != NULL, all = 0;
    int rc = PC_MPI_CHECK(MPI_Allreduce(&has, &all, 1, MPI_INT, MPI_MIN, p->c), err, errlen);
    if (rc != PC_OK || !all || W < 1)
        return rc;
    pc_cost_layer_t *mine = calloc((size_t)p->L, sizeof(*mine));
    int local = mine ? PC_OK : PC_ENOMEM;
    if ((rc = quiet_barrier(p, err, errlen)) != PC_OK) { /* the workers start together */
        free(mine);
        return rc;
    }
    if (local == PC_OK && p->rank < W) {
        local = probe->profile(probe->ctx, mine, p->L);
        if (local == PC_OK && !layers_ok(mine, p->L))
            local = PC_EINVAL;
    }
    if ((rc = quiet_barrier(p, err, errlen)) == PC_OK &&
        (rc = agree(p->c, local, err, errlen)) != PC_OK && rc != PC_EMPI)
        pc_error_fmt(rc, err, errlen,
                     "--mode auto: the parameter-server layout's profile failed on %s rank: %s",
                     local == PC_OK ? "another" : "this", pc_strerror(rc));
    if (rc == PC_OK)
        rc = merge_profiles(p, p->rank < W ? mine : NULL, W, m->layers_ps, &m->compute_ps, err,
                            errlen);
    if (rc == PC_OK)
        m->ps_workers = W;
    free(mine);
    return rc;
}

/* This rank's machine: its kernel's boot id (ranks in other namespaces of one kernel,
 * as emulated nodes are, share its cores), or "host:" and its host name where that cannot
 * be read. */
static void machine_key(char *key, const char *host)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    char id[BOOT_LEN] = "";
    if (f) {
        if (!fgets(id, sizeof(id), f))
            id[0] = '\0';
        fclose(f);
        id[strcspn(id, "\n")] = '\0';
    }
    if (id[0])
        snprintf(key, BOOT_LEN, "boot:%s", id);
    else
        snprintf(key, BOOT_LEN, "host:%.*s", BOOT_LEN - 6, host);
}

/* Add a machine of (ranks, servers, cores) to m's kinds: counted with its like, or a new
 * kind, or, with no room left, in place of the least crowded kind if it is more crowded. */
static void add_machine(pc_auto_measured_t *m, int ranks, int servers, int cores, const char *host)
{
    for (int k = 0; k < m->nmachines; k++) {
        pc_auto_machine_t *x = &m->machine[k];
        if (x->ranks == ranks && x->servers == servers && x->cores == cores) {
            x->count++;
            return;
        }
    }
    int k = m->nmachines;
    if (k == PC_AUTO_MAX_MACHINES) {
        k = 0;
        for (int j = 1; j < m->nmachines; j++)
            if ((double)m->machine[j].ranks / m->machine[j].cores <
                (double)m->machine[k].ranks / m->machine[k].cores)
                k = j;
        if ((double)ranks / cores <= (double)m->machine[k].ranks / m->machine[k].cores)
            return;
    } else {
        m->nmachines++;
    }
    m->machine[k] =
        (pc_auto_machine_t){.count = 1, .ranks = ranks, .servers = servers, .cores = cores};
    snprintf(m->machine[k].host, sizeof(m->machine[k].host), "%s", host);
}

int pc_auto_group_machines(pc_auto_measured_t *m, int size, int servers, const char *keys,
                           const char *hosts, const int *cores)
{
    if (!m || size < 1 || servers < 0 || !keys || !hosts || !cores)
        return PC_EINVAL;
    m->nmachines = 0;
    m->crowded_host[0] = '\0';
    m->crowded_ranks = m->crowded_cores = 0;
    for (int r = 0; r < size; r++) {
        const char *b = keys + (size_t)r * PC_AUTO_KEY_LEN;
        bool first = true;
        for (int q = 0; q < r && first; q++)
            first = strcmp(keys + (size_t)q * PC_AUTO_KEY_LEN, b) != 0;
        if (!first)
            continue; /* counted with rank r's first rank */
        int ranks = 0, nserv = 0, most = 1;
        for (int q = r; q < size; q++)
            if (strcmp(keys + (size_t)q * PC_AUTO_KEY_LEN, b) == 0) {
                ranks++;
                nserv += q >= size - servers;
                most = cores[q] > most ? cores[q] : most;
            }
        const char *h = hosts + (size_t)r * PC_COMM_HOST_LEN;
        add_machine(m, ranks, nserv, most, h);
        if (!m->crowded_host[0] ||
            (double)ranks / most > (double)m->crowded_ranks / m->crowded_cores) {
            snprintf(m->crowded_host, sizeof(m->crowded_host), "%s", h);
            m->crowded_ranks = ranks;
            m->crowded_cores = most;
        }
    }
    return PC_OK;
}

/* Step 3a: every rank's host, machine key and cores, then the kinds of machine
 * (pc_auto_group_machines). Collective. */
static int find_machines(probe_run_t *p, const pc_auto_measure_cfg_t *mc, char *err, size_t errlen)
{
    pc_auto_measured_t *m = &p->sh->m;
    m->servers = mc->servers;
    int rc = pc_comm_hosts(p->c, p->hosts, err, errlen);
    if (rc != PC_OK)
        return rc;
    char key[BOOT_LEN];
    machine_key(key, p->hosts + (size_t)p->rank * PC_COMM_HOST_LEN);
    cpu_set_t set;
    int mine = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    if (mine < 1)
        mine = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if ((rc = PC_MPI_CHECK(
             MPI_Allgather(key, BOOT_LEN, MPI_CHAR, p->boots, BOOT_LEN, MPI_CHAR, p->c), err,
             errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, p->cores, 1, MPI_INT, p->c), err,
                           errlen)) != PC_OK)
        return rc;
    return pc_auto_group_machines(m, p->size, mc->servers, p->boots, p->hosts, p->cores);
}

/* Step 3b: the link, between rank 0 and the first rank on another host (rank 1 on one
 * host); one rank crosses no link (its allreduce is a local step). Collective. */
static int find_link(probe_run_t *p, const pc_auto_measure_cfg_t *mc, char *err, size_t errlen)
{
    pc_auto_measured_t *m = &p->sh->m;
    m->link_peer = -1;
    if (p->size < 2) {
        m->link = (pc_cost_link_t){.bandwidth = HUGE_VAL, .latency = 0};
        return PC_OK;
    }
    m->link_peer = 1;
    for (int r = 1; r < p->size; r++)
        if (strcmp(p->hosts + (size_t)r * PC_COMM_HOST_LEN, p->hosts) != 0) {
            m->link_peer = r;
            m->link_remote = true;
            break;
        }
    snprintf(m->link_host, sizeof(m->link_host), "%s",
             p->hosts + (size_t)m->link_peer * PC_COMM_HOST_LEN);
    int local = measure_link(p->c, mc->link_bytes, mc->reps, m, err, errlen);
    int rc = agree(p->c, local, err, errlen);
    if (rc != PC_OK && local == PC_OK && rc != PC_EMPI)
        pc_error_fmt(rc, err, errlen,
                     "--mode auto: the link probe between ranks 0 and %d failed (the message "
                     "is theirs)",
                     m->link_peer);
    return rc;
}

/* Step 4: rank 0 measures the codecs and the server (t0: when the probe began); the
 * others wait for its result without spinning (they would take a core from its
 * measurements). A broadcast that fails may still write p->sh: it is then left allocated
 * (p->sh NULL). Collective. */
static int share_rates(probe_run_t *p, const pc_auto_measure_cfg_t *mc,
                       const pc_auto_probe_t *probe, int64_t t0, char *err, size_t errlen)
{
    shared_t *sh = p->sh;
    if (p->rank == 0) {
        sh->rc = measure_rates(mc, probe, &sh->m, sh->msg, sizeof(sh->msg));
        sh->m.seconds = (double)(pc_time_ns() - t0) * 1e-9;
    }
    MPI_Request req;
    int rc = PC_MPI_CHECK(MPI_Ibcast(sh, (int)sizeof(*sh), MPI_BYTE, 0, p->c, &req), err, errlen);
    if (rc != PC_OK)
        return rc;
    if ((rc = wait_quietly(&req, err, errlen)) != PC_OK) {
        p->sh = NULL;
        return rc;
    }
    if (sh->rc != PC_OK)
        return pc_error_fmt(sh->rc, err, errlen, "--mode auto: %s", sh->msg);
    return PC_OK;
}

int pc_auto_measure(MPI_Comm comm, const pc_auto_measure_cfg_t *mc, const pc_auto_probe_t *probe,
                    pc_auto_measured_t *out, char *err, size_t errlen)
{
    int64_t t0 = pc_time_ns();
    /* A failure before the first collective (out missing, or the duplicate's set-up) is
     * this rank's alone: the others would wait in it. Only a caller's bug or a broken MPI
     * gets there; everything after it fails on every rank alike. */
    if (!out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "pc_auto_measure: no result");
    probe_run_t p = {.c = MPI_COMM_NULL};
    int rc;
    if ((rc = PC_MPI_CHECK(MPI_Comm_dup(comm, &p.c), err, errlen)) != PC_OK)
        return rc;
    if ((rc = PC_MPI_CHECK(MPI_Comm_set_errhandler(p.c, MPI_ERRORS_RETURN), err, errlen)) !=
            PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_rank(p.c, &p.rank), err, errlen)) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Comm_size(p.c, &p.size), err, errlen)) != PC_OK) {
        PC_MPI_CHECK(MPI_Comm_free(&p.c), NULL, 0);
        return rc;
    }
    p.sh = calloc(1, sizeof(*p.sh));
    p.hosts = calloc((size_t)p.size, PC_COMM_HOST_LEN);
    p.boots = calloc((size_t)p.size, BOOT_LEN);
    p.cores = calloc((size_t)p.size, sizeof(int));
    p.L = probe_ok(probe) && mcfg_ok(mc) ? probe->nlayers : 0;
    p.times = calloc((size_t)(p.L > 0 ? p.L : 1) * 2, sizeof(double));
    p.slowest = calloc((size_t)(p.L > 0 ? p.L : 1) * 2, sizeof(double));
    int local = !p.sh || !p.hosts || !p.boots || !p.cores || !p.times || !p.slowest ? PC_ENOMEM
                : p.L == 0                                                          ? PC_EINVAL
                                                                                    : PC_OK;
    if ((rc = check_ranks(&p, local, err, errlen)) == PC_OK &&
        (rc = layer_times(&p, probe, err, errlen)) == PC_OK &&
        (rc = ps_layer_times(&p, mc, probe, err, errlen)) == PC_OK &&
        (rc = find_machines(&p, mc, err, errlen)) == PC_OK &&
        (rc = find_link(&p, mc, err, errlen)) == PC_OK &&
        (rc = share_rates(&p, mc, probe, t0, err, errlen)) == PC_OK)
        *out = p.sh->m;
    free(p.sh);
    free(p.hosts);
    free(p.boots);
    free(p.cores);
    free(p.times);
    free(p.slowest);
    /* A failure to free is reported only when nothing failed before. */
    int frc = PC_MPI_CHECK(MPI_Comm_free(&p.c), rc == PC_OK ? err : NULL, rc == PC_OK ? errlen : 0);
    return rc != PC_OK ? rc : frc;
}

int pc_auto_cost(const pc_auto_measured_t *m, const pc_auto_probe_t *probe, size_t chunk_bytes,
                 size_t compress_min_bytes, const pc_cost_link_t *link, bool ps_layout,
                 pc_cost_t **out)
{
    if (!m || !probe_ok(probe) || probe->nlayers != m->nlayers || !out)
        return PC_EINVAL;
    pc_cost_cfg_t cc = {.layers = ps_layout ? m->layers_ps : m->layers,
                        .nlayers = m->nlayers,
                        .tensors = probe->tensors,
                        .tensor_layer = probe->tensor_layer,
                        .ntensors = probe->ntensors,
                        .chunk_bytes = chunk_bytes,
                        .compress_min_bytes = compress_min_bytes,
                        .server = m->server,
                        .lowrank = m->lowrank,
                        .link = link ? *link : m->link};
    memcpy(cc.codec, m->codec, sizeof(cc.codec));
    return pc_cost_create(&cc, out);
}

double pc_auto_cores_bound(const pc_auto_measured_t *m, pc_cost_mode_t mode,
                           const pc_cost_result_t *pred)
{
    if (!m || !pred)
        return 0;
    bool ar = mode == PC_COST_ALLREDUCE;
    /* A worker's work beside its backward passes, and a server's. */
    double x = pred->compress + (ar ? pred->comm_busy + pred->server_busy : 0);
    double y = ar ? 0 : pred->server_busy;
    double bound = 0;
    int per_worker = 1 + (pred->compressors > 1 ? pred->compressors : 1); /* backprop + pool */
    for (int k = 0; k < m->nmachines; k++) {
        const pc_auto_machine_t *h = &m->machine[k];
        int S = ar ? 0 : h->servers, W = h->ranks - S, C = h->cores;
        if (C < 1 || per_worker * W + S <= C)
            continue; /* a core per thread: the cost model's assumption holds */
        double busy = (W < C ? W : C) * pred->compute + W * x + S * y;
        bound = fmax(bound, busy / C);
    }
    return bound;
}

int pc_auto_pool_cap(const pc_auto_measured_t *m)
{
    int cap = PC_CONFIG_COMPRESSORS_AUTO_CAP;
    for (int k = 0; m && k < m->nmachines; k++) {
        const pc_auto_machine_t *h = &m->machine[k];
        int W = h->ranks - h->servers;
        if (W < 1)
            continue; /* servers only: no pool there */
        int free = (h->cores - h->servers - W) / W;
        cap = free < cap ? free : cap;
    }
    return cap < 1 ? 1 : cap;
}

/* Predictions within this fraction of each other count as alike: a tenth of the spread
 * the per-node grid measured between modes that differ (doc/scaling.md). */
#define ALIKE_FRACTION 0.005

pc_auto_crowding_t pc_auto_crowding(const pc_auto_result_t *res, char *line, size_t len)
{
    const pc_auto_measured_t *me = &res->measured;
    const pc_cost_choice_t *c = &res->choice;
    if (len)
        line[0] = '\0';
    /* A worker runs its backprop thread and its pool (the chosen candidate's N, at least one
     * compressor or communication thread). */
    int pool = c->best < PC_COST_MODES && c->pred[c->best].compressors > 1
                   ? c->pred[c->best].compressors
                   : 1;
    if (!((1 + pool) * me->crowded_ranks > me->crowded_cores))
        return PC_AUTO_ROOMY;
    double lo = INFINITY, hi = 0;
    for (int k = 0; k < PC_COST_MODES; k++)
        if (c->candidate[k]) {
            lo = fmin(lo, c->pred[k].iter);
            hi = fmax(hi, c->pred[k].iter);
        }
    const char *s = me->crowded_cores == 1 ? "" : "s";
    if (lo <= hi && hi <= lo * (1 + ALIKE_FRACTION)) {
        snprintf(line, len,
                 "auto: warning: the predictions cannot tell the modes apart on %s's machine: "
                 "%d ranks may use %d core%s, and every mode predicts %.2f ms; the choice rests "
                 "on the number of workers alone, and another mode may be faster here "
                 "(measure with scripts/bench/e2e.sh; doc/scaling.md)",
                 me->crowded_host, me->crowded_ranks, me->crowded_cores, s, lo * 1e3);
        return PC_AUTO_ALIKE;
    }
    snprintf(line, len,
             "auto: warning: %d ranks on %s's machine may use %d core%s: the predictions share "
             "them among the threads by CPU time, a coarse model, so the fastest mode may not "
             "be the one predicted (doc/scaling.md)",
             me->crowded_ranks, me->crowded_host, me->crowded_cores, s);
    return PC_AUTO_CROWDED;
}

int pc_auto_apply(pc_config_t *cfg, pc_cost_mode_t m, char *flags, size_t len)
{
    if (!cfg || cfg->mode != PC_MODE_AUTO || (int)m < 0 || m >= PC_COST_MODES || !flags || !len)
        return PC_EINVAL;
    /* Resolved into a copy: cfg changes only when the flags fit. */
    pc_config_t r = *cfg;
    char specs[PC_COST_CODECS][PC_AUTO_SPEC_LEN];
    codec_specs(PC_AUTO_TOPK_RATIO, PC_AUTO_DGC_RATIO, cfg->momentum, specs);
    const char *spec = specs[PC_COST_CODEC_NONE];
    r.mode = m == PC_COST_ALLREDUCE ? PC_MODE_ALLREDUCE : PC_MODE_PS;
    r.pipeline = m != PC_COST_PS_TOPK_INLINE;
    switch (m) {
    case PC_COST_PS_TOPK_PIPELINED:
    case PC_COST_PS_TOPK_INLINE:
        spec = specs[PC_COST_CODEC_TOPK];
        r.momentum = 0; /* the workers' momentum correction holds it */
        break;
    case PC_COST_PS_DGC_PIPELINED:
        spec = specs[PC_COST_CODEC_DGC];
        r.momentum = 0;
        break;
    case PC_COST_PS_TOPK_SERVERMOM:
        spec = specs[PC_COST_CODEC_TOPK_EF];
        break;
    case PC_COST_PS_POWERSGD_PIPELINED: /* the run's momentum stays, on the servers */
        spec = specs[PC_COST_CODEC_POWERSGD];
        break;
    default:
        break;
    }
    snprintf(r.compress, sizeof(r.compress), "%s", spec);
    if (!pc_cost_mode_pooled(m)) /* no pool: one thread (pc_config_check's rule) */
        snprintf(r.compressors, sizeof(r.compressors), "1");
    char mtext[32], pool[sizeof(r.compressors) + 16] = "";
    exact(mtext, sizeof(mtext), r.momentum);
    if (strcmp(r.compressors, "1") != 0)
        snprintf(pool, sizeof(pool), " --compressors %s", r.compressors);
    int n;
    if (m == PC_COST_ALLREDUCE) {
        r.servers = 0;
        n = snprintf(flags, len, "--mode allreduce --momentum %s", mtext);
    } else {
        n = snprintf(flags, len,
                     "--mode ps --servers %d --compress %s --pipeline %s --momentum %s%s",
                     r.servers, spec, r.pipeline ? "on" : "off", mtext, pool);
    }
    if (n < 0 || (size_t)n >= len) {
        flags[0] = '\0';
        return PC_EINVAL;
    }
    pc_config_set_given(&r, "mode", 1);
    pc_config_set_given(&r, "servers", 0);
    pc_config_set_given(&r, "compress", 0);
    pc_config_set_given(&r, "pipeline", 0);
    pc_config_set_given(&r, "momentum", 0);
    if (!pc_cost_mode_pooled(m))
        pc_config_set_given(&r, "compressors", 0);
    *cfg = r;
    return PC_OK;
}

/* The pipelined parameter-server candidates of *ch again with r->pool's compressor threads
 * (N above 1), or with the least pool that keeps up (auto: pc_cost_pool_size, at most
 * r->pool_cap); each candidate's N into r->compressors. */
static int predict_pools(pc_auto_result_t *r, const pc_cost_t *cost, int servers,
                         pc_cost_choice_t *ch)
{
    for (int k = 0; k < PC_COST_MODES; k++) {
        r->compressors[k] = 1;
        if (!ch->candidate[k] || !pc_cost_mode_pooled((pc_cost_mode_t)k) || r->pool == 1)
            continue;
        int n = r->pool, rc;
        if (r->pool == 0)
            rc = pc_cost_pool_size(cost, (pc_cost_mode_t)k, ch->workers[k], servers,
                                   &r->measured.link, r->pool_cap, &n, &ch->pred[k]);
        else
            rc = pc_cost_predict_pool(cost, (pc_cost_mode_t)k, ch->workers[k], servers,
                                      &r->measured.link, n, &ch->pred[k]);
        if (rc != PC_OK)
            return rc;
        r->compressors[k] = n;
    }
    return PC_OK;
}

/* Every candidate's prediction into r->choice: the allreduce on the compute every rank
 * profiled, the parameter-server modes on their layout's (pc_auto_cost) and r->pool's
 * compressor threads (predict_pools), each raised to the cores' bound where that is
 * longer; the best by samples per second. Pure. */
static int predict_all(pc_auto_result_t *r, const pc_auto_probe_t *probe,
                       const pc_auto_measure_cfg_t *mc, int size, int servers, char *err,
                       size_t errlen)
{
    pc_cost_choice_t part[2];
    bool got[2] = {false, false};
    int rc = PC_OK;
    for (int ps = 0; ps < 2 && rc == PC_OK; ps++) {
        unsigned want =
            ps ? CANDIDATES & ~(1u << PC_COST_ALLREDUCE) : CANDIDATES & (1u << PC_COST_ALLREDUCE);
        pc_cost_t *cost = NULL;
        if ((rc = pc_auto_cost(&r->measured, probe, mc->chunk_bytes, mc->compress_min_bytes, NULL,
                               ps, &cost)) != PC_OK) {
            pc_error_fmt(rc, err, errlen, "--mode auto: the measured rates make no model: %s",
                         pc_strerror(rc));
            break;
        }
        /* PC_EINVAL: no layout of these modes on these ranks (one rank has no servers). */
        int crc = pc_cost_choose(cost, want, size, servers, &r->measured.link, &part[ps]);
        if (crc == PC_OK && ps)
            crc = predict_pools(r, cost, servers, &part[ps]);
        pc_cost_destroy(cost);
        got[ps] = crc == PC_OK;
        if (crc != PC_OK && crc != PC_EINVAL)
            rc = pc_error_fmt(crc, err, errlen, "--mode auto: the prediction failed: %s",
                              pc_strerror(crc));
    }
    if (rc != PC_OK)
        return rc;
    if (!got[0] && !got[1])
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "--mode auto: no mode to choose for %d ranks and --servers %d", size,
                            servers);
    pc_cost_choice_t *c = &r->choice;
    *c = (pc_cost_choice_t){.best = PC_COST_MODES};
    for (int k = 0; k < PC_COST_MODES; k++) {
        const pc_cost_choice_t *from = &part[k == PC_COST_ALLREDUCE ? 0 : 1];
        if (!got[k == PC_COST_ALLREDUCE ? 0 : 1] || !from->candidate[k])
            continue;
        c->candidate[k] = true;
        c->workers[k] = from->workers[k];
        c->pred[k] = from->pred[k];
        r->model_iter[k] = c->pred[k].iter;
        r->cores_bound[k] = pc_auto_cores_bound(&r->measured, (pc_cost_mode_t)k, &c->pred[k]);
        c->pred[k].iter = fmax(c->pred[k].iter, r->cores_bound[k]);
        c->rate[k] = c->pred[k].iter > 0 ? c->workers[k] / c->pred[k].iter : HUGE_VAL;
        if (c->best == PC_COST_MODES || c->rate[k] > c->rate[c->best])
            c->best = (pc_cost_mode_t)k;
    }
    return PC_OK;
}

int pc_auto_choose(pc_config_t *cfg, MPI_Comm comm, const pc_auto_probe_t *probe, int reps,
                   pc_auto_result_t *out, char *err, size_t errlen)
{
    if (!cfg || cfg->mode != PC_MODE_AUTO || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "pc_auto_choose: not a --mode auto config");
    pc_auto_result_t *r = calloc(1, sizeof(*r));
    if (!r)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "--mode auto: out of memory");
    pc_auto_measure_cfg_t mc = {.chunk_bytes = (size_t)cfg->chunk_bytes,
                                .compress_min_bytes = (size_t)cfg->compress_min_bytes,
                                .topk_ratio = PC_AUTO_TOPK_RATIO,
                                .dgc_ratio = PC_AUTO_DGC_RATIO,
                                .momentum = cfg->momentum,
                                .servers = cfg->servers > 0 ? cfg->servers : 1,
                                .link_bytes = PC_AUTO_LINK_BYTES,
                                .reps = reps,
                                .seed = (uint64_t)cfg->seed};
    /* --compressors, checked before the measurement (a bad value fails there, not after). */
    char why[256];
    int size = 0, rc = pc_config_compressors_parse(cfg->compressors, &r->pool, why, sizeof(why));
    if (rc != PC_OK)
        rc = pc_error_fmt(PC_EUSAGE, err, errlen, "--compressors: %s", why);
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(MPI_Comm_size(comm, &size), err, errlen);
    if (rc == PC_OK)
        rc = pc_auto_measure(comm, &mc, probe, &r->measured, err, errlen);
    /* Every rank holds the same figures: the pure functions below decide alike. */
    if (rc == PC_OK) {
        r->pool_cap = pc_auto_pool_cap(&r->measured);
        rc = predict_all(r, probe, &mc, size, cfg->servers, err, errlen);
    }
    pc_config_t chosen = *cfg; /* cfg changes on success only */
    if (rc == PC_OK) {
        pc_cost_mode_t best = r->choice.best;
        if (pc_cost_mode_pooled(best))
            snprintf(chosen.compressors, sizeof(chosen.compressors), "%d", r->compressors[best]);
        else if (strcmp(cfg->compressors, "1") != 0)
            snprintf(r->note, sizeof(r->note),
                     "auto: note: --compressors %s dropped: %s has no compressor pool; "
                     "--compressors 1",
                     cfg->compressors, pc_cost_mode_name(best));
        if ((rc = pc_auto_apply(&chosen, best, r->flags, sizeof(r->flags))) != PC_OK)
            pc_error_fmt(rc, err, errlen, "--mode auto: the chosen flags do not fit");
    }
    if (rc == PC_OK) {
        *cfg = chosen;
        *out = *r;
    }
    free(r);
    return rc;
}

void pc_auto_print(const pc_auto_result_t *res, int batch, FILE *out)
{
    const pc_auto_measured_t *me = &res->measured;
    fprintf(out,
            "auto: probe %.2f s: compute %.2f ms (forward %.2f, backward %.2f; the slowest "
            "rank's pass)",
            me->seconds, (me->compute.fwd + me->compute.bwd) * 1e3, me->compute.fwd * 1e3,
            me->compute.bwd * 1e3);
    if (me->ps_workers > 0)
        fprintf(out, "; with only the parameter servers' %d workers computing %.2f ms",
                me->ps_workers, (me->compute_ps.fwd + me->compute_ps.bwd) * 1e3);
    if (me->link_peer >= 0)
        fprintf(out, "; link r0 - r%d (%s, %s): %.1f MB/s, latency %.1f us\n", me->link_peer,
                me->link_host, me->link_remote ? "another host" : "this host",
                me->link.bandwidth * 1e-6, me->link.latency * 1e6);
    else
        fprintf(out, "; one rank: no link\n");
    const pc_cost_choice_t *c = &res->choice;
    char warning[1024];
    if (pc_auto_crowding(res, warning, sizeof(warning)) != PC_AUTO_ROOMY)
        fprintf(out, "%s\n", warning);
    for (int k = 0; k < PC_COST_MODES; k++) {
        if (!c->candidate[k])
            continue;
        char why[64] = "";
        if (res->cores_bound[k] > res->model_iter[k])
            snprintf(why, sizeof(why), "  (cores shared; the model alone %.2f ms)",
                     res->model_iter[k] * 1e3);
        fprintf(out, "auto: predict %-21s W=%-3d iter %8.2f ms  %9.0f samples/s  %5.2fx%s%s\n",
                pc_cost_mode_name(k), c->workers[k], c->pred[k].iter * 1e3, c->rate[k] * batch,
                c->rate[k] / c->rate[c->best], k == (int)c->best ? "  <- chosen" : "", why);
    }
    int b = (int)c->best;
    if (res->pool != 1 && pc_cost_mode_pooled(c->best)) {
        const pc_cost_result_t *p = &c->pred[b];
        char why[96];
        if (res->pool == 0 && !p->keeps_up)
            snprintf(why, sizeof(why), "--compressors auto: its cap %d, short of keeping up",
                     res->pool_cap);
        else if (res->pool == 0)
            snprintf(why, sizeof(why), "--compressors auto: the least that keeps up, at most %d",
                     res->pool_cap);
        else
            snprintf(why, sizeof(why), "--compressors %d", res->pool);
        fprintf(out,
                "auto: compressors %d per worker for %s (%s): predicted compression %.2f ms "
                "on the busiest thread (%.2f ms of CPU), backward %.2f ms; the pool assumed to "
                "divide the work perfectly\n",
                res->compressors[b], pc_cost_mode_name(b), why, p->compress_busy * 1e3,
                p->compress * 1e3, p->backward * 1e3);
    }
    if (res->note[0])
        fprintf(out, "%s\n", res->note);
    fprintf(out,
            "auto: chose %s: %s (these flags, in place of --mode auto and any --servers or "
            "--momentum given, run the same without the probe)\n",
            pc_cost_mode_name(c->best), res->flags);
    fflush(out);
}
