/* pc_plan: chunking and server assignment (see pc_plan.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_plan.h"

void pc_plan_destroy(pc_plan_t *plan)
{
    if (!plan)
        return;
    free(plan->chunks);
    free(plan->tensor_first_chunk);
    free(plan->tensor_last_chunk);
    free(plan->server_elems);
    free(plan);
}

/* May tensor t join a chunk that ends with tensor t - 1? Its buffers must continue the
 * previous tensor's in both slabs. */
static int adjacent(const pc_plan_tensor_t *a, const pc_plan_tensor_t *b)
{
    return a->param && a->grad && b->param && b->grad && a->param + a->n == b->param &&
           a->grad + a->n == b->grad;
}

int pc_plan_create(const pc_plan_tensor_t *tensors, int ntensors, size_t chunk_elems, int nservers,
                   pc_plan_t **out)
{
    if (!tensors || ntensors < 1 || chunk_elems < 1 || nservers < 1 || !out)
        return PC_EINVAL;
    size_t max_chunks = 0;
    for (int t = 0; t < ntensors; t++) {
        if (tensors[t].n == 0 || (tensors[t].whole_rows && tensors[t].n % tensors[t].whole_rows))
            return PC_EINVAL;
        max_chunks += tensors[t].whole_rows ? 1 : (tensors[t].n + chunk_elems - 1) / chunk_elems;
    }
    pc_plan_t *p = calloc(1, sizeof(*p));
    if (!p)
        return PC_ENOMEM;
    p->ntensors = ntensors;
    p->nservers = nservers;
    p->chunks = calloc(max_chunks, sizeof(pc_plan_chunk_t));
    p->tensor_first_chunk = calloc((size_t)ntensors, sizeof(int));
    p->tensor_last_chunk = calloc((size_t)ntensors, sizeof(int));
    p->server_elems = calloc((size_t)nservers, sizeof(size_t));
    if (!p->chunks || !p->tensor_first_chunk || !p->tensor_last_chunk || !p->server_elems) {
        pc_plan_destroy(p);
        return PC_ENOMEM;
    }
    int nc = 0;
    for (int t = 0; t < ntensors; t++) {
        size_t n = tensors[t].n;
        if (tensors[t].whole_rows) {
            p->chunks[nc] = (pc_plan_chunk_t){.id = (uint32_t)nc,
                                              .first_tensor = t,
                                              .last_tensor = t,
                                              .offset = 0,
                                              .n = n,
                                              .rows = tensors[t].whole_rows};
            p->tensor_first_chunk[t] = p->tensor_last_chunk[t] = nc++;
            continue;
        }
        if (n <= chunk_elems) {
            pc_plan_chunk_t *last = nc ? &p->chunks[nc - 1] : NULL;
            /* A small tensor joins the previous chunk when that one is made of whole
             * tensors, has room, and the buffers continue each other. */
            if (last && n <= PC_PLAN_GROUP_MAX && !last->rows && last->offset == 0 &&
                last->last_tensor == t - 1 && tensors[last->first_tensor].n <= chunk_elems &&
                last->n + n <= chunk_elems && adjacent(&tensors[t - 1], &tensors[t])) {
                last->last_tensor = t;
                last->n += n;
            } else {
                p->chunks[nc] = (pc_plan_chunk_t){
                    .id = (uint32_t)nc, .first_tensor = t, .last_tensor = t, .offset = 0, .n = n};
                nc++;
            }
            p->tensor_first_chunk[t] = p->tensor_last_chunk[t] = nc - 1;
            continue;
        }
        /* Near-equal pieces: the first n % pieces get one more element. */
        size_t pieces = (n + chunk_elems - 1) / chunk_elems, base = n / pieces, extra = n % pieces;
        size_t off = 0;
        p->tensor_first_chunk[t] = nc;
        for (size_t k = 0; k < pieces; k++) {
            size_t len = base + (k < extra);
            p->chunks[nc] = (pc_plan_chunk_t){
                .id = (uint32_t)nc, .first_tensor = t, .last_tensor = t, .offset = off, .n = len};
            off += len;
            nc++;
        }
        p->tensor_last_chunk[t] = nc - 1;
    }
    p->nchunks = nc;
    /* Largest first to the least loaded server; stable order by id among equal sizes. */
    int *order = malloc(sizeof(int) * (size_t)nc);
    if (!order) {
        pc_plan_destroy(p);
        return PC_ENOMEM;
    }
    for (int i = 0; i < nc; i++)
        order[i] = i;
    for (int i = 1; i < nc; i++) { /* insertion sort: plans have at most thousands of chunks */
        int v = order[i], j = i - 1;
        while (j >= 0 && p->chunks[order[j]].n < p->chunks[v].n) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    for (int i = 0; i < nc; i++) {
        int best = 0;
        for (int s = 1; s < nservers; s++)
            if (p->server_elems[s] < p->server_elems[best])
                best = s;
        p->chunks[order[i]].server = best;
        p->server_elems[best] += p->chunks[order[i]].n;
    }
    free(order);
    *out = p;
    return PC_OK;
}

void pc_plan_print(const pc_plan_t *plan, const char *const *names, FILE *out, const char *prefix)
{
    for (int c = 0; c < plan->nchunks; c++) {
        const pc_plan_chunk_t *k = &plan->chunks[c];
        fprintf(out, "%schunk %u: %zu elements, server %d, tensor%s %s", prefix, k->id, k->n,
                k->server, k->first_tensor == k->last_tensor ? "" : "s",
                names ? names[k->first_tensor] : "?");
        if (k->first_tensor != k->last_tensor)
            fprintf(out, "..%s", names ? names[k->last_tensor] : "?");
        else if (plan->tensor_first_chunk[k->first_tensor] !=
                 plan->tensor_last_chunk[k->first_tensor])
            fprintf(out, " [%zu..%zu)", k->offset, k->offset + k->n);
        fputc('\n', out);
    }
    for (int s = 0; s < plan->nservers; s++)
        fprintf(out, "%sserver %d: %zu elements (%.1f MiB)\n", prefix, s, plan->server_elems[s],
                (double)plan->server_elems[s] * 4.0 / 1048576.0);
}

int pc_plan_deal(const pc_plan_t *plan, int nthreads, const uint64_t *work, int *lane)
{
    if (!plan || !lane || nthreads < 1 || nthreads > PC_PLAN_DEAL_MAX)
        return PC_EINVAL;
    /* W <= 2^50 (a model's elements are far under 2^40, pc_codec_work at most 7 a element),
     * so (2 S_i + w_i) nthreads < 2W 2^10 <= 2^61: no overflow. */
    const uint64_t max_total = UINT64_C(1) << 50;
    uint64_t total = 0, before = 0;
    for (int i = 0; i < plan->nchunks; i++) {
        uint64_t w = work ? work[i] : (uint64_t)plan->chunks[i].n;
        if (w > max_total - total)
            return PC_EINVAL;
        total += w;
    }
    if (total == 0 && plan->nchunks > 0)
        return PC_EINVAL;
    for (int i = 0; i < plan->nchunks; i++) {
        uint64_t w = work ? work[i] : (uint64_t)plan->chunks[i].n;
        uint64_t k = (2 * before + w) * (uint64_t)nthreads / (2 * total);
        lane[i] = k < (uint64_t)nthreads ? (int)k : nthreads - 1;
        before += w;
    }
    return PC_OK;
}
