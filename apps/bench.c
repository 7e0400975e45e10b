/* bench: helpers the pc-bench subcommands share (declared in bench.h): a pair of threads pinned to
 * two cores with a start barrier. */
#include <stdio.h>
#include <stdlib.h>

#include <pthread.h>

#include "bench.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_topo.h"

struct bench_pair {
    pc_topo_t *topo;
    pc_topo_plan_t *plan;
    char placement[512];
};

int bench_pair_create(bench_pair_t **out)
{
    bench_pair_t *p = calloc(1, sizeof(*p));
    if (!p)
        return -1;
    char err[256];
    static const char *const names[] = {"side0", "side1"};
    pc_topo_rank_t me;
    pc_bind_t bind = {.mode = PC_BIND_AUTO};
    if (pc_topo_create(NULL, &p->topo, err, sizeof(err)) != PC_OK ||
        pc_topo_self(p->topo, 0, 2, names, &me) != PC_OK ||
        pc_topo_plan_create(p->topo, &bind, &me, 1, &p->plan, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: cannot plan thread placement: %s\n", err);
        bench_pair_destroy(p);
        return -1;
    }
    pc_topo_plan_describe(p->plan, p->placement, sizeof(p->placement));
    *out = p;
    return 0;
}

void bench_pair_destroy(bench_pair_t *p)
{
    if (!p)
        return;
    pc_topo_plan_destroy(p->plan);
    pc_topo_destroy(p->topo);
    free(p);
}

const char *bench_pair_placement(const bench_pair_t *p)
{
    return p->placement;
}

typedef struct side_arg {
    bench_pair_t *pair;
    pthread_barrier_t *start;
    void (*fn)(void *, int);
    void *arg;
    int side;
    int rc;
    char err[256];
    struct side_arg *both; /* the two sides' args: each checks the other's binding */
} side_arg_t;

static void *side_main(void *p)
{
    side_arg_t *a = p;
    a->rc = pc_topo_plan_bind(a->pair->topo, a->pair->plan, 0, a->side, a->err, sizeof(a->err));
    /* The barrier orders both rc writes before both reads: run only if both sides bound,
     * or one side would wait forever for a peer that never starts. */
    pthread_barrier_wait(a->start);
    if (a->both[0].rc == PC_OK && a->both[1].rc == PC_OK)
        a->fn(a->arg, a->side);
    return NULL;
}

int bench_pair_run(bench_pair_t *p, void (*fn)(void *arg, int side), void *arg)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    side_arg_t a[2];
    pthread_t th[2];
    for (int s = 0; s < 2; s++) {
        a[s] = (side_arg_t){.pair = p, .start = &start, .fn = fn, .arg = arg, .side = s, .both = a};
        if (pthread_create(&th[s], NULL, side_main, &a[s]) != 0) {
            fprintf(stderr, "pc-bench: cannot start a thread\n");
            exit(BENCH_EXIT_FAIL);
        }
    }
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    pthread_barrier_destroy(&start);
    for (int s = 0; s < 2; s++)
        if (a[s].rc != PC_OK) {
            fprintf(stderr, "pc-bench: %s\n", a[s].err);
            return -1;
        }
    return 0;
}
