/* pc_codec: spec strings, codec and per-chunk state objects, and the generic halves of
 * compress and decode (header, sizes, checks every message gets). The codecs themselves
 * are in codec_dense.c (none, fp16, qsgd, terngrad, efsign) and codec_sparse.c (topk, dgc,
 * randomk, threshold). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"

/* ---- the codec table ---------------------------------------------------------------- */

enum {
    K_RATIO = 1 << 0,
    K_SAMPLE = 1 << 1,
    K_MOMENTUM = 1 << 2,
    K_CLIP = 1 << 3,
    K_WARMUP = 1 << 4,
    K_TAU = 1 << 5,
    K_LEVELS = 1 << 6,
    K_EF = 1 << 7,
    K_VALUES = 1 << 8,
    K_INDEX = 1 << 9,
    K_RANK = 1 << 10,
    K_GAIN = 1 << 11,
    K_DENSE = 1 << 12,
};

typedef struct codec_info {
    const char *name;
    const codec_ops_t *ops;
    unsigned keys;   /* options it takes */
    bool ef_default; /* error feedback on by default: the biased codecs */
    unsigned quiet;  /* keys the canonical spec prints only when set (not 0): added to a
                        codec after its spec strings were in use, which stay as they were */
} codec_info_t;

static const codec_info_t codecs[PC_CODEC_COUNT] = {
    [PC_CODEC_NONE] = {"none", &pc_codec_ops_none, 0, false},
    [PC_CODEC_FP16] = {"fp16", &pc_codec_ops_fp16, K_EF, false},
    [PC_CODEC_TOPK] = {"topk", &pc_codec_ops_topk,
                       K_RATIO | K_MOMENTUM | K_WARMUP | K_DENSE | K_EF | K_VALUES | K_INDEX, true,
                       K_WARMUP | K_DENSE},
    /* DGC accumulates by construction: its residual is not optional. */
    [PC_CODEC_DGC] = {"dgc", &pc_codec_ops_dgc,
                      K_RATIO | K_SAMPLE | K_MOMENTUM | K_CLIP | K_WARMUP | K_DENSE | K_VALUES |
                          K_INDEX,
                      true, K_DENSE},
    [PC_CODEC_RANDOMK] = {"randomk", &pc_codec_ops_randomk, K_RATIO | K_MOMENTUM | K_EF | K_VALUES,
                          true},
    [PC_CODEC_THRESHOLD] = {"threshold", &pc_codec_ops_threshold, K_TAU | K_EF | K_VALUES | K_INDEX,
                            true},
    [PC_CODEC_QSGD] = {"qsgd", &pc_codec_ops_qsgd, K_LEVELS | K_EF, false},
    [PC_CODEC_TERNGRAD] = {"terngrad", &pc_codec_ops_terngrad, K_EF, false},
    [PC_CODEC_EFSIGN] = {"efsign", &pc_codec_ops_efsign, K_EF, true},
    [PC_CODEC_POWERSGD] = {"powersgd", &pc_codec_ops_powersgd, K_RANK | K_WARMUP | K_EF | K_GAIN,
                           true},
};

static const struct {
    const char *name;
    unsigned bit;
} key_names[] = {
    {"ratio", K_RATIO},
    {"sample", K_SAMPLE},
    {"momentum", K_MOMENTUM},
    {"clip", K_CLIP},
    {"warmup", K_WARMUP},
    {"dense", K_DENSE},
    {"tau", K_TAU},
    {"levels", K_LEVELS},
    {"ef", K_EF},
    {"values", K_VALUES},
    {"index", K_INDEX},
    {"rank", K_RANK},
    {"min-rank-gain", K_GAIN},
};
#define NKEYS (sizeof(key_names) / sizeof(key_names[0]))

double pc_codec_worker_momentum(const pc_codec_spec_t *s)
{
    if (!s || s->id >= PC_CODEC_COUNT || (int)s->id < 0 || !(codecs[s->id].keys & K_MOMENTUM))
        return 0.0;
    return s->momentum;
}

