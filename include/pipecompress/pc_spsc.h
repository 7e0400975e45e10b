/* pc_spsc: a lock-free single-producer/single-consumer ring of fixed-size slots.
 *
 * What it is for. The worker's backprop thread hands small descriptors (which tensor,
 * which part, which iteration) to its compressor thread, and the compressor thread hands
 * buffer releases and events back. One ring per direction, exactly one producer thread and
 * one consumer thread each: that contract is in every name (_spsc) and lets the ring work
 * with C11 acquire/release alone, no read-modify-write instructions.
 *
 * Representation.
 * - Capacity is a power of two; an index maps to its slot with a mask.
 * - head (next index to read) and tail (next index to write) run freely as size_t and are
 *   never wrapped; tail - head is the number of full slots (a 64-bit counter does not wrap
 *   in the life of a job).
 * - Each slot starts with a stamp: the index last written into it, plus one. A slot holds
 *   item i exactly when its stamp is i + 1 (created as if written one lap earlier, so no
 *   fresh slot matches). The item's bytes follow the stamp in the same cache line(s).
 * - The producer's line holds tail and its cached copy of head; the consumer's line holds
 *   head. The producer reads head only when its cached copy says the ring looks full.
 * - The consumer learns that slot h is full from the slot's own stamp, not from tail.
 *   Why: a consumer that has caught up with the producer (the usual state of a hand-off
 *   queue) would otherwise re-read tail for every item, pulling the producer's index line
 *   across cores once per item and stalling the producer's next store on it; the stamp
 *   arrives in the line that carries the item anyway. On a 2-core AMD EPYC VM that took
 *   single-item throughput from 25-55 to ~100 million items/s and the round trip from
 *   ~700 to ~370 ns (pc-bench spsc; doc/design.md). tail is still published (for
 *   pc_spsc_size_approx) but nobody reads it on the hot path, so its line stays in the
 *   producer's cache.
 * - Slot contents are copied in and out (memcpy of slot_size bytes): descriptors are a few
 *   dozen bytes, never gradient data.
 *
 * Memory ordering (the whole protocol):
 * - push: write the item, store tail (relaxed), then store the slot's stamp with release.
 *   pop: load the stamp with acquire; if it is h + 1, read the item. The release/acquire
 *   pair makes the item's bytes (and the new tail) visible before the consumer reads them.
 * - pop: read the item, then store head with release. push: load head with acquire, then
 *   overwrite the slot. That pair keeps the producer from overwriting a slot whose
 *   contents the consumer has not finished copying out.
 * - Each side loads its own index relaxed: only it writes that index.
 *
 * Bursts. try_push_burst checks space once (at most one read of head), copies every item,
 * publishes tail once and then stamps the slots in order; try_pop_burst takes the run of
 * stamped slots and frees all of them with one store of head.
 *
 * The hot operations are static inline (the one exception to opaque handles in this
 * project): a descriptor hand-off must cost a few nanoseconds, not a call. The try_
 * operations never block; the _wait helpers spin, yield, then sleep (pc_backoff). A thread
 * that should be woken at once instead pairs the try_ operations with a pc_event. */
#ifndef PC_SPSC_H
#define PC_SPSC_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Destructive-interference distance on the machines we target (x86-64, Arm Neoverse). */
#define PC_SPSC_CACHELINE 64
/* Largest capacity accepted: 2^30 slots. Far above any sensible queue of descriptors;
 * pc_spsc_create refuses a capacity * stride that does not fit size_t (32-bit hosts). */
#define PC_SPSC_MAX_CAPACITY ((size_t)1 << 30)
/* Largest slot: descriptors are small; a bigger slot means someone is copying data. */
#define PC_SPSC_MAX_SLOT 4096

/* Bytes in front of each item: the slot's stamp. */
#define PC_SPSC_STAMP sizeof(size_t)

typedef struct pc_spsc {
    /* Producer's cache line. */
    alignas(PC_SPSC_CACHELINE) _Atomic size_t tail; /* next index to write: producer stores
                                                       (relaxed, before the stamp's release);
                                                       read only by size_approx */
    size_t head_cache;                              /* producer's last seen head */
    /* Consumer's cache line. */
    alignas(PC_SPSC_CACHELINE) _Atomic size_t head; /* next index to read: consumer stores
                                                       (release), producer loads (acquire) */
    /* Constant after pc_spsc_create: shared read-only by both sides. */
    alignas(PC_SPSC_CACHELINE) size_t mask; /* capacity - 1 */
    size_t slot_size;                       /* bytes per item */
    size_t stride;                          /* bytes per slot: stamp + item, rounded
                                               up to a multiple of the stamp size */
    unsigned char *slots;                   /* capacity * stride bytes */
} pc_spsc_t;

