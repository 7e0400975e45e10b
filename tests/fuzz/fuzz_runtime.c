/* fuzz_runtime: libFuzzer target for every parser of the runtime's messages (runtime_proto:
 * layout, init, gradient, pull dense and sparse, powersgd's P^ and matrix update, done,
 * checkpoint request, parameter groups, learning rates, the step's placement, the codec's
 * warm-up, clipping's max-norm and norm).
 *
 * Input layout: byte 0 picks the message kind (bits 0-2) and a parameter (bits 3-7: the
 * number of servers, the receiver's codec, ...); the rest is the message:
 *   0 layout   1 init   2 gradient   3 pull (dense, sparse, P^ or a matrix's update, by the
 *   header's codec byte)   4 by the parameter mod 4: done (0), parameter groups (1), learning
 *   rates of 1 + parameter / 4 groups (2, 3)   5 by the parameter mod 8: the codec's
 *   warm-up (4), else mod 4: checkpoint request (0), the step's placement (1), clipping's
 *   max-norm (2) and norm (3)
 *   6 gradient, 7 pull: structured: the rest supplies codec (1 byte; a pull: one of the four
 *     server codecs), flags (2), chunk (1),
 *     n (2), entries (2), iteration (1) and scale (4), then the payload, and the harness
 *     writes a well-formed magic, version and payload length around them, so the fuzzer
 *     spends its time past the header checks; a sparse pull's indices are rewritten to
 *     rise from below n + 2 in steps of 1 to 3, so that they end near n and cross it.
 * Invariants checked (abort on violation):
 *   - a rejected message leaves the receiver's buffers and outputs bit for bit untouched
 *     and says why;
 *   - an accepted one is what its encoder would write (layout, init, dense pull, done,
 *     checkpoint, placement, warm-up and clipping messages re-encode to the same bytes, a max-norm
 *     0 or above, a norm not below 0; a sparse pull wrote
 *     exactly its entries, at strictly increasing indices below n, and left every other
 *     element as it was), writes only finite parameters (a pull: and a server time within
 *     PC_RT_PULL_MAX_SERVER_NS), and a layout names only chunks of 1..PC_CODEC_MAX_N
 *     elements on existing servers;
 *   - every receiver's buffer is allocated with exactly the chunk's n elements, so that
 *     ASan sees a write one past its end (a static buffer of MAX_N hid one: an index check
 *     of `ix > n` for `ix >= n` passed every run);
 *   - accepted parameter groups re-encode to the same bytes, and every group passes
 *     pc_rt__group_check and every chunk names a group below their count; accepted learning
 *     rates re-encode to the same bytes and are finite and >= 0; a rejected message of either
 *     leaves the outputs untouched;
 *   - a P^ or a matrix's update that is accepted re-encodes to the same bytes with finite
 *     values; a rejected one leaves P^, the values' view and the server time untouched;
 *   - a gradient is accepted by pc_rt__grad_read + pc_rt__grad_check exactly when
 *     pc_codec_decode_add accepts it, and pc_rt__grad_apply then adds the same bits.
 * ASan and UBSan catch the rest. Built by `make fuzz`; seeds (one valid message of each
 * kind) in tests/fuzz/seeds/fuzz_runtime. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_wire.h"
#include "runtime/runtime_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Largest chunk the harness decodes into (keeps each run fast). */
#define MAX_N 4096

/* Gradient receivers: every codec, a few encodings. */
static const char *const specs[] = {
    "none",
    "fp16",
    "topk:ratio=0.01",
    "topk:ratio=0.25,index=delta,values=fp16",
    "dgc:ratio=0.01",
    "randomk:ratio=0.05",
    "threshold:tau=0.1,index=delta",
    "qsgd:levels=16",
    "terngrad",
    "efsign",
    "powersgd:rank=2",
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

/* The receivers' buffers: n floats each, exactly (see above); NULL when out of memory. */
static float *before, *buf_a, *buf_b;

static bool alloc_bufs(size_t n)
{
    before = malloc(sizeof(float) * n);
    buf_a = malloc(sizeof(float) * n);
    buf_b = malloc(sizeof(float) * n);
    return before && buf_a && buf_b;
}

static void free_bufs(void)
{
    free(before);
    free(buf_a);
    free(buf_b);
    before = buf_a = buf_b = NULL;
}

static void fill(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)i * 0.5f - 3.0f;
}