/* Whether a state of this codec holds the momentum correction's u: always for dgc (its
 * fold is the correction, also with momentum=0), for topk and randomk when momentum > 0
 * (momentum=0 keeps them exactly the plain error-feedback codecs, without the array). */
bool pc_codec__has_momentum(const pc_codec_spec_t *s)
{
    return s->id == PC_CODEC_DGC || pc_codec_worker_momentum(s) > 0;
}

const char *pc_codec_name(int id)
{
    return id >= 0 && id < PC_CODEC_COUNT ? codecs[id].name : "?";
}

static void defaults(pc_codec_spec_t *s, pc_codec_id_t id)
{
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->ratio = 0.01;
    s->sample = 0.01;
    s->momentum = 0.9;
    s->clip = 0.0;
    s->warmup = 0;
    s->tau = 1e-3;
    s->levels = 16;
    s->ef = codecs[id].ef_default;
    s->values = PC_VALUES_FP32;
    s->index = PC_INDEX_U32;
    s->rank = 1;       /* torch's matrix_approximation_rank default */
    s->min_gain = 2.0; /* torch's min_compression_rate default */
}

static void keys_list(unsigned keys, char *buf, size_t len)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NKEYS; i++)
        if (keys & key_names[i].bit) {
            int w = snprintf(buf + pos, len - pos, "%s%s", pos ? ", " : "", key_names[i].name);
            if (w < 0 || (size_t)w >= len - pos)
                return;
            pos += (size_t)w;
        }
}

static bool parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    if (!*v || isspace((unsigned char)*v))
        return false;
    double d = strtod(v, &end);
    if (*end || errno == ERANGE || !isfinite(d))
        return false;
    *out = d;
    return true;
}

static bool parse_int(const char *v, long *out)
{
    char *end;
    errno = 0;
    if (!*v || isspace((unsigned char)*v))
        return false;
    long x = strtol(v, &end, 10);
    if (*end || errno == ERANGE)
        return false;
    *out = x;
    return true;
}

/* Apply one integer key=value (warmup, dense, levels, rank) to s, within its range. */
static int set_int_key(pc_codec_spec_t *s, const char *codec, unsigned bit, const char *key,
                       const char *val, char *err, size_t errlen)
{
    long l, lo = 0, hi = 1000000000;
    int *dst = &s->warmup;
    if (!parse_int(val, &l))
        return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: %s=%s is not an integer", codec, key, val);
    if (bit == K_DENSE) {
        dst = &s->dense;
    } else if (bit == K_LEVELS) {
        lo = 1, hi = PC_CODEC_MAX_LEVELS, dst = &s->levels;
    } else if (bit == K_RANK) {
        lo = 1, hi = PC_LOWRANK_MAX_RANK, dst = &s->rank;
    }
    if (l < lo || l > hi)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: %s=%s is out of range [%ld, %ld]", codec,
                            key, val, lo, hi);
    *dst = (int)l;
    return PC_OK;
}

