/* pc-bench handoff: how fast an idle consumer thread picks up a descriptor, and what it
 * costs while idle, for the waiting policies of the compressor thread, in one run:
 *   backoff-50us  pc_backoff with naps capped at 50 us (the compressor before pc_event,
 *                 while updates were outstanding: POLL_SLEEP_NS)
 *   backoff-1ms   pc_backoff with naps capped at 1 ms (the same, with nothing outstanding)
 *   event         a short spin, then a park on pc_event (the compressor now, on a core it
 *                 shares), woken by the producer's notify; re-checks every 100 ms
 *   event+window  the same after a spin window of --spin-us (default 1000, the
 *                 compressor's SPIN_WINDOW_NS on a core of its own) after each item
 *
 * Two threads pinned to two different cores (bench_pair). The producer hands over `items`
 * descriptors through a pc_spsc ring, one every min-us..max-us microseconds (uniform,
 * fixed seed; it sleeps in between, as backprop computes between two grad_ready calls),
 * stamping each with pc_time_ns() just before the push. The consumer reads the clock as
 * soon as it holds the item (where the fold would start): latency = the difference, on
 * one monotonic clock. Then the producer stays away for idle-ms milliseconds and the
 * consumer's CPU time over that stretch (CLOCK_THREAD_CPUTIME_ID) divided by its wall time
 * is the idle cost, in % of a core. Each figure is the median over `reps` repetitions;
 * repetitions are the outer loop, so a shared machine's drift hits every policy alike. */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_event.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"

typedef struct opts {
    int items;
    int min_us, max_us;
    int idle_ms;
    int spin_us;
    int reps;
    char json[512];
} opts_t;

static const pc_flags_t handoff_opts[] = {
    {.name = "items",
     .short_name = 'n',
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, items),
     .min = 10,
     .max = 10000000,
     .metavar = "N",
     .help = "descriptors handed over per policy and repetition"},
    {.name = "min-us",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, min_us),
     .min = 0,
     .max = 1000000,
     .metavar = "US",
     .help = "shortest idle gap between two hand-overs, microseconds"},
    {.name = "max-us",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, max_us),
     .min = 0,
     .max = 1000000,
     .metavar = "US",
     .help = "longest idle gap between two hand-overs, microseconds"},
    {.name = "idle-ms",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, idle_ms),
     .min = 10,
     .max = 600000,
     .metavar = "MS",
     .help = "idle stretch over which the consumer's CPU use is measured"},
    {.name = "spin-us",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, spin_us),
     .min = 0,
     .max = 1000000,
     .metavar = "US",
     .help = "event+window policy: spin this long after each item before parking (the "
             "compressor's window on a core of its own: 1000)"},
    BENCH_OPT_REPS(opts_t),
    {.name = "json",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, json),
     .size = 512,
     .metavar = "FILE",
     .help = "also write the results as JSON to FILE"},
};

enum policy { P_BACKOFF_50US, P_BACKOFF_1MS, P_EVENT, P_EVENT_WINDOW, P_COUNT };
static const char *const policy_names[P_COUNT] = {"backoff-50us", "backoff-1ms", "event",
                                                  "event+window"};

/* The event policy's longest park: the compressor's re-check interval (IDLE_PARK_NS in
 * src/runtime/worker_impl.h). */
#define EVENT_RECHECK_NS 100000000

/* What travels: the item's number (-1: stop) and the producer's clock at the push. */
typedef struct item {
    int64_t seq;
    int64_t t_push;
} item_t;

typedef struct exp {
    enum policy policy;
    const opts_t *o;
    pc_spsc_t *q;
    pc_event_t *ev;
    int64_t *lat_ns;                   /* items latencies, by seq */
    int64_t busy_cpu_ns, busy_wall_ns; /* the consumer over the hand-over phase */
    int64_t idle_cpu_ns, idle_wall_ns; /* the consumer over the idle stretch */
    int64_t bad;                       /* items received out of order */
} exp_t;

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A small fixed-seed generator for the gaps (xorshift64*): the same gaps for every policy. */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