/* A rejection must say why; err was cleared before the call. */
static void check_reason(int rc, const char *err)
{
    if (rc != PC_EFORMAT || !err[0])
        abort();
}

static void fuzz_layout(const uint8_t *msg, size_t len, int nservers)
{
    rt_layout_t l = {.nchunks = 12345}, untouched = l;
    char err[256] = "";
    int rc = pc_rt__layout_parse(msg, len, nservers, &l, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (memcmp(&l, &untouched, sizeof(l)) != 0)
            abort();
        return;
    }
    if (len != pc_rt__layout_bytes(l.nchunks))
        abort();
    pc_plan_chunk_t *chunks = malloc(sizeof(pc_plan_chunk_t) * (l.nchunks ? l.nchunks : 1));
    uint8_t *again = malloc(len);
    if (!chunks || !again)
        abort();
    for (uint32_t c = 0; c < l.nchunks; c++) {
        uint32_t n, rows;
        int server;
        pc_rt__layout_chunk(&l, c, &n, &server, &rows);
        if (n == 0 || n > PC_CODEC_MAX_N || server < 0 || server >= nservers || (rows && n % rows))
            abort();
        chunks[c] = (pc_plan_chunk_t){.id = c, .n = n, .server = server, .rows = rows};
    }
    pc_plan_t plan = {.nchunks = (int)l.nchunks, .nservers = nservers, .chunks = chunks};
    pc_rt__layout_encode(again, &plan, l.resume);
    if (memcmp(again, msg, len) != 0)
        abort();
    free(chunks);
    free(again);
}

static void fuzz_init(const uint8_t *msg, size_t len, unsigned param)
{
    /* Mostly the length the message has (so the values get checked), sometimes not. */
    size_t n = len / 4 + (param & 1);
    if (n == 0 || n > MAX_N || !alloc_bufs(n))
        return;
    fill(buf_a, n);
    memcpy(before, buf_a, sizeof(float) * n);
    char err[256] = "";
    int rc = pc_rt__init_apply(msg, len, 3, buf_a, n, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (memcmp(buf_a, before, sizeof(float) * n) != 0)
            abort();
        return;
    }
    uint8_t *again = malloc(len);
    if (!again)
        abort();
    for (size_t i = 0; i < n; i++)
        if (!isfinite(buf_a[i]))
            abort();
    pc_rt__init_encode(again, buf_a, n);
    if (len != pc_rt__init_bytes(n) || memcmp(again, msg, len) != 0)
        abort();
    free(again);
}

static void fuzz_init_bufs(const uint8_t *msg, size_t len, unsigned param)
{
    fuzz_init(msg, len, param);
    free_bufs();
}

static void fuzz_grad(const uint8_t *msg, size_t len, unsigned param)
{
    pc_codec_spec_t spec;
    char err[256] = "", err2[256] = "";
    if (pc_codec_spec_parse(specs[param % NSPECS], &spec, err, sizeof(err)) != PC_OK)
        abort();
    spec.seed = 7;
    pc_codec_t *c;
    if (pc_codec_create(&spec, &c) != PC_OK)
        return;
    /* The receiver expects what the header claims (so the deeper checks run), bounded. */
    uint32_t n = len >= PC_WIRE_HEADER_BYTES ? pc_wire_get_u32(msg + 12) : 1;
    uint32_t chunk = len >= PC_WIRE_HEADER_BYTES ? pc_wire_get_u32(msg + 8) : 0;
    if (n == 0 || n > MAX_N)
        n = 1 + n % MAX_N;
    pc_codec_expect_t want = {.chunk = chunk, .n = n, .any_iteration = true};
    if (spec.id == PC_CODEC_POWERSGD && len >= PC_WIRE_HEADER_BYTES) {
        /* The round the header's flag names, except for odd chunks (the other round: a
         * factor out of turn); entries as the header says (the sum's length). */
        bool r2 = (pc_wire_get_u16(msg + 6) & PC_WIRE_F_ROUND2) != 0;
        want.round = (r2 ^ (chunk & 1)) ? 2 : 1;
        want.entries = pc_wire_get_u32(msg + 24);
        if (want.entries == 0 || want.entries > n)
            want.entries = 1 + want.entries % n;
    }
    if (!alloc_bufs(n)) {
        free_bufs();
        pc_codec_destroy(c);
        return;
    }
    fill(buf_a, n);
    fill(buf_b, n);
    memcpy(before, buf_a, sizeof(float) * n);
    rt_grad_t g;
    int rc = pc_rt__grad_read(msg, len, &g, err, sizeof(err));
    if (rc == PC_OK)
        rc = pc_rt__grad_check(c, &g, &want, err, sizeof(err));
    if (rc == PC_OK)
        rc = pc_rt__grad_apply(c, &g, 0.5f, buf_a, err, sizeof(err));
    int rc2 = pc_codec_decode_add(c, msg, len, &want, 0.5f, buf_b, NULL, err2, sizeof(err2));
    if (rc != rc2)
        abort(); /* the split path and the codec disagree */
    if (rc != PC_OK) {
        if (rc != PC_ENOMEM)
            check_reason(rc, err);
        if (strcmp(err, err2) != 0 || memcmp(buf_a, before, sizeof(float) * n) != 0)
            abort();
    } else {
        if (memcmp(buf_a, buf_b, sizeof(float) * n) != 0)
            abort();
        for (uint32_t i = 0; i < n; i++)
            if (!isfinite(buf_a[i]))
                abort();
    }
    free_bufs();
    pc_codec_destroy(c);
}