/* Apply one key=value to s. */
static int set_key(pc_codec_spec_t *s, const char *codec, unsigned bit, const char *key,
                   const char *val, char *err, size_t errlen)
{
    double d;
    switch (bit) {
    case K_RATIO:
    case K_SAMPLE:
    case K_MOMENTUM:
    case K_CLIP:
    case K_TAU:
    case K_GAIN:
        if (!parse_double(val, &d))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: %s=%s is not a finite number", codec,
                                key, val);
        if (bit == K_RATIO && !(d > 0 && d <= 1))
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "%s: ratio=%s is out of range (0, 1] (0 would send nothing)", codec,
                                val);
        if (bit == K_SAMPLE && !(d > 0 && d <= 1))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: sample=%s is out of range (0, 1]",
                                codec, val);
        if (bit == K_MOMENTUM && !(d >= 0 && d < 1))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: momentum=%s is out of range [0, 1)",
                                codec, val);
        if (bit == K_CLIP && !(d >= 0))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: clip=%s must be >= 0 (0 = off)", codec,
                                val);
        if (bit == K_TAU && !(d > 0))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: tau=%s must be > 0", codec, val);
        if (bit == K_GAIN && !(d >= 1 && d <= 1e9))
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "%s: min-rank-gain=%s is out of range [1, 1e9]", codec, val);
        if (bit == K_RATIO)
            s->ratio = d;
        else if (bit == K_SAMPLE)
            s->sample = d;
        else if (bit == K_MOMENTUM)
            s->momentum = d;
        else if (bit == K_CLIP)
            s->clip = d;
        else if (bit == K_GAIN)
            s->min_gain = d;
        else
            s->tau = d;
        return PC_OK;
    case K_WARMUP:
    case K_DENSE:
    case K_LEVELS:
    case K_RANK:
        return set_int_key(s, codec, bit, key, val, err, errlen);
    case K_EF:
        if (strcmp(val, "on") == 0)
            s->ef = true;
        else if (strcmp(val, "off") == 0)
            s->ef = false;
        else
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: ef=%s is not on or off", codec, val);
        return PC_OK;
    case K_VALUES:
        if (strcmp(val, "fp32") == 0)
            s->values = PC_VALUES_FP32;
        else if (strcmp(val, "fp16") == 0)
            s->values = PC_VALUES_FP16;
        else
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: values=%s is not fp32 or fp16", codec,
                                val);
        return PC_OK;
    case K_INDEX:
        if (strcmp(val, "u32") == 0)
            s->index = PC_INDEX_U32;
        else if (strcmp(val, "delta") == 0)
            s->index = PC_INDEX_DELTA;
        else
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: index=%s is not u32 or delta", codec,
                                val);
        return PC_OK;
    default:
        return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: internal error on option %s", codec, key);
    }
}

/* Longest spec accepted: far above any real one, keeps the parser's copy on the stack. */
#define SPEC_MAX 512

int pc_codec_spec_parse(const char *text, pc_codec_spec_t *out, char *err, size_t errlen)
{
    if (!text || !*text)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "empty compressor spec");
    if (strlen(text) >= SPEC_MAX)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "compressor spec longer than %d characters",
                            SPEC_MAX - 1);
    char buf[SPEC_MAX];
    snprintf(buf, sizeof(buf), "%s", text);
    char *opts = strchr(buf, ':');
    if (opts)
        *opts++ = '\0';
    int id = -1;
    for (int i = 0; i < PC_CODEC_COUNT; i++)
        if (strcmp(buf, codecs[i].name) == 0)
            id = i;
    if (id < 0)
        return pc_error_fmt(
            PC_EUSAGE, err, errlen,
            "unknown compressor '%s' (none, fp16, topk, dgc, randomk, threshold, qsgd, "
            "terngrad, efsign, powersgd)",
            buf);
    const char *name = codecs[id].name;
    pc_codec_spec_t s;
    defaults(&s, (pc_codec_id_t)id);
    unsigned seen = 0;
    if (opts) {
        if (!*opts)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "%s: ':' must be followed by options (key=value,...)", name);
        char *save = NULL;
        for (char *item = strtok_r(opts, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(item, '=');
            if (!eq)
                return pc_error_fmt(PC_EUSAGE, err, errlen,
                                    "%s: option '%s' has no value (key=value)", name, item);
            *eq = '\0';
            const char *val = eq + 1;
            unsigned bit = 0;
            for (size_t k = 0; k < NKEYS; k++)
                if (strcmp(item, key_names[k].name) == 0)
                    bit = key_names[k].bit;
            if (!bit || !(codecs[id].keys & bit)) {
                char takes[128];
                keys_list(codecs[id].keys, takes, sizeof(takes));
                return pc_error_fmt(PC_EUSAGE, err, errlen,
                                    "%s: unknown option '%s' (%s takes: %s)", name, item, name,
                                    takes[0] ? takes : "no options");
            }
            if (seen & bit)
                return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: option '%s' given twice", name,
                                    item);
            seen |= bit;
            if (!*val)
                return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: option '%s' has an empty value",
                                    name, item);
            int rc = set_key(&s, name, bit, item, val, err, errlen);
            if (rc != PC_OK)
                return rc;
        }
        /* strtok_r skips empty items ("ratio=0.1,,ef=on"): reject them explicitly. */
        if (strstr(text, ",,") || text[strlen(text) - 1] == ',' || strstr(text, ":,"))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "%s: empty option in '%s'", name, text);
    }
    /* The momentum correction accumulates into the residual: without error feedback
     * (topk, randomk ef=off) there is none, and the default momentum becomes 0. */
    if ((codecs[id].keys & K_MOMENTUM) && (codecs[id].keys & K_EF) && !s.ef) {
        if ((seen & K_MOMENTUM) && s.momentum > 0)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "%s: momentum=%g needs ef=on (the momentum correction accumulates "
                                "into the residual); drop one of the two",
                                name, s.momentum);
        s.momentum = 0;
    }
    s.momentum_given = (seen & K_MOMENTUM) != 0;
    s.warmup_given = (seen & K_WARMUP) != 0;
    s.dense_given = (seen & K_DENSE) != 0;
    *out = s;
    return PC_OK;
}