/* The consumer's wait for one item, by policy; returns with *out filled. */
typedef struct pop_arg {
    pc_spsc_t *q;
    item_t *out;
} pop_arg_t;

static bool pop_into(void *arg)
{
    pop_arg_t *p = arg;
    return pc_spsc_try_pop(p->q, p->out);
}

static void wait_item(exp_t *e, item_t *out, bool idle)
{
    if (e->policy == P_EVENT || e->policy == P_EVENT_WINDOW) {
        pop_arg_t p = {e->q, out};
        if (e->policy == P_EVENT_WINDOW && e->o->spin_us > 0 && !idle) {
            int64_t until = pc_time_ns() + (int64_t)e->o->spin_us * 1000;
            while (pc_time_ns() < until) {
                if (pc_spsc_try_pop(e->q, out))
                    return;
                pc_backoff_cpu_relax();
            }
        }
        while (pc_event_await(e->ev, pop_into, &p, EVENT_RECHECK_NS, NULL) != PC_OK)
            ;
        return;
    }
    /* The compressor's loop before pc_event: reset after work, then pause between tries. */
    pc_backoff_t b;
    pc_backoff_init_capped(&b, e->policy == P_BACKOFF_50US ? 50000 : PC_BACKOFF_MAX_SLEEP_NS);
    while (!pc_spsc_try_pop(e->q, out))
        pc_backoff_pause(&b);
}