static void check_pull(const uint8_t *msg, size_t len, uint32_t chunk, uint64_t it, size_t n)
{
    fill(buf_a, n);
    memcpy(before, buf_a, sizeof(float) * n);
    char err[256] = "";
    uint64_t sns = UINT64_MAX; /* above any valid server time: untouched on rejection */
    int rc = pc_rt__pull_apply(msg, len, chunk, it, buf_a, n, &sns, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (memcmp(buf_a, before, sizeof(float) * n) != 0 || sns != UINT64_MAX)
            abort();
        return;
    }
    if (sns > PC_RT_PULL_MAX_SERVER_NS)
        abort();
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite(buf_a[i]))
            abort();
    if (msg[5] == PC_RT_PULL_DENSE) {
        uint8_t *again = malloc(pc_rt__pull_max_bytes(n));
        if (!again)
            abort();
        size_t l2 = pc_rt__pull_encode(again, chunk, it, buf_a, n, NULL, 0, PC_PULL_DENSE, sns);
        if (l2 != len || memcmp(again, msg, len) != 0)
            abort();
        free(again);
        return;
    }
    /* Sparse: exactly the entries, at increasing indices below n; the rest as before. */
    uint32_t k = pc_wire_get_u32(msg + 24);
    const uint8_t *ix = msg + PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES, *val = ix + 4 * k;
    if (len != PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 8 * (size_t)k)
        abort();
    size_t next = 0; /* elements below this index were compared */
    for (uint32_t j = 0; j < k; j++) {
        uint32_t i = pc_wire_get_u32(ix + 4 * j), u;
        if (i >= n || i < next)
            abort();
        if (memcmp(buf_a + next, before + next, sizeof(float) * (i - next)) != 0)
            abort();
        memcpy(&u, &buf_a[i], sizeof(u));
        if (u != pc_wire_get_u32(val + 4 * j))
            abort();
        next = (size_t)i + 1;
    }
    if (memcmp(buf_a + next, before + next, sizeof(float) * (n - next)) != 0)
        abort();
}

/* powersgd's P^: entries as the header says (bounded); accepted means re-encoded alike. */
static void check_phat(const uint8_t *msg, size_t len, uint32_t chunk, uint32_t n, uint64_t it)
{
    size_t e = pc_wire_get_u32(msg + 24);
    if (e == 0 || e > MAX_N)
        e = 1 + e % MAX_N;
    if (!alloc_bufs(e))
        return;
    fill(buf_a, e);
    memcpy(before, buf_a, sizeof(float) * e);
    char err[256] = "";
    int rc = pc_rt__phat_apply(msg, len, chunk, n, it, buf_a, e, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (memcmp(buf_a, before, sizeof(float) * e) != 0)
            abort();
        return;
    }
    uint8_t *again = malloc(pc_rt__phat_bytes(e));
    if (!again)
        abort();
    if (pc_rt__phat_encode(again, chunk, n, it, buf_a, e) != len || memcmp(again, msg, len) != 0)
        abort();
    free(again);
}