void pc_codec_spec_format(const pc_codec_spec_t *s, char *buf, size_t len)
{
    if (s->id >= PC_CODEC_COUNT) {
        snprintf(buf, len, "?");
        return;
    }
    unsigned keys = codecs[s->id].keys;
    if ((codecs[s->id].quiet & K_WARMUP) && s->warmup == 0)
        keys &= ~(unsigned)K_WARMUP;
    if ((codecs[s->id].quiet & K_DENSE) && s->dense == 0)
        keys &= ~(unsigned)K_DENSE;
    size_t pos = 0;
    int w = snprintf(buf, len, "%s", codecs[s->id].name);
    char sep = ':';
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (w >= 0 && (size_t)w < len - pos) {                                                     \
            pos += (size_t)w;                                                                      \
            w = snprintf(buf + pos, len - pos, __VA_ARGS__);                                       \
            sep = ',';                                                                             \
        }                                                                                          \
    } while (0)
    if (keys & K_RATIO)
        ADD("%cratio=%g", sep, s->ratio);
    if (keys & K_SAMPLE)
        ADD("%csample=%g", sep, s->sample);
    if (keys & K_MOMENTUM)
        ADD("%cmomentum=%g", sep, s->momentum);
    if (keys & K_CLIP)
        ADD("%cclip=%g", sep, s->clip);
    if (keys & K_RANK)
        ADD("%crank=%d", sep, s->rank);
    if (keys & K_DENSE)
        ADD("%cdense=%d", sep, s->dense);
    if (keys & K_WARMUP)
        ADD("%cwarmup=%d", sep, s->warmup);
    if (keys & K_TAU)
        ADD("%ctau=%g", sep, s->tau);
    if (keys & K_LEVELS)
        ADD("%clevels=%d", sep, s->levels);
    if (keys & K_EF)
        ADD("%cef=%s", sep, s->ef ? "on" : "off");
    if (keys & K_VALUES)
        ADD("%cvalues=%s", sep, s->values == PC_VALUES_FP16 ? "fp16" : "fp32");
    if (keys & K_INDEX)
        ADD("%cindex=%s", sep, s->index == PC_INDEX_DELTA ? "delta" : "u32");
    if (keys & K_GAIN)
        ADD("%cmin-rank-gain=%g", sep, s->min_gain);
#undef ADD
}

/* ---- objects ------------------------------------------------------------------------ */

