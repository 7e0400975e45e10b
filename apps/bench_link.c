/* pc-bench link: what a link carries for MPI. Under mpirun with an even number of ranks,
 * rank 2i streams to rank 2i+1, every pair at once: the sender keeps --depth nonblocking
 * sends of --bytes each in flight for --seconds, the receiver as many receives posted.
 * Rank 0 prints each flow's achieved rate (bits of payload per second, decimal units as
 * tc's "gbit") and the total, and one JSON line (also into --json FILE).
 *
 * A flow's rate is measured at its receiver: payload bytes received between the common
 * start (a barrier of every rank) and the completion of its last data message. The total
 * is every flow's bytes over the longest flow's time, so it is what the link pair carried
 * while the flows ran together. With two ranks per node and --map-by node, the flows share
 * one link pair (scripts/bench/links.sh; doc/cluster.md).
 *
 * The end of a flow: when --seconds have passed the sender stops posting, waits for its
 * sends, then sends --depth empty messages with the tag STOP_TAG. Receives are posted and
 * completed in ring order and MPI matches them in posting order, so the first empty
 * message lands in the oldest posted receive and the other depth - 1 fill exactly the
 * receives still posted: no receive is left to cancel. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench.h"
#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_time.h"

#define DATA_TAG 1
#define STOP_TAG 2
/* Most messages in flight per flow: a ring of requests, each receive with its own buffer. */
#define MAX_DEPTH 64

typedef struct opts {
    double seconds;
    int64_t bytes;
    int depth;
    char json[512];
} opts_t;

static const pc_flags_t link_opts[] = {
    {.name = "seconds",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(opts_t, seconds),
     .min = 0.25, /* exact in binary: the range error prints it as written */
     .max = 3600,
     .metavar = "S",
     .help = "how long every flow streams"},
    {.name = "bytes",
     .type = PC_FLAGS_SIZE,
     .offset = offsetof(opts_t, bytes),
     .min = 1,
     .max = 1073741824.0,
     .metavar = "SIZE",
     .help = "size of each message (4M: a runtime chunk's order)"},
    {.name = "depth",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, depth),
     .min = 1,
     .max = MAX_DEPTH,
     .metavar = "N",
     .help = "messages in flight per flow"},
    {.name = "json",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, json),
     .size = 512,
     .metavar = "FILE",
     .help = "also write the JSON line to FILE"},
};

/* One rank's result, gathered to rank 0: a receiver's payload and seconds (a sender's
 * are 0). */
typedef struct flow_result {
    double bytes;
    double seconds;
} flow_result_t;

/* The sender's side: stream to peer until deadline (pc_time_ns), then the stop messages.
 * buf (bytes) is only read, so every send in flight shares it. */
static void send_flow(const char *buf, int bytes, int depth, int peer, int64_t deadline)
{
    MPI_Request req[MAX_DEPTH];
    for (int i = 0; i < depth; i++)
        MPI_Isend(buf, bytes, MPI_BYTE, peer, DATA_TAG, MPI_COMM_WORLD, &req[i]);
    for (int i = 0;; i = (i + 1) % depth) {
        MPI_Wait(&req[i], MPI_STATUS_IGNORE);
        if (pc_time_ns() >= deadline)
            break;
        MPI_Isend(buf, bytes, MPI_BYTE, peer, DATA_TAG, MPI_COMM_WORLD, &req[i]);
    }
    MPI_Waitall(depth, req, MPI_STATUSES_IGNORE); /* the completed one is MPI_REQUEST_NULL */
    for (int i = 0; i < depth; i++)
        MPI_Send(NULL, 0, MPI_BYTE, peer, STOP_TAG, MPI_COMM_WORLD);
}

/* The receiver's side: depth receives posted into bufs (depth x bytes) until the first stop
 * message; the payload received and the time from t0 to the last data message in r.
 * Returns 0, or BENCH_EXIT_FAIL when a message was not what the sender sends (said). */