/* A matrix's update: the values' count and the flags as the header says (the worker knows
 * them: its rank, whether it is in the warm-up, whether the run has parameter groups),
 * except for odd chunks (the other dense flag: an update out of turn). Accepted means
 * re-encoded alike, every value finite, the rate finite and >= 0 where sent, a clipping
 * coefficient only on a round-2 update, in (0, 1). */
static void check_lowrank(const uint8_t *msg, size_t len, uint32_t chunk, uint32_t n, uint64_t it)
{
    size_t nv = pc_wire_get_u32(msg + 24);
    if (nv > MAX_N)
        nv = nv % MAX_N;
    uint16_t flags = pc_wire_get_u16(msg + 6);
    bool dense = ((flags & PC_RT_LOWRANK_F_DENSE) != 0) ^ (chunk & 1);
    bool with_lr = (flags & PC_RT_LOWRANK_F_LR) != 0;
    char err[256] = "";
    uint64_t sns = UINT64_MAX;
    const uint8_t *v = NULL;
    rt_lrstep_t how = {.lr = -2.0, .coef = -2.0f};
    int rc = pc_rt__pull_lowrank_read(msg, len, chunk, n, it, dense, with_lr, nv, &v, &sns, &how,
                                      err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (v != NULL || sns != UINT64_MAX || how.lr != -2.0 || how.coef != -2.0f)
            abort();
        return;
    }
    size_t extra = with_lr ? PC_RT_LOWRANK_LR_BYTES : 0;
    if (sns > PC_RT_PULL_MAX_SERVER_NS ||
        v != msg + PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + extra ||
        len != pc_rt__pull_lowrank_bytes(nv, with_lr) || (with_lr && !(how.lr >= 0)) ||
        (!with_lr && how.lr != -1.0) || !(how.coef == 1.0f || (how.coef > 0 && how.coef < 1)) ||
        (dense && how.coef != 1.0f))
        abort();
    float *vals = malloc(sizeof(float) * (nv ? nv : 1));
    uint8_t *again = malloc(len);
    if (!vals || !again)
        abort();
    pc_wire_get_f32s(vals, v, nv);
    for (size_t i = 0; i < nv; i++)
        if (!isfinite(vals[i]))
            abort();
    if (pc_rt__pull_lowrank_encode(again, chunk, n, it, dense, vals, nv, sns, &how) != len ||
        memcmp(again, msg, len) != 0)
        abort();
    free(vals);
    free(again);
}

static void fuzz_pull(const uint8_t *msg, size_t len)
{
    /* Expect what the header claims, as a worker that posted the right receive would. */
    uint32_t n = len >= PC_WIRE_HEADER_BYTES ? pc_wire_get_u32(msg + 12) : 1;
    uint32_t chunk = len >= PC_WIRE_HEADER_BYTES ? pc_wire_get_u32(msg + 8) : 0;
    uint64_t it = len >= PC_WIRE_HEADER_BYTES ? pc_wire_get_u64(msg + 16) : 0;
    if (n == 0 || n > MAX_N)
        n = 1 + n % MAX_N;
    uint8_t codec = len >= PC_WIRE_HEADER_BYTES ? msg[5] : 0;
    if (codec == PC_RT_PULL_PHAT)
        check_phat(msg, len, chunk, n, it);
    else if (codec == PC_RT_PULL_LOWRANK)
        check_lowrank(msg, len, chunk, n, it);
    else if (alloc_bufs(n))
        check_pull(msg, len, chunk, it, n);
    free_bufs();
}

static void fuzz_done(const uint8_t *msg, size_t len)
{
    int sig = -7;
    char err[256] = "";
    int rc = pc_rt__done_parse(msg, len, &sig, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (sig != -7)
            abort();
        return;
    }
    uint8_t again[PC_RT_DONE_BYTES];
    pc_rt__done_encode(again, sig);
    if (sig < 0 || sig > PC_RT_MAX_SIGNAL || len != PC_RT_DONE_BYTES || memcmp(again, msg, len))
        abort();
}