int pc_codec_create(const pc_codec_spec_t *spec, pc_codec_t **out)
{
    if (!spec || !out || spec->id >= PC_CODEC_COUNT || (int)spec->id < 0)
        return PC_EINVAL;
    if (!(spec->ratio >= 0 && spec->ratio <= 1) || !(spec->sample > 0 && spec->sample <= 1) ||
        spec->levels < 1 || spec->levels > PC_CODEC_MAX_LEVELS || !(spec->tau > 0) ||
        !(spec->momentum >= 0 && spec->momentum < 1) || !(spec->clip >= 0) || spec->warmup < 0 ||
        spec->dense < 0)
        return PC_EINVAL;
    if (spec->id == PC_CODEC_POWERSGD &&
        (spec->rank < 1 || spec->rank > PC_LOWRANK_MAX_RANK || !(spec->min_gain >= 1)))
        return PC_EINVAL;
    if (spec->id != PC_CODEC_DGC && !spec->ef && pc_codec_worker_momentum(spec) > 0)
        return PC_EINVAL; /* momentum correction without a residual to accumulate into */
    pc_codec_t *c = calloc(1, sizeof(*c));
    if (!c)
        return PC_ENOMEM;
    c->spec = *spec;
    if (spec->id == PC_CODEC_DGC)
        c->spec.ef = true;
    c->ops = codecs[spec->id].ops;
    if (pc_select_create(&c->sel) != PC_OK) {
        free(c);
        return PC_ENOMEM;
    }
    *out = c;
    return PC_OK;
}

void pc_codec_destroy(pc_codec_t *c)
{
    if (!c)
        return;
    pc_select_destroy(c->sel);
    free(c->idx);
    free(c->tmp);
    free(c->bits);
    free(c);
}

const pc_codec_spec_t *pc_codec_spec(const pc_codec_t *c)
{
    return &c->spec;
}

pc_codec_stats_t pc_codec_stats(const pc_codec_t *c)
{
    return c->stats;
}

pc_codec_stats_t *pc_codec__stats_counters(pc_codec_t *c)
{
    return &c->stats;
}

uint16_t pc_codec__flags(const pc_codec_t *c)
{
    unsigned keys = codecs[c->spec.id].keys;
    uint16_t f = 0;
    if ((keys & K_VALUES) && c->spec.values == PC_VALUES_FP16)
        f |= PC_WIRE_F_FP16;
    if ((keys & K_INDEX) && c->spec.index == PC_INDEX_DELTA)
        f |= PC_WIRE_F_DELTA;
    return f;
}

bool pc_codec__n_ok(const pc_codec_t *c, size_t n)
{
    /* The header counts payload bytes in 32 bits. */
    return n > 0 && n <= PC_CODEC_MAX_N && pc_codec_max_bytes(c, n) <= UINT32_MAX;
}

int pc_codec_state_create(const pc_codec_t *c, uint32_t chunk, size_t n, pc_codec_state_t **out)
{
    if (!c || !out || !pc_codec__n_ok(c, n))
        return PC_EINVAL;
    pc_codec_state_t *st = calloc(1, sizeof(*st));
    if (!st)
        return PC_ENOMEM;
    st->chunk = chunk;
    st->n = n;
    if (c->spec.ef && !(st->residual = calloc(n, sizeof(float))))
        goto err;
    if (pc_codec__has_momentum(&c->spec) && !(st->momentum = calloc(n, sizeof(float))))
        goto err;
    *out = st;
    return PC_OK;
err:
    pc_codec_state_destroy(st);
    return PC_ENOMEM;
}