_Static_assert(offsetof(pc_spsc_t, head) - offsetof(pc_spsc_t, tail) >= PC_SPSC_CACHELINE,
               "producer and consumer indices must sit on different cache lines");
_Static_assert(offsetof(pc_spsc_t, mask) - offsetof(pc_spsc_t, head) >= PC_SPSC_CACHELINE,
               "consumer index must not share a line with the constants");
_Static_assert(sizeof(_Atomic size_t) == PC_SPSC_STAMP && _Alignof(_Atomic size_t) <= PC_SPSC_STAMP,
               "a stamp must fit the bytes reserved in front of each item");

/* Create a ring of `capacity` slots (a power of two, 2..PC_SPSC_MAX_CAPACITY) of
 * `slot_size` bytes each (1..PC_SPSC_MAX_SLOT). On success *out owns the ring; free it
 * with pc_spsc_destroy. Returns PC_EINVAL for a bad size, PC_ENOMEM; on error *out is
 * untouched. Call before the threads that use the ring start (their creation publishes
 * it). */
int pc_spsc_create(size_t capacity, size_t slot_size, pc_spsc_t **out);

/* Free a ring (NULL is fine). Neither side may use it afterwards; the caller joins or
 * otherwise synchronises with both threads first. */
void pc_spsc_destroy(pc_spsc_t *q);

/* Slots in q (a power of two, fixed at create). Either thread, any time. */
static inline size_t pc_spsc_capacity(const pc_spsc_t *q)
{
    return q->mask + 1;
}

/* The stamp of the slot that index idx maps to. */
static inline _Atomic size_t *pc_spsc__stamp(const pc_spsc_t *q, size_t idx)
{
    return (_Atomic size_t *)(void *)(q->slots + (idx & q->mask) * q->stride);
}

/* The item bytes of the slot that index idx maps to. */
static inline unsigned char *pc_spsc__item(const pc_spsc_t *q, size_t idx)
{
    return q->slots + (idx & q->mask) * q->stride + PC_SPSC_STAMP;
}

/* Producer only. Copy one slot_size-byte item from `item` into the ring. Returns false,
 * changing nothing, when the ring is full. */
static inline bool pc_spsc_try_push(pc_spsc_t *q, const void *item)
{
    /* Relaxed: only this thread writes tail. */
    size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    if (t - q->head_cache > q->mask) {
        /* Acquire pairs with the consumer's release store of head in try_pop/try_pop_burst:
         * the slots it has left are fully read before we overwrite them. */
        q->head_cache = atomic_load_explicit(&q->head, memory_order_acquire);
        if (t - q->head_cache > q->mask)
            return false;
    }
    memcpy(pc_spsc__item(q, t), item, q->slot_size);
    /* Relaxed: ordered before the consumer's reads by the stamp's release below. */
    atomic_store_explicit(&q->tail, t + 1, memory_order_relaxed);
    /* Release pairs with the consumer's acquire load of the stamp: the item's bytes are
     * visible before the stamp that says the slot is full. */
    atomic_store_explicit(pc_spsc__stamp(q, t), t + 1, memory_order_release);
    return true;
}

/* Producer only. Push up to n items stored back to back at `items` (n * slot_size bytes).
 * Returns how many were pushed (0..n), a prefix of `items`. */
static inline size_t pc_spsc_try_push_burst(pc_spsc_t *q, const void *items, size_t n)
{
    size_t cap = q->mask + 1;
    size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed); /* own index */
    size_t space = cap - (t - q->head_cache);
    if (space < n) {
        /* Acquire pairs with the consumer's release store of head (see try_push). */
        q->head_cache = atomic_load_explicit(&q->head, memory_order_acquire);
        space = cap - (t - q->head_cache);
    }
    if (n > space)
        n = space;
    if (n == 0)
        return 0;
    const unsigned char *src = items;
    for (size_t i = 0; i < n; i++)
        memcpy(pc_spsc__item(q, t + i), src + i * q->slot_size, q->slot_size);
    /* Relaxed: ordered before the consumer's reads by the stamps' releases below. */
    atomic_store_explicit(&q->tail, t + n, memory_order_relaxed);
    /* Release pairs with the consumer's acquire load of each stamp (see try_push). */
    for (size_t i = 0; i < n; i++)
        atomic_store_explicit(pc_spsc__stamp(q, t + i), t + i + 1, memory_order_release);
    return n;
}