static void fuzz_groups(const uint8_t *msg, size_t len)
{
    rt_groups_t g = {.ngroups = 12345}, untouched = g;
    char err[256] = "";
    int rc = pc_rt__groups_parse(msg, len, &g, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (memcmp(&g, &untouched, sizeof(g)) != 0)
            abort();
        return;
    }
    if (g.ngroups < 1 || g.ngroups > PC_RT_MAX_GROUPS ||
        len != pc_rt__groups_bytes(g.ngroups, g.nchunks))
        abort();
    pc_optim_cfg_t *cfg = malloc(sizeof(*cfg) * g.ngroups);
    uint32_t *cg = malloc(sizeof(uint32_t) * (g.nchunks ? g.nchunks : 1));
    uint8_t *again = malloc(len);
    if (!cfg || !cg || !again)
        abort();
    for (uint32_t i = 0; i < g.ngroups; i++) {
        pc_rt__groups_get(&g, i, &cfg[i]);
        if (pc_rt__group_check(&cfg[i], NULL, 0) != PC_OK || (int)cfg[i].kind != g.kind)
            abort();
    }
    for (uint32_t c = 0; c < g.nchunks; c++)
        if ((cg[c] = pc_rt__groups_chunk(&g, c)) >= g.ngroups)
            abort();
    pc_rt__groups_encode(again, g.kind, cfg, g.ngroups, cg, g.nchunks);
    if (memcmp(again, msg, len) != 0)
        abort();
    free(cfg);
    free(cg);
    free(again);
}

static void fuzz_lr(const uint8_t *msg, size_t len, uint32_t ngroups)
{
    double lrs[8], before[8];
    uint64_t it = 777;
    for (int i = 0; i < 8; i++)
        lrs[i] = before[i] = -1.5;
    char err[256] = "";
    int rc = pc_rt__lr_parse(msg, len, ngroups, &it, lrs, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (it != 777 || memcmp(lrs, before, sizeof(lrs)) != 0)
            abort();
        return;
    }
    for (uint32_t i = 0; i < ngroups; i++)
        if (!(lrs[i] >= 0 && isfinite(lrs[i])))
            abort();
    uint8_t again[PC_RT_LR_HEAD_BYTES + 8 * 8];
    pc_rt__lr_encode(again, it, lrs, ngroups);
    if (len != pc_rt__lr_bytes(ngroups) || memcmp(again, msg, len) != 0 ||
        memcmp(lrs + ngroups, before + ngroups, sizeof(double) * (8 - ngroups)) != 0)
        abort();
}

static void fuzz_ckpt(const uint8_t *msg, size_t len)
{
    uint64_t it = 77;
    char err[256] = "";
    int rc = pc_rt__ckpt_req_parse(msg, len, &it, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (it != 77)
            abort();
        return;
    }
    uint8_t again[PC_RT_CKPT_BYTES];
    pc_rt__ckpt_req_encode(again, it);
    if (len != PC_RT_CKPT_BYTES || memcmp(again, msg, len) != 0)
        abort();
}

static void fuzz_warmup(const uint8_t *msg, size_t len)
{
    int warmup = -3;
    char err[256] = "";
    int rc = pc_rt__warmup_parse(msg, len, &warmup, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (warmup != -3)
            abort();
        return;
    }
    uint8_t again[PC_RT_WARMUP_BYTES];
    pc_rt__warmup_encode(again, warmup);
    if (warmup != PC_CONFIG_ADAM_WARMUP || len != PC_RT_WARMUP_BYTES ||
        memcmp(again, msg, len) != 0)
        abort();
}

static void fuzz_update(const uint8_t *msg, size_t len)
{
    int update = -3;
    char err[256] = "";
    int rc = pc_rt__update_parse(msg, len, &update, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (update != -3)
            abort();
        return;
    }
    uint8_t again[PC_RT_UPDATE_BYTES];
    pc_rt__update_encode(again, update);
    if ((update != PC_UPDATE_SERVERS && update != PC_UPDATE_WORKERS) || len != PC_RT_UPDATE_BYTES ||
        memcmp(again, msg, len) != 0)
        abort();
}

