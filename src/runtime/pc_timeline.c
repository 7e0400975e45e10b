/* pc_timeline: lock-free single-writer event tracks and their JSON. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_timeline.h"

typedef struct event {
    int64_t t0, t1;
    char name[PC_TIMELINE_NAME_LEN];
} event_t;

typedef struct track {
    char name[32];
    event_t *ev;
    size_t n, cap;
    uint64_t dropped;
} track_t;

struct pc_timeline {
    int pid;
    int64_t origin;
    int ntracks;
    track_t tracks[PC_TIMELINE_MAX_TRACKS];
};

int pc_timeline_create(int pid, int64_t origin_ns, pc_timeline_t **out)
{
    pc_timeline_t *tl = calloc(1, sizeof(*tl));
    if (!tl)
        return PC_ENOMEM;
    tl->pid = pid;
    tl->origin = origin_ns;
    *out = tl;
    return PC_OK;
}

void pc_timeline_destroy(pc_timeline_t *tl)
{
    if (!tl)
        return;
    for (int i = 0; i < tl->ntracks; i++)
        free(tl->tracks[i].ev);
    free(tl);
}

int pc_timeline_track(pc_timeline_t *tl, const char *name)
{
    if (tl->ntracks == PC_TIMELINE_MAX_TRACKS)
        return PC_EFULL;
    track_t *t = &tl->tracks[tl->ntracks];
    snprintf(t->name, sizeof(t->name), "%s", name);
    return tl->ntracks++;
}

void pc_timeline_event(pc_timeline_t *tl, int track, const char *name, int64_t t0_ns, int64_t t1_ns)
{
    if (!tl || track < 0 || track >= tl->ntracks)
        return;
    track_t *t = &tl->tracks[track];
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        if (cap > PC_TIMELINE_MAX_EVENTS)
            cap = PC_TIMELINE_MAX_EVENTS;
        event_t *ev = cap > t->cap ? realloc(t->ev, sizeof(event_t) * cap) : NULL;
        if (!ev) {
            t->dropped++;
            return;
        }
        t->ev = ev;
        t->cap = cap;
    }
    event_t *e = &t->ev[t->n++];
    e->t0 = t0_ns;
    e->t1 = t1_ns;
    snprintf(e->name, sizeof(e->name), "%s", name);
}

uint64_t pc_timeline_dropped(const pc_timeline_t *tl)
{
    uint64_t d = 0;
    for (int i = 0; i < tl->ntracks; i++)
        d += tl->tracks[i].dropped;
    return d;
}

char *pc_timeline_json(const pc_timeline_t *tl, size_t *len)
{
    size_t cap = 256, n = 0;
    for (int i = 0; i < tl->ntracks; i++)
        cap += 160 + tl->tracks[i].n * (PC_TIMELINE_NAME_LEN + 96);
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    const char *sep = "";
    for (int i = 0; i < tl->ntracks; i++) {
        const track_t *t = &tl->tracks[i];
        n += (size_t)snprintf(
            buf + n, cap - n,
            "%s{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
            "\"args\": {\"name\": \"%s\"}}",
            sep, tl->pid, i, t->name);
        sep = ",\n";
        for (size_t j = 0; j < t->n; j++) {
            const event_t *e = &t->ev[j];
            /* Names come from our own code (layer and chunk names): no quoting needed, but
             * keep the JSON valid whatever they hold. */
            char safe[PC_TIMELINE_NAME_LEN];
            size_t k = 0;
            for (; e->name[k] && k < sizeof(safe) - 1; k++)
                safe[k] =
                    (e->name[k] == '"' || e->name[k] == '\\' || (unsigned char)e->name[k] < 32)
                        ? '_'
                        : e->name[k];
            safe[k] = '\0';
            n += (size_t)snprintf(buf + n, cap - n,
                                  ",\n{\"ph\": \"X\", \"name\": \"%s\", \"pid\": %d, \"tid\": %d, "
                                  "\"ts\": %.3f, \"dur\": %.3f}",
                                  safe, tl->pid, i, (double)(e->t0 - tl->origin) * 1e-3,
                                  (double)(e->t1 - e->t0) * 1e-3);
        }
    }
    *len = n;
    return buf;
}