/* Consumer only. Copy the oldest item into `item` (slot_size bytes) and free its slot.
 * Returns false, changing nothing, when the ring is empty. */
static inline bool pc_spsc_try_pop(pc_spsc_t *q, void *item)
{
    /* Relaxed: only this thread writes head. */
    size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
    /* Acquire pairs with the producer's release store of this stamp in try_push/_burst:
     * the item's bytes written before that store are visible to the memcpy below. */
    if (atomic_load_explicit(pc_spsc__stamp(q, h), memory_order_acquire) != h + 1)
        return false;
    memcpy(item, pc_spsc__item(q, h), q->slot_size);
    /* Release pairs with the producer's acquire load of head: our read of the slot
     * completes before the producer may reuse it. */
    atomic_store_explicit(&q->head, h + 1, memory_order_release);
    return true;
}

/* Consumer only. Pop up to max items into `items` (max * slot_size bytes), freeing their
 * slots with one index store. Returns how many were popped (0..max), oldest first. */
static inline size_t pc_spsc_try_pop_burst(pc_spsc_t *q, void *items, size_t max)
{
    size_t h = atomic_load_explicit(&q->head, memory_order_relaxed); /* own index */
    unsigned char *dst = items;
    size_t n = 0;
    /* Acquire pairs with the producer's release store of each stamp (see try_pop). */
    while (n < max &&
           atomic_load_explicit(pc_spsc__stamp(q, h + n), memory_order_acquire) == h + n + 1) {
        memcpy(dst + n * q->slot_size, pc_spsc__item(q, h + n), q->slot_size);
        n++;
    }
    if (n == 0)
        return 0;
    /* Release pairs with the producer's acquire load of head (see try_pop). */
    atomic_store_explicit(&q->head, h + n, memory_order_release);
    return n;
}

/* Consumer only. Whether try_pop would find an item now; pops nothing. For a waiter's
 * re-test of "is there work" after it announced itself and before it parks (pc_event). */
static inline bool pc_spsc_can_pop(pc_spsc_t *q)
{
    size_t h = atomic_load_explicit(&q->head, memory_order_relaxed); /* own index */
    /* Acquire pairs with the producer's release store of the stamp (see try_pop). */
    return atomic_load_explicit(pc_spsc__stamp(q, h), memory_order_acquire) == h + 1;
}

/* Either side. Number of full slots at some instant during the call; exact only when the
 * other side is idle. For metrics (high-water marks), never for correctness. */
static inline size_t pc_spsc_size_approx(pc_spsc_t *q)
{
    /* Acquire loads order nothing we depend on here; they keep the two reads fresh.
     * Head first: the consumer advances head only past stamps whose release follows the
     * matching tail store, so a tail read after it is at least that head. */
    size_t h = atomic_load_explicit(&q->head, memory_order_acquire);
    size_t t = atomic_load_explicit(&q->tail, memory_order_acquire);
    return t - h;
}

/* Producer only. Push one item, waiting (spin, yield, then sleep: pc_backoff) while the
 * ring is full, for at most timeout_ns nanoseconds (negative: no limit). Returns PC_OK or
 * PC_ETIMEDOUT (nothing pushed). If waited_ns is not NULL it receives the time spent
 * waiting (0 when the first try succeeded), so callers can account back-pressure. */
int pc_spsc_push_wait(pc_spsc_t *q, const void *item, int64_t timeout_ns, int64_t *waited_ns);

/* Consumer only. Pop one item, waiting while the ring is empty, for at most timeout_ns
 * (negative: no limit). Returns PC_OK or PC_ETIMEDOUT (nothing popped); waited_ns as
 * above. */
int pc_spsc_pop_wait(pc_spsc_t *q, void *item, int64_t timeout_ns, int64_t *waited_ns);

#ifdef __cplusplus
}
#endif
#endif /* PC_SPSC_H */
