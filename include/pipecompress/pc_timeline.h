/* pc_timeline: per-thread event tracks written as a Chrome trace-event JSON (opens in
 * Perfetto, ui.perfetto.dev, or chrome://tracing).
 *
 * A timeline has a fixed set of tracks (one per thread: backprop, compressor, server),
 * declared before the threads start. Each track has exactly one writer, so recording an
 * event takes no lock: the writer appends to its own buffer. Tracks keep at most
 * PC_TIMELINE_MAX_EVENTS events and count the rest as dropped. */
#ifndef PC_TIMELINE_H
#define PC_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Per track: 2^20 events (48 MiB at most), hours of iterations of a small model. */
#define PC_TIMELINE_MAX_EVENTS (1u << 20)
#define PC_TIMELINE_MAX_TRACKS 8
#define PC_TIMELINE_NAME_LEN   40

typedef struct pc_timeline pc_timeline_t;

/* A timeline for process `pid` (the MPI rank) whose timestamps count from origin_ns
 * (pc_time_ns at a moment all ranks share, e.g. after a barrier). */
int pc_timeline_create(int pid, int64_t origin_ns, pc_timeline_t **out);
/* Free tl and its events (NULL is accepted). No thread may still record into it. */
void pc_timeline_destroy(pc_timeline_t *tl);

/* Declare a track (thread) named name; returns its id or a negative PC_E* code. Not
 * thread-safe: call before the tracks' threads start. */
int pc_timeline_track(pc_timeline_t *tl, const char *name);

/* Record a complete event [t0_ns, t1_ns) on a track. Only the track's thread may call it;
 * different tracks may record concurrently. name is copied (cut to the length above). */
void pc_timeline_event(pc_timeline_t *tl, int track, const char *name, int64_t t0_ns,
                       int64_t t1_ns);

/* The timeline's events and thread names as JSON objects separated by ",\n" (no
 * brackets), to be joined with other ranks' into {"traceEvents": [...]}. Caller frees.
 * Call when no thread records. NULL when out of memory. */
char *pc_timeline_json(const pc_timeline_t *tl, size_t *len);

/* Events dropped for lack of room, over all tracks. */
uint64_t pc_timeline_dropped(const pc_timeline_t *tl);

#ifdef __cplusplus
}
#endif
#endif /* PC_TIMELINE_H */
