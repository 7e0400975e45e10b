/* pc_spsc: creation, destruction and the waiting helpers of the SPSC ring (the lock-free
 * operations are inline in pc_spsc.h, with the ordering protocol). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"

int pc_spsc_create(size_t capacity, size_t slot_size, pc_spsc_t **out)
{
    if (!out || capacity < 2 || capacity > PC_SPSC_MAX_CAPACITY ||
        (capacity & (capacity - 1)) != 0 || slot_size == 0 || slot_size > PC_SPSC_MAX_SLOT)
        return PC_EINVAL;
    /* Stamp then item, padded so the next stamp is aligned. */
    size_t stride = (PC_SPSC_STAMP + slot_size + PC_SPSC_STAMP - 1) / PC_SPSC_STAMP * PC_SPSC_STAMP;
    if (capacity > (SIZE_MAX - PC_SPSC_CACHELINE) / stride)
        return PC_EINVAL; /* only reachable where size_t is 32 bits */
    pc_spsc_t *q = aligned_alloc(PC_SPSC_CACHELINE, sizeof(*q));
    if (!q)
        return PC_ENOMEM;
    size_t bytes = capacity * stride;
    /* aligned_alloc wants a multiple of the alignment. */
    size_t rounded = (bytes + PC_SPSC_CACHELINE - 1) / PC_SPSC_CACHELINE * PC_SPSC_CACHELINE;
    unsigned char *slots = aligned_alloc(PC_SPSC_CACHELINE, rounded);
    if (!slots) {
        free(q);
        return PC_ENOMEM;
    }
    memset(q, 0, sizeof(*q));
    atomic_init(&q->tail, 0);
    atomic_init(&q->head, 0);
    q->head_cache = 0;
    q->mask = capacity - 1;
    q->slot_size = slot_size;
    q->stride = stride;
    q->slots = slots;
    /* Item bytes stay unset: no item is read before a push writes it. Every stamp looks as
     * if its slot held the item one lap before index 0 could land there (idx - capacity +
     * 1, modulo 2^N): a fresh slot never matches head + 1. */
    for (size_t i = 0; i < capacity; i++)
        atomic_init(pc_spsc__stamp(q, i), i - capacity + 1);
    *out = q;
    return PC_OK;
}

void pc_spsc_destroy(pc_spsc_t *q)
{
    if (!q)
        return;
    free(q->slots);
    free(q);
}

typedef bool (*try_fn)(pc_spsc_t *q, void *item);

static bool try_push_fn(pc_spsc_t *q, void *item)
{
    return pc_spsc_try_push(q, item);
}

static bool try_pop_fn(pc_spsc_t *q, void *item)
{
    return pc_spsc_try_pop(q, item);
}

/* The shape of both waits: try; between tries back off, until the deadline. The first
 * try costs no clock read, so an uncontended call is as cheap as the try_ operation. */
static int wait_until(pc_spsc_t *q, void *item, try_fn op, int64_t timeout_ns, int64_t *waited_ns)
{
    if (op(q, item)) {
        if (waited_ns)
            *waited_ns = 0;
        return PC_OK;
    }
    int64_t start = pc_time_ns();
    int rc = PC_OK;
    pc_backoff_t b;
    pc_backoff_init(&b);
    for (;;) {
        pc_backoff_pause(&b);
        if (op(q, item))
            break;
        if (timeout_ns >= 0 && pc_time_ns() - start >= timeout_ns) {
            rc = PC_ETIMEDOUT;
            break;
        }
    }
    if (waited_ns)
        *waited_ns = pc_time_ns() - start;
    return rc;
}

int pc_spsc_push_wait(pc_spsc_t *q, const void *item, int64_t timeout_ns, int64_t *waited_ns)
{
    /* The cast drops const only to share wait_until; try_push_fn never writes item. */
    return wait_until(q, (void *)(uintptr_t)item, try_push_fn, timeout_ns, waited_ns);
}

int pc_spsc_pop_wait(pc_spsc_t *q, void *item, int64_t timeout_ns, int64_t *waited_ns)
{
    return wait_until(q, item, try_pop_fn, timeout_ns, waited_ns);
}