int pc_codec_state_create_matrix(const pc_codec_t *c, uint32_t chunk, size_t rows, size_t n,
                                 pc_codec_state_t **out)
{
    if (!c || !out || !pc_codec_lowrank_fits(&c->spec, rows, n))
        return PC_EINVAL;
    pc_codec_state_t *st;
    int rc = pc_codec_state_create(c, chunk, n, &st);
    if (rc == PC_OK && (rc = pc_codec__lowrank_state_init(c, st, rows)) != PC_OK) {
        pc_codec_state_destroy(st);
        return rc;
    }
    if (rc == PC_OK)
        *out = st;
    return rc;
}

void pc_codec_state_destroy(pc_codec_state_t *st)
{
    if (!st)
        return;
    free(st->residual);
    free(st->momentum);
    free(st->stage);
    free(st->q);
    free(st->phat);
    free(st->qt);
    free(st);
}

size_t pc_codec_state_n(const pc_codec_state_t *st)
{
    return st->n;
}

float *pc_codec_state_residual(pc_codec_state_t *st)
{
    return st->residual;
}

float *pc_codec_state_momentum(pc_codec_state_t *st)
{
    return st->momentum;
}

uint64_t pc_codec_state_steps(const pc_codec_state_t *st)
{
    return st->steps;
}

int pc_codec__state_folded(const pc_codec_state_t *st)
{
    return st->folded;
}

int pc_codec__state_round(const pc_codec_state_t *st)
{
    return st->round;
}

void pc_codec_state_set_steps(pc_codec_state_t *st, uint64_t steps)
{
    st->steps = steps;
}

/* ---- compress and decode ------------------------------------------------------------- */

int pc_codec_fold(const pc_codec_t *c, pc_codec_state_t *st, const float *grad)
{
    if (!c || !st || !grad)
        return PC_EINVAL;
    int rc = c->ops->fold ? c->ops->fold(c, st, grad) : pc_codec__fold_plain(c, st, grad);
    if (rc == PC_OK || rc == PC_ERANGE)
        st->folded = rc == PC_OK ? PC_CODEC_FOLD_OK : PC_CODEC_FOLD_NONFINITE;
    return rc;
}

size_t pc_codec_max_bytes(const pc_codec_t *c, size_t n)
{
    return PC_WIRE_HEADER_BYTES + c->ops->max_payload(c, n);
}

int pc_codec_compress_folded(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                             size_t cap, size_t *len)
{
    if (!c || !st || st->folded == PC_CODEC_FOLD_NONE)
        return PC_EINVAL; /* nothing folded since the last compress */
    if (st->folded == PC_CODEC_FOLD_NONFINITE)
        return PC_ERANGE; /* what the fold found is still there */
    return pc_codec_compress(c, st, NULL, iteration, out, cap, len);
}

int pc_codec_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad, uint64_t iteration,
                      void *out, size_t cap, size_t *len)
{
    if (!c || !st || !out || !len || cap < pc_codec_max_bytes(c, st->n) ||
        (c->spec.ef && !st->residual))
        return PC_EINVAL;
    pc_wire_header_t h = {
        .magic = PC_WIRE_MAGIC,
        .version = PC_WIRE_VERSION,
        .codec = (uint8_t)c->spec.id,
        .chunk = st->chunk,
        .n = (uint32_t)st->n,
        .iteration = iteration,
        .flags = pc_codec__flags(c),
    };
    uint8_t *msg = out;
    int rc =
        c->ops->compress(c, st, grad, &h, msg + PC_WIRE_HEADER_BYTES, cap - PC_WIRE_HEADER_BYTES);
    if (rc != PC_OK)
        return rc;
    pc_wire_header_write(&h, msg);
    *len = PC_WIRE_HEADER_BYTES + h.payload;
    st->steps++;
    st->folded = PC_CODEC_FOLD_NONE;
    c->stats.messages++;
    c->stats.entries += h.entries;
    c->stats.bytes += *len;
    return PC_OK;
}