static void run_side(void *arg, int side)
{
    exp_t *e = arg;
    const opts_t *o = e->o;
    if (side == 0) {
        uint64_t rng = 0x9e3779b97f4a7c15ull;
        int64_t span = (int64_t)(o->max_us - o->min_us) + 1;
        for (int i = 0; i <= o->items; i++) {
            int64_t gap_us = i == o->items
                                 ? (int64_t)o->idle_ms * 1000
                                 : o->min_us + (int64_t)(next_rand(&rng) % (uint64_t)span);
            pc_time_sleep_ns(gap_us * 1000);
            item_t it = {.seq = i == o->items ? -1 : i, .t_push = pc_time_ns()};
            while (!pc_spsc_try_push(e->q, &it))
                pc_backoff_cpu_relax();
            if (e->policy == P_EVENT || e->policy == P_EVENT_WINDOW)
                pc_event_notify(e->ev);
        }
        return;
    }
    int64_t c0 = thread_cpu_ns(), w0 = pc_time_ns();
    for (int i = 0; i < o->items; i++) {
        item_t it;
        wait_item(e, &it, false);
        int64_t now = pc_time_ns();
        if (it.seq != i)
            e->bad++;
        else
            e->lat_ns[i] = now - it.t_push;
    }
    e->busy_cpu_ns = thread_cpu_ns() - c0;
    e->busy_wall_ns = pc_time_ns() - w0;
    c0 = thread_cpu_ns();
    w0 = pc_time_ns();
    item_t stop;
    /* An idle compressor does not spin-wait for work, except through its window, which
     * starts after the last item as in the compressor (it is part of the idle cost). */
    wait_item(e, &stop, e->policy != P_EVENT_WINDOW);
    e->idle_cpu_ns = thread_cpu_ns() - c0;
    e->idle_wall_ns = pc_time_ns() - w0;
    if (stop.seq != -1)
        e->bad++;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n sorted values (nearest rank). */
static double quantile(const int64_t *v, int n, double q)
{
    int k = (int)(q * (double)n + 0.999999) - 1;
    if (k < 0)
        k = 0;
    if (k >= n)
        k = n - 1;
    return (double)v[k];
}

/* One repetition of one policy: p50 and p99 in microseconds, CPU while handing over and
 * while idle in % of a core. */
static int run_once(bench_pair_t *pair, enum policy p, const opts_t *o, double *p50, double *p99,
                    double *busy, double *idle)
{
    exp_t e = {.policy = p, .o = o};
    e.lat_ns = calloc((size_t)o->items, sizeof(int64_t));
    int rc = -1;
    if (!e.lat_ns || pc_spsc_create(64, sizeof(item_t), &e.q) != PC_OK ||
        pc_event_create(&e.ev) != PC_OK)
        goto out;
    if (bench_pair_run(pair, run_side, &e) != 0)
        goto out;
    if (e.bad) {
        fprintf(stderr, "pc-bench: %s: %" PRId64 " items out of order\n", policy_names[p], e.bad);
        goto out;
    }
    qsort(e.lat_ns, (size_t)o->items, sizeof(int64_t), cmp_i64);
    *p50 = quantile(e.lat_ns, o->items, 0.50) * 1e-3;
    *p99 = quantile(e.lat_ns, o->items, 0.99) * 1e-3;
    *busy = e.busy_wall_ns > 0 ? 100.0 * (double)e.busy_cpu_ns / (double)e.busy_wall_ns : 0;
    *idle = e.idle_wall_ns > 0 ? 100.0 * (double)e.idle_cpu_ns / (double)e.idle_wall_ns : 0;
    rc = 0;
out:
    pc_event_destroy(e.ev);
    pc_spsc_destroy(e.q);
    free(e.lat_ns);
    return rc;
}

/* The cost of a notify that finds nobody waiting, in ns (single thread, 10^6 calls). */
static double notify_cost_ns(void)
{
    pc_event_t *ev;
    if (pc_event_create(&ev) != PC_OK)
        return -1;
    const int n = 1000000;
    int64_t t0 = pc_time_ns();
    for (int i = 0; i < n; i++)
        pc_event_notify(ev);
    double ns = (double)(pc_time_ns() - t0) / n;
    pc_event_destroy(ev);
    return ns;
}

/* The medians per policy (p50, p99, busy CPU, idle CPU) and the ratios against
 * event+window, with the targets' verdicts. */
static void print_figures(double fig[P_COUNT][4])
{
    printf("\n%-14s %12s %12s %14s %14s\n", "policy", "p50 us", "p99 us", "busy CPU %",
           "idle CPU %");
    for (int p = 0; p < P_COUNT; p++)
        printf("%-14s %12.1f %12.1f %14.2f %14.3f\n", policy_names[p], fig[p][0], fig[p][1],
               fig[p][2], fig[p][3]);
    const double *ev = fig[P_EVENT_WINDOW]; /* two pinned threads: cores of their own */
    printf(
        "\nratios (against event+window): p50 backoff-1ms %.1f, backoff-50us %.1f; p99 backoff-1ms "
        "%.1f, backoff-50us %.1f\n",
        fig[P_BACKOFF_1MS][0] / ev[0], fig[P_BACKOFF_50US][0] / ev[0],
        fig[P_BACKOFF_1MS][1] / ev[1], fig[P_BACKOFF_50US][1] / ev[1]);
    printf("event+window (two threads on cores of their own): p50 %.1f us (target <= 10: %s), p99 "
           "%.1f us (target <= 100: %s), idle %.3f %% "
           "of a core (target < 1: %s)\n",
           ev[0], ev[0] <= 10 ? "met" : "NOT met", ev[1], ev[1] <= 100 ? "met" : "NOT met", ev[3],
           ev[3] < 1 ? "met" : "NOT met");
}

/* --json: the run's settings and the figures; closes json. 0, or -1 with a message. */
static int write_json(FILE *json, const opts_t *o, const char *placement, double notify_ns,
                      double fig[P_COUNT][4])
{
    const double *ev = fig[P_EVENT_WINDOW];
    fprintf(json,
            "{\n  \"benchmark\": \"handoff\",\n  \"items\": %d,\n  \"min_us\": %d,\n"
            "  \"max_us\": %d,\n  \"idle_ms\": %d,\n  \"reps\": %d,\n  \"placement\": \"%s\",\n"
            "  \"spin_us\": %d,\n  \"notify_ns\": %.2f,\n  \"policies\": {\n",
            o->items, o->min_us, o->max_us, o->idle_ms, o->reps, placement, o->spin_us, notify_ns);
    for (int p = 0; p < P_COUNT; p++)
        fprintf(json,
                "    \"%s\": {\"p50_us\": %.2f, \"p99_us\": %.2f, \"busy_cpu_pct\": %.3f, "
                "\"idle_cpu_pct\": %.4f}%s\n",
                policy_names[p], fig[p][0], fig[p][1], fig[p][2], fig[p][3],
                p + 1 < P_COUNT ? "," : "");
    fprintf(json,
            "  },\n  \"ratios\": {\"p50_backoff_1ms_vs_event_window\": %.4f, "
            "\"p99_backoff_1ms_vs_event_window\": %.4f}\n}\n",
            fig[P_BACKOFF_1MS][0] / ev[0], fig[P_BACKOFF_1MS][1] / ev[1]);
    if (fclose(json) != 0) {
        fprintf(stderr, "pc-bench: --json: error writing '%s'\n", o->json);
        return -1;
    }
    return 0;
}

int bench_handoff_main(int argc, char **argv)
{
    opts_t o = {
        .items = 2000, .min_us = 100, .max_us = 500, .idle_ms = 1000, .reps = 3, .spin_us = 1000};
    pc_flags_group_t g = {"pc-bench handoff flags", handoff_opts,
                          sizeof(handoff_opts) / sizeof(handoff_opts[0]), &o, NULL};
    char err[512];
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err));
    int early =
        pc_flags_finish(rc, &g, 1, "pc-bench", "pc-bench handoff [flags]", err, 1, stdout, stderr);
    if (early >= 0)
        return early;
    if (o.max_us < o.min_us) {
        fprintf(stderr, "pc-bench: --max-us %d is below --min-us %d\n", o.max_us, o.min_us);
        return BENCH_EXIT_USAGE;
    }
    FILE *json = NULL;
    if (o.json[0] && !(json = fopen(o.json, "w"))) {
        fprintf(stderr, "pc-bench: --json: cannot write '%s'\n", o.json);
        return BENCH_EXIT_FAIL;
    }
    bench_pair_t *pair;
    if (bench_pair_create(&pair) != 0) {
        if (json)
            fclose(json);
        return BENCH_EXIT_FAIL;
    }
    double notify_ns = notify_cost_ns();
    printf("pc-bench handoff: %d items every %d-%d us, idle %d ms, event spin window %d us, "
           "%d reps (median)\n%s\nnotify with nobody waiting: %.1f ns\n",
           o.items, o.min_us, o.max_us, o.idle_ms, o.spin_us, o.reps, bench_pair_placement(pair),
           notify_ns);
    /* samples[(p * NFIG + figure) * reps + r]; figures: p50, p99, busy CPU, idle CPU. */
    enum { NFIG = 4 };
    double *samples = malloc(sizeof(double) * (size_t)o.reps * P_COUNT * NFIG);
    if (!samples) {
        bench_pair_destroy(pair);
        if (json)
            fclose(json);
        return BENCH_EXIT_FAIL;
    }
    for (int r = 0; r < o.reps; r++)
        for (int p = 0; p < P_COUNT; p++) {
            double *s = samples + (size_t)p * NFIG * (size_t)o.reps + (size_t)r;
            if (run_once(pair, (enum policy)p, &o, &s[0], &s[o.reps], &s[2 * o.reps],
                         &s[3 * o.reps]) != 0) {
                free(samples);
                bench_pair_destroy(pair);
                if (json)
                    fclose(json);
                return BENCH_EXIT_FAIL;
            }
        }
    double fig[P_COUNT][NFIG];
    for (int p = 0; p < P_COUNT; p++)
        for (int f = 0; f < NFIG; f++)
            fig[p][f] = pc_time_median(samples + ((size_t)p * NFIG + (size_t)f) * (size_t)o.reps,
                                       (size_t)o.reps);
    print_figures(fig);
    if (json && write_json(json, &o, bench_pair_placement(pair), notify_ns, fig) != 0) {
        free(samples);
        bench_pair_destroy(pair);
        return BENCH_EXIT_FAIL;
    }
    free(samples);
    bench_pair_destroy(pair);
    return 0;
}