static int recv_flow(char *bufs, int bytes, int depth, int peer, int64_t t0, flow_result_t *r)
{
    MPI_Request req[MAX_DEPTH];
    MPI_Status st;
    int64_t last = t0;
    int status = 0, count;
    r->bytes = 0;
    for (int i = 0; i < depth; i++)
        MPI_Irecv(bufs + (size_t)i * (size_t)bytes, bytes, MPI_BYTE, peer, MPI_ANY_TAG,
                  MPI_COMM_WORLD, &req[i]);
    int i = 0;
    for (;; i = (i + 1) % depth) {
        MPI_Wait(&req[i], &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (st.MPI_TAG == STOP_TAG)
            break;
        if (count != bytes) {
            fprintf(stderr, "pc-bench link: from rank %d: a %d-byte message, expected %d\n", peer,
                    count, bytes);
            status = BENCH_EXIT_FAIL;
        }
        last = pc_time_ns();
        r->bytes += count;
        MPI_Irecv(bufs + (size_t)i * (size_t)bytes, bytes, MPI_BYTE, peer, MPI_ANY_TAG,
                  MPI_COMM_WORLD, &req[i]);
    }
    /* The other depth - 1 posted receives take the remaining stop messages. */
    for (int k = 1; k < depth; k++) {
        int j = (i + k) % depth;
        MPI_Wait(&req[j], &st);
        if (st.MPI_TAG != STOP_TAG) {
            fprintf(stderr, "pc-bench link: from rank %d: data after the stop message\n", peer);
            status = BENCH_EXIT_FAIL;
        }
    }
    r->seconds = (double)(last - t0) * 1e-9;
    return status;
}

/* Rank 0: the report from every rank's result and host name (size of each: MPI's). */
static int report(const opts_t *o, int size, const flow_result_t *res, const char *hosts)
{
    int flows = size / 2;
    double total_bytes = 0, longest = 0;
    char line[8192];
    int len = 0;
    printf("link: %d flow(s), mpi, %lld-byte messages, %d in flight, %.1f s\n", flows,
           (long long)o->bytes, o->depth, o->seconds);
    len += snprintf(line + len, sizeof(line) - (size_t)len,
                    "{\"benchmark\": \"link\", \"transport\": \"mpi\", \"flows\": %d, "
                    "\"bytes\": %lld, \"depth\": %d, \"seconds\": %.3f, \"flow_gbps\": [",
                    flows, (long long)o->bytes, o->depth, o->seconds);
    for (int f = 0; f < flows; f++) {
        const flow_result_t *r = &res[2 * f + 1];
        double gbps = r->seconds > 0 ? r->bytes * 8 / r->seconds * 1e-9 : 0;
        printf("flow %d: rank %d (%s) -> rank %d (%s): %.1f MB in %.2f s, %.3f Gbit/s\n", f, 2 * f,
               hosts + (size_t)(2 * f) * MPI_MAX_PROCESSOR_NAME, 2 * f + 1,
               hosts + (size_t)(2 * f + 1) * MPI_MAX_PROCESSOR_NAME, r->bytes * 1e-6, r->seconds,
               gbps);
        if (len < (int)sizeof(line) - 64)
            len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%.4f", f ? ", " : "", gbps);
        total_bytes += r->bytes;
        longest = r->seconds > longest ? r->seconds : longest;
    }
    double total = longest > 0 ? total_bytes * 8 / longest * 1e-9 : 0;
    printf("total: %.3f Gbit/s over %d flow(s) (%.1f MB in %.2f s)\n", total, flows,
           total_bytes * 1e-6, longest);
    snprintf(line + len, sizeof(line) - (size_t)len,
             "], \"total_gbps\": %.4f, \"bytes_moved\": %.0f, \"elapsed_s\": %.4f}", total,
             total_bytes, longest);
    printf("%s\n", line);
    fflush(stdout);
    FILE *j = o->json[0] ? fopen(o->json, "w") : NULL;
    bool bad = o->json[0] && !j;
    if (j) {
        bad = fprintf(j, "%s\n", line) < 0;
        bad = fclose(j) != 0 || bad;
    }
    if (bad) {
        fprintf(stderr, "pc-bench: --json: cannot write '%s'\n", o->json);
        if (j)
            remove(o->json); /* no half-written result */
        return BENCH_EXIT_FAIL;
    }
    return total_bytes > 0 ? 0 : BENCH_EXIT_FAIL;
}

/* After the flags and the rank count are good: allocate, stream, gather, report. */
static int run(const opts_t *o, int rank, int size)
{
    int bytes = (int)o->bytes, peer = rank ^ 1, status = 0;
    bool sender = rank % 2 == 0;
    size_t nbuf = sender ? (size_t)bytes : (size_t)bytes * (size_t)o->depth;
    char *buf = malloc(nbuf);
    flow_result_t mine = {0, 0}, *all = NULL;
    char host[MPI_MAX_PROCESSOR_NAME] = "", *hosts = NULL;
    int hlen;
    if (rank == 0) {
        all = malloc(sizeof(*all) * (size_t)size);
        hosts = calloc((size_t)size, MPI_MAX_PROCESSOR_NAME);
    }
    if (!buf || (rank == 0 && (!all || !hosts))) {
        fprintf(stderr, "pc-bench link: rank %d: out of memory for %zu bytes of buffers\n", rank,
                nbuf);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    }
    memset(buf, sender ? 0x5a : 0, nbuf); /* touched: no page faults while timing */
    MPI_Get_processor_name(host, &hlen);
    MPI_Barrier(MPI_COMM_WORLD); /* every flow starts together */
    int64_t t0 = pc_time_ns();
    if (sender)
        send_flow(buf, bytes, o->depth, peer, t0 + (int64_t)(o->seconds * 1e9));
    else
        status = recv_flow(buf, bytes, o->depth, peer, t0, &mine);
    MPI_Gather(&mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (rank == 0) {
        int s = report(o, size, all, hosts);
        status = status ? status : s;
    }
    MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    free(buf);
    free(all);
    free(hosts);
    return status;
}

int bench_link_main(int argc, char **argv)
{
    int provided, rank, size;
    /* MPI_COMM_WORLD keeps MPI_ERRORS_ARE_FATAL: an MPI error ends the job with MPI's
     * message. One thread calls MPI here. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    opts_t o = {.seconds = 5, .bytes = 4 << 20, .depth = 4, .json = ""};
    pc_flags_group_t g = {"pc-bench link flags", link_opts,
                          sizeof(link_opts) / sizeof(link_opts[0]), &o, NULL};
    char err[512] = "";
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err));
    int status = pc_flags_finish(rc, &g, 1, "pc-bench",
                                 "mpirun -np N pc-bench link [flags]   (N even: rank 2i streams "
                                 "to rank 2i+1, every pair at once)",
                                 err, rank == 0, stdout, stderr);
    if (status < 0 && (size < 2 || size % 2)) {
        if (rank == 0)
            fprintf(stderr,
                    "pc-bench link: needs an even number of ranks, 2 or more (got %d): rank 2i "
                    "streams to rank 2i+1\n",
                    size);
        status = BENCH_EXIT_USAGE;
    }
    if (status < 0)
        status = run(&o, rank, size);
    MPI_Finalize();
    return status;
}