/* A clipping message (norm: the servers' answer, TAG_NORM; else TAG_CLIP). */
static void fuzz_clip(const uint8_t *msg, size_t len, bool norm)
{
    uint64_t it = 77;
    double v = -2.5;
    char err[256] = "";
    int rc = norm ? pc_rt__norm_parse(msg, len, &it, &v, err, sizeof(err))
                  : pc_rt__clip_parse(msg, len, &it, &v, err, sizeof(err));
    if (rc != PC_OK) {
        check_reason(rc, err);
        if (it != 77 || v != -2.5)
            abort();
        return;
    }
    uint8_t again[PC_RT_CLIP_BYTES];
    pc_rt__clip_encode(again, it, v);
    if (len != PC_RT_CLIP_BYTES || memcmp(again, msg, len) != 0 || v < 0 || (!norm && isnan(v)))
        abort();
}

/* Structured: a well-formed pc_wire frame around fuzzed fields; NULL when too short. */
static uint8_t *frame(const uint8_t *rest, size_t len, bool pull, size_t *out_len)
{
    if (len < 13)
        return NULL;
    size_t payload = len - 13;
    uint8_t *msg = malloc(PC_WIRE_HEADER_BYTES + payload);
    if (!msg)
        return NULL;
    pc_wire_header_t h = {.magic = PC_WIRE_MAGIC, .version = PC_WIRE_VERSION};
    h.codec = pull ? (uint8_t)(PC_RT_PULL_DENSE + (rest[0] & 3)) : rest[0] % PC_CODEC_COUNT;
    h.flags = pc_wire_get_u16(rest + 1) & PC_WIRE_F_KNOWN;
    h.chunk = rest[3];
    h.n = 1 + pc_wire_get_u16(rest + 4) % MAX_N;
    h.entries = pc_wire_get_u16(rest + 6) % (h.n + 1);
    h.iteration = rest[8];
    uint32_t sb = pc_wire_get_u32(rest + 9);
    memcpy(&h.scale, &sb, sizeof(h.scale));
    h.payload = (uint32_t)payload;
    pc_wire_header_write(&h, msg);
    memcpy(msg + PC_WIRE_HEADER_BYTES, rest + 13, payload);
    /* A sparse pull's indices, where the payload has room for them: the first below n + 2,
     * each next one 1 to 3 above the one before, so that runs end near n and cross it as
     * often as not (the bound check's both sides: n - 1 valid, n and n + 1 not). */
    uint8_t *ix = msg + PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES;
    if (pull && h.codec == PC_RT_PULL_SPARSE &&
        payload >= PC_RT_PULL_TIME_BYTES + 4 * (size_t)h.entries) {
        uint32_t prev = 0;
        for (uint32_t j = 0; j < h.entries; j++) {
            uint32_t w = pc_wire_get_u32(ix + 4 * j);
            prev = j == 0 ? w % (h.n + 2) : prev + 1 + w % 3;
            pc_wire_put_u32(ix + 4 * j, prev);
        }
    }
    *out_len = PC_WIRE_HEADER_BYTES + payload;
    return msg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned kind = data[0] & 7, param = data[0] >> 3;
    size_t len = size - 1;
    /* A copy of exactly len bytes, so ASan sees any read past the end. */
    uint8_t *msg = malloc(len ? len : 1);
    if (!msg)
        return 0;
    memcpy(msg, data + 1, len);
    switch (kind) {
    case 0:
        fuzz_layout(msg, len, (int)(param % 5)); /* 0 servers: every chunk refused */
        break;
    case 1:
        fuzz_init_bufs(msg, len, param);
        break;
    case 2:
        fuzz_grad(msg, len, param);
        break;
    case 3:
        fuzz_pull(msg, len);
        break;
    case 4:
        if (param % 4 == 0)
            fuzz_done(msg, len);
        else if (param % 4 == 1)
            fuzz_groups(msg, len);
        else
            fuzz_lr(msg, len, 1 + param / 4 % 8);
        break;
    case 5:
        if (param % 8 == 4)
            fuzz_warmup(msg, len);
        else if (param % 4 == 0)
            fuzz_ckpt(msg, len);
        else if (param % 4 == 1)
            fuzz_update(msg, len);
        else
            fuzz_clip(msg, len, param % 4 == 3);
        break;
    default: {
        size_t flen = 0;
        uint8_t *f = frame(msg, len, kind == 7, &flen);
        if (f) {
            if (kind == 7)
                fuzz_pull(f, flen);
            else
                fuzz_grad(f, flen, param);
            free(f);
        }
    }
    }
    free(msg);
    return 0;
}
