/* pc_embed: the runtime inside another language's program (pc_embed.h). What pc-train's
 * main does around the runtime, behind one handle: MPI start-up, the runtime's flags, the
 * log, the runtime and this rank's worker. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "pipecompress/pc_auto.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_embed.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_runtime.h"

struct pc_embed {
    int rank, size;
    bool own_mpi; /* pc_embed_create started MPI: pc_embed_destroy finalises it */
    pc_config_t cfg;
    pc_log_t *log;
    pc_runtime_t *rt;
    pc_worker_t *w; /* NULL on a server rank */
    bool pending;   /* --mode auto not chosen yet (pc_embed_choose): no runtime, no worker */
    pc_embed_length_fn length; /* the run's length, kept for pc_embed_choose */
    void *ud;
    char auto_flags[2 * PC_CONFIG_SPEC_LEN]; /* the choice as fixed flags ("" without auto) */
};

/* Start MPI unless the process did; then it must allow calls from several threads. */
static int start_mpi(bool *own, char *err, size_t errlen)
{
    int inited = 0, finalized = 0, provided = 0;
    int rc = PC_MPI_CHECK(MPI_Initialized(&inited), err, errlen);
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(MPI_Finalized(&finalized), err, errlen);
    if (rc != PC_OK)
        return rc;
    if (finalized)
        return pc_error_fmt(PC_ESTATE, err, errlen,
                            "MPI was already finalised in this process: it cannot start again");
    *own = !inited;
    if (!inited)
        rc = PC_MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided), err, errlen);
    else
        rc = PC_MPI_CHECK(MPI_Query_thread(&provided), err, errlen);
    if (rc == PC_OK && provided < MPI_THREAD_MULTIPLE)
        rc = pc_error_fmt(PC_EMPI, err, errlen,
                          "MPI provides thread level %d, the runtime needs MPI_THREAD_MULTIPLE "
                          "(%d)%s",
                          provided, MPI_THREAD_MULTIPLE,
                          inited ? ": initialise MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE)"
                                 : "");
    return rc;
}

static void stop_mpi(bool own)
{
    char ignored[8];
    if (own)
        (void)PC_MPI_CHECK(MPI_Finalize(), ignored, sizeof(ignored));
}

/* The run's length (when the command line gave no --iters), then the runtime's checks of
 * e->cfg for this job: once the mode is known. */
static int check_config(pc_embed_t *e, char *err, size_t errlen)
{
    int rc = PC_OK;
    if (e->length && !pc_config_given(&e->cfg, "iters")) {
        /* The workers as the checks will count them: every rank with --mode allreduce. */
        int workers = e->cfg.mode == PC_MODE_ALLREDUCE ? e->size : e->size - e->cfg.servers;
        int64_t n = workers > 0 ? e->length(e->ud, workers) : 0;
        if (n < 0)
            rc = pc_error_fmt(PC_EUSAGE, err, errlen,
                              "the program's run length failed (%lld iterations)", (long long)n);
        else if (n > 0)
            e->cfg.iters = n;
    }
    if (rc == PC_OK)
        rc = pc_runtime_check_config(&e->cfg, e->size, err, errlen);
    return rc;
}

/* The runtime on MPI_COMM_WORLD and, on a worker rank, its worker (collective). On error
 * nothing is left of either. */
static int start_runtime(pc_embed_t *e, char *err, size_t errlen)
{
    int rc = pc_runtime_create(&e->cfg, MPI_COMM_WORLD, e->log, &e->rt, err, errlen);
    if (rc == PC_OK && pc_runtime_role(e->rt) == PC_ROLE_WORKER &&
        (rc = pc_worker_create(e->rt, &e->w, err, errlen)) != PC_OK) {
        pc_runtime_destroy(e->rt);
        e->rt = NULL;
    }
    return rc;
}