int pc_codec__check(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                    const pc_codec_expect_t *want, char *err, size_t errlen)
{
    if (h->codec != (uint8_t)c->spec.id)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "message from codec %s (%u), expected %s",
                            pc_codec_name(h->codec), h->codec, pc_codec_name(c->spec.id));
    if (h->chunk != want->chunk)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "message for chunk %u, expected chunk %u",
                            h->chunk, want->chunk);
    if (h->n != want->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: message has %u elements, expected %u", h->chunk, h->n,
                            want->n);
    if (!want->any_iteration && h->iteration != want->iteration)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: message of iteration %llu, expected %llu", h->chunk,
                            (unsigned long long)h->iteration, (unsigned long long)want->iteration);
    uint16_t flags = pc_codec__flags(c);
    if (c->spec.id == PC_CODEC_POWERSGD) {
        /* The round is the receiver's state: only it says which factor is due. */
        if (want->round != 1 && want->round != 2)
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "chunk %u: a powersgd factor where none is due", h->chunk);
        if (want->round == 2)
            flags |= PC_WIRE_F_ROUND2;
        if (h->flags == flags && h->entries != want->entries)
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "chunk %u: round-%d factor of %u entries, expected %u", h->chunk,
                                want->round, h->entries, want->entries);
    }
    /* An index-carrying codec's sender may send its indices as a bitmap (the smaller). */
    bool indexed = (codecs[c->spec.id].keys & K_INDEX) != 0;
    if (h->flags != flags && !(indexed && h->flags == (flags | PC_WIRE_F_BITMAP)))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: flags 0x%04x, this %s codec sends 0x%04x%s", h->chunk,
                            h->flags, pc_codec_name(c->spec.id), flags,
                            indexed ? " (with 0x0008: its indices as a bitmap)" : "");
    return c->ops->validate(c, h, payload, err, errlen);
}

int pc_codec__apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                    float scale, float *dense, char *err, size_t errlen)
{
    int rc = c->ops->apply(c, h, payload, scale, dense);
    if (rc != PC_OK)
        pc_error_fmt(PC_ENOMEM, err, errlen, "chunk %u: out of memory decoding", h->chunk);
    return rc;
}

int pc_codec__apply_indices(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                            float scale, float *dense, uint32_t *idx, char *err, size_t errlen)
{
    if (!c->ops->apply_indices)
        return pc_error_fmt(PC_EINVAL, err, errlen, "chunk %u: %s messages carry no indices",
                            h->chunk, pc_codec_name(c->spec.id));
    int rc = c->ops->apply_indices(c, h, payload, scale, dense, idx);
    if (rc != PC_OK)
        pc_error_fmt(PC_ENOMEM, err, errlen, "chunk %u: out of memory decoding", h->chunk);
    return rc;
}

int pc_codec_validate(const pc_codec_t *c, const void *msg, size_t len,
                      const pc_codec_expect_t *want, pc_wire_header_t *hdr, char *err,
                      size_t errlen)
{
    pc_wire_header_t h = {0};
    if (!c || !want)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "validate called without codec or expectation");
    int rc = pc_wire_header_read(msg, len, &h, err, errlen);
    if (hdr)
        *hdr = h;
    if (rc != PC_OK)
        return rc;
    return pc_codec__check(c, &h, (const uint8_t *)msg + PC_WIRE_HEADER_BYTES, want, err, errlen);
}

int pc_codec_decode_add(const pc_codec_t *c, const void *msg, size_t len,
                        const pc_codec_expect_t *want, float scale, float *dense,
                        pc_wire_header_t *hdr, char *err, size_t errlen)
{
    pc_wire_header_t h = {0};
    if (!dense)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "decode called without a buffer");
    if (!isfinite(scale))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "non-finite scale %g", (double)scale);
    int rc = pc_codec_validate(c, msg, len, want, &h, err, errlen);
    if (hdr)
        *hdr = h;
    if (rc != PC_OK)
        return rc;
    return pc_codec__apply(c, &h, (const uint8_t *)msg + PC_WIRE_HEADER_BYTES, scale, dense, err,
                           errlen);
}