int pc_embed_create(int argc, char **argv, pc_embed_length_fn length, void *ud, pc_embed_t **out,
                    int *exit_status, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (exit_status)
        *exit_status = 1;
    if (!out || !exit_status || argc < 1 || !argv || !argv[0])
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "pc_embed_create: no argv[0], out or exit_status");
    pc_embed_t *e = calloc(1, sizeof(*e));
    if (!e)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    int rc = start_mpi(&e->own_mpi, err, errlen);
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &e->rank), err, errlen);
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &e->size), err, errlen);
    if (rc != PC_OK) {
        free(e);
        return rc;
    }
    /* getopt_long permutes the array it is given: parse a copy, argv stays the caller's. */
    char **args = malloc(sizeof(char *) * ((size_t)argc + 1));
    if (!args) {
        stop_mpi(e->own_mpi);
        free(e);
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    }
    memcpy(args, argv, sizeof(char *) * (size_t)argc);
    args[argc] = NULL;
    pc_config_defaults(&e->cfg);
    pc_flags_group_t group = pc_config_group(&e->cfg, "PipeCompress runtime");
    rc = pc_flags_parse(&group, 1, argc, args, NULL, err, errlen);
    free(args);
    if (rc == PC_OK && e->cfg.device != PC_DEVICE_CPU)
        rc = pc_error_fmt(PC_EUSAGE, err, errlen,
                          "--device %s: the binding hands the runtime CPU tensors only (GPU "
                          "training is pc-train --device cuda's)",
                          pc_config_device_name(e->cfg.device));
    e->pending = rc == PC_OK && e->cfg.mode == PC_MODE_AUTO;
    e->length = length;
    e->ud = ud;
    if (e->pending) /* what auto cannot take, now; the rest once it has chosen */
        rc = pc_auto_check(&e->cfg, e->size, err, errlen);
    else if (rc == PC_OK)
        rc = check_config(e, err, errlen);
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    int early = pc_flags_finish(rc, &group, 1, prog,
                                "mpirun -np N python3 SCRIPT [flags]   (doc/python.md)", err,
                                e->rank == 0, stdout, stderr);
    if (early >= 0) {
        fflush(stdout);
        fflush(stderr);
        *exit_status = early;
        stop_mpi(e->own_mpi);
        free(e);
        return early == 0 ? PC_OK : PC_EUSAGE;
    }
    if ((rc = pc_log_create(stderr, e->rank, (pc_log_level_t)e->cfg.log_level, &e->log)) != PC_OK) {
        free(e);
        return pc_error_fmt(rc, err, errlen, "cannot create the log");
    }
    if (!e->pending && (rc = start_runtime(e, err, errlen)) != PC_OK) {
        pc_log_destroy(e->log);
        free(e);
        return rc;
    }
    *exit_status = -1;
    *out = e;
    return PC_OK;
}

bool pc_embed_pending(const pc_embed_t *e)
{
    return e->pending;
}

int pc_embed_choose(pc_embed_t *e, const pc_auto_probe_t *probe, int batch, char *err,
                    size_t errlen)
{
    enum { REPS = 3 }; /* as pc-train's probe */
    if (!e || !e->pending)
        return pc_error_fmt(PC_ESTATE, err, errlen,
                            "choose: the mode is already fixed (--mode auto chooses once)");
    if (!probe || batch < 1)
        return pc_error_fmt(PC_EINVAL, err, errlen, "choose: no probe, or batch %d", batch);
    pc_auto_result_t *res = malloc(sizeof(*res)); /* a few KiB: the layers' figures */
    if (!res)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    pc_config_t cfg = e->cfg; /* resolved into e->cfg only when everything holds */
    int rc = pc_auto_choose(&cfg, MPI_COMM_WORLD, probe, REPS, res, err, errlen);
    if (rc == PC_OK && e->rank == 0)
        pc_auto_print(res, batch, stdout);
    if (rc == PC_OK) {
        pc_config_t keep = e->cfg;
        e->cfg = cfg;
        if ((rc = check_config(e, err, errlen)) == PC_OK &&
            (rc = start_runtime(e, err, errlen)) == PC_OK) {
            e->pending = false;
            snprintf(e->auto_flags, sizeof(e->auto_flags), "%s", res->flags);
        } else {
            e->cfg = keep;
        }
    }
    free(res);
    return rc;
}

const char *pc_embed_auto_flags(const pc_embed_t *e)
{
    return e->auto_flags;
}

int pc_embed_rank(const pc_embed_t *e)
{
    return e->rank;
}

int pc_embed_size(const pc_embed_t *e)
{
    return e->size;
}

pc_runtime_t *pc_embed_runtime(pc_embed_t *e)
{
    return e->rt;
}

pc_worker_t *pc_embed_worker(pc_embed_t *e)
{
    return e->w;
}

int pc_embed_config_text(const pc_embed_t *e, char *buf, size_t len)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f)
        return PC_ENOMEM;
    /* pc_flags_print only reads through the group's destination. */
    pc_config_t cfg = e->cfg;
    pc_flags_group_t group = pc_config_group(&cfg, "");
    pc_flags_print(&group, 1, "", f);
    if (fclose(f) != 0) {
        free(text);
        return PC_ENOMEM;
    }
    if (len > 0 && buf)
        snprintf(buf, len, "%s", text);
    free(text);
    return n > (size_t)0x7fffffff ? PC_ENOMEM : (int)n;
}

int pc_embed_run_server(pc_embed_t *e, char *err, size_t errlen)
{
    if (e->w)
        return pc_error_fmt(PC_ESTATE, err, errlen,
                            "run_server on rank %d, a worker (servers are the last --servers "
                            "ranks)",
                            e->rank);
    return pc_server_run(e->rt, err, errlen);
}

void pc_embed_destroy(pc_embed_t *e)
{
    if (!e)
        return;
    pc_worker_destroy(e->w);
    pc_runtime_destroy(e->rt);
    pc_log_destroy(e->log);
    stop_mpi(e->own_mpi);
    free(e);
}

void pc_embed_abort(int status)
{
    int inited = 0, finalized = 0;
    char ignored[8];
    if (PC_MPI_CHECK(MPI_Initialized(&inited), ignored, sizeof(ignored)) != PC_OK || !inited ||
        PC_MPI_CHECK(MPI_Finalized(&finalized), ignored, sizeof(ignored)) != PC_OK || finalized)
        return;
    (void)PC_MPI_CHECK(MPI_Abort(MPI_COMM_WORLD, status), ignored, sizeof(ignored));
}
