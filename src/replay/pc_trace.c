/* pc_trace: load and check a JSON trace of a GPU's per-layer compute times (pc_trace.h).
 *
 * jansson parses (strict: duplicate keys refused, UTF-8 checked, no NUL in strings, nothing
 * after the top-level value); this file walks the tree once, checking every rule of
 * doc/replay.md's "Validation rules" as it copies the values into a trace of its own, so
 * that no jansson object outlives the call and every accessor is a plain read. A check
 * that fails writes one line that names the field by its path ("layers[3] (conv1).params[0][1]")
 * and the reason, and the walk stops there: the first problem in file order is the one
 * told. */
#include "pipecompress/pc_trace.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "pipecompress/pc_error.h"

/* The longest time a layer, or the optimizer, may hold: an hour, in ms. A GPU layer takes
 * microseconds to tens of milliseconds; the bound keeps every sum of a trace's times
 * (at most PC_TRACE_MAX_LAYERS x 2 of them) far from overflowing when the replay turns it
 * into int64 nanoseconds (7.2e17 ns at most against 9.2e18). */
#define MAX_MS 3600000.0

typedef struct param {
    int ndim;
    size_t dims[PC_TRACE_MAX_DIMS];
    size_t numel;
} param_t;

typedef struct layer {
    char *name;
    double forward_ms, backward_ms;
    int nparams;
    param_t *params; /* nparams of them; NULL when 0 */
} layer_t;

struct pc_trace {
    char *model, *device, *precision, *source;
    int batch;
    double optimizer_ms; /* -1: absent */
    int nlayers;
    layer_t *layers;
    size_t total_params;
    double compute_ms;
};

/* What a check needs: the message buffer and the path of the field being checked. */
typedef struct walk {
    char *err;
    size_t errlen;
    char where[160]; /* "layers[3] (conv1)", or "" at the top level */
} walk_t;

/* s made printable for a message, in out (at most 48 bytes of it, '?' for each byte that
 * is not printable ASCII): a key or a name from the file must not break the one line. */
static const char *shown(const char *s, char *out, size_t len)
{
    size_t i = 0;
    for (; s[i] && i + 4 < len && i < 48; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (s[i] && i + 4 <= len) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
    return out;
}

/* One failure: "WHERE.FIELD: why" (or "FIELD: why" at the top level) into the walk's buffer;
 * returns PC_EFORMAT. */
__attribute__((format(printf, 3, 4))) static int fail(walk_t *w, const char *field, const char *fmt,
                                                      ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return pc_error_fmt(PC_EFORMAT, w->err, w->errlen, "%s%s%s: %s", w->where,
                        w->where[0] && field[0] != '[' ? "." : "", field, why);
}

/* The JSON type of v, as a message names it. */
static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

/* Every key of obj is one of `known` (a NULL-terminated list); `what` lists them for the
 * message. Unknown keys are refused so that a typo ("backward_mss") never passes as an
 * absent optional field. */
static int known_keys(walk_t *w, json_t *obj, const char *const *known, const char *what)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        int ok = 0;
        for (const char *const *k = known; *k && !ok; k++)
            ok = strcmp(key, *k) == 0;
        if (!ok) {
            char s[64];
            return fail(w, shown(key, s, sizeof(s)), "unknown key (%s)", what);
        }
    }
    return PC_OK;
}

/* A required string field: present, a string, 1..PC_TRACE_MAX_STRING bytes, no control
 * character. A copy goes to *out (the caller frees it). */
static int get_string(walk_t *w, json_t *obj, const char *field, char **out)
{
    json_t *v = json_object_get(obj, field);
    if (!v)
        return fail(w, field, "missing");
    if (!json_is_string(v))
        return fail(w, field, "%s, not a string", type_name(v));
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (len == 0)
        return fail(w, field, "empty");
    if (len > PC_TRACE_MAX_STRING)
        return fail(w, field, "%zu bytes, more than %d", len, PC_TRACE_MAX_STRING);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return fail(w, field, "control character 0x%02x at byte %zu (one line, printable)",
                        (unsigned char)s[i], i);
    if (!(*out = malloc(len + 1)))
        return pc_error_fmt(PC_ENOMEM, w->err, w->errlen, "out of memory");
    memcpy(*out, s, len + 1);
    return PC_OK;
}

/* A time in milliseconds: a JSON number, finite, 0..MAX_MS. v is present. */
static int get_ms(walk_t *w, const char *field, json_t *v, double *out)
{
    if (!json_is_number(v))
        return fail(w, field, "%s, not a number of milliseconds", type_name(v));
    double ms = json_number_value(v);
    if (!isfinite(ms)) /* jansson refuses 1e400 itself; a check that costs nothing */
        return fail(w, field, "not finite");
    if (ms < 0)
        return fail(w, field, "%g is negative", ms);
    if (ms > MAX_MS)
        return fail(w, field, "%g is more than %.0f (an hour)", ms, MAX_MS);
    *out = ms;
    return PC_OK;
}

/* The "batch" field: an integer 1..INT_MAX. */
static int get_batch(walk_t *w, json_t *root, int *out)
{
    json_t *v = json_object_get(root, "batch");
    if (!v)
        return fail(w, "batch", "missing");
    if (!json_is_integer(v))
        return fail(w, "batch", "%s, not an integer", type_name(v));
    json_int_t b = json_integer_value(v);
    if (b < 1)
        return fail(w, "batch", "%lld is less than 1", (long long)b);
    if (b > INT_MAX)
        return fail(w, "batch", "%lld is more than %d", (long long)b, INT_MAX);
    *out = (int)b;
    return PC_OK;
}

/* Parameter tensor j of the layer being walked: an array of 1..PC_TRACE_MAX_DIMS integers,
 * each >= 1, whose product is at most PC_TRACE_MAX_NUMEL. */
static int get_shape(walk_t *w, int j, json_t *v, param_t *p)
{
    char field[48];
    snprintf(field, sizeof(field), "params[%d]", j);
    if (!json_is_array(v))
        return fail(w, field, "%s, not a shape (an array of sizes such as [64, 3, 7, 7])",
                    type_name(v));
    size_t nd = json_array_size(v);
    if (nd == 0 || nd > PC_TRACE_MAX_DIMS)
        return fail(w, field, "%zu dimensions (a shape has 1 to %d)", nd, PC_TRACE_MAX_DIMS);
    p->ndim = (int)nd;
    p->numel = 1;
    for (size_t k = 0; k < nd; k++) {
        json_t *d = json_array_get(v, k);
        snprintf(field, sizeof(field), "params[%d][%zu]", j, k);
        if (!json_is_integer(d))
            return fail(w, field, "%s, not an integer size", type_name(d));
        json_int_t n = json_integer_value(d);
        if (n < 1)
            return fail(w, field, "%lld is less than 1", (long long)n);
        if ((unsigned long long)n > PC_TRACE_MAX_NUMEL ||
            p->numel * (size_t)n > PC_TRACE_MAX_NUMEL) { /* numel <= 2^31 - 1: no overflow */
            snprintf(field, sizeof(field), "params[%d]", j);
            return fail(w, field, "more than %u elements (a tensor's limit)", PC_TRACE_MAX_NUMEL);
        }
        p->dims[k] = (size_t)n;
        p->numel *= (size_t)n;
    }
    return PC_OK;
}

/* Layer i: an object of exactly name, params, forward_ms and backward_ms, checked into *l
 * (which owns what it holds even on failure: pc_trace_destroy frees it). */
static int get_layer(walk_t *w, int i, json_t *v, layer_t *l)
{
    static const char *const keys[] = {"name", "params", "forward_ms", "backward_ms", NULL};
    if (!json_is_object(v))
        return pc_error_fmt(PC_EFORMAT, w->err, w->errlen,
                            "layers[%d]: %s, not an object with name, params, forward_ms, "
                            "backward_ms",
                            i, type_name(v));
    snprintf(w->where, sizeof(w->where), "layers[%d]", i);
    int rc = get_string(w, v, "name", &l->name);
    if (rc != PC_OK)
        return rc;
    char s[64];
    snprintf(w->where, sizeof(w->where), "layers[%d] (%s)", i, shown(l->name, s, sizeof(s)));
    if ((rc = known_keys(w, v, keys, "a layer has name, params, forward_ms, backward_ms")) != PC_OK)
        return rc;
    json_t *params = json_object_get(v, "params");
    if (!params)
        return fail(w, "params", "missing (a layer without parameters has \"params\": [])");
    if (!json_is_array(params))
        return fail(w, "params", "%s, not an array of shapes", type_name(params));
    size_t np = json_array_size(params);
    if (np > PC_TRACE_MAX_PARAMS)
        return fail(w, "params", "%zu tensors, more than %d", np, PC_TRACE_MAX_PARAMS);
    if (np && !(l->params = calloc(np, sizeof(param_t))))
        return pc_error_fmt(PC_ENOMEM, w->err, w->errlen, "out of memory");
    l->nparams = (int)np;
    for (size_t j = 0; j < np; j++)
        if ((rc = get_shape(w, (int)j, json_array_get(params, j), &l->params[j])) != PC_OK)
            return rc;
    const char *times[] = {"forward_ms", "backward_ms"};
    double *dst[] = {&l->forward_ms, &l->backward_ms};
    for (int k = 0; k < 2; k++) {
        json_t *t = json_object_get(v, times[k]);
        if (!t)
            return fail(w, times[k], "missing");
        if ((rc = get_ms(w, times[k], t, dst[k])) != PC_OK)
            return rc;
    }
    return PC_OK;
}

/* A layer's name and index, sorted by name then index to find repeated names. */
typedef struct named {
    const char *name;
    int index;
} named_t;

static int by_name(const void *a, const void *b)
{
    const named_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Layer names are unique: the first layer (in file order) whose name an earlier one has is
 * refused, naming both. Sorted rather than compared pairwise, so that a trace of many
 * layers (or a fuzzer's) costs n log n. */
static int unique_names(walk_t *w, pc_trace_t *t)
{
    named_t *ix = malloc(sizeof(named_t) * (size_t)t->nlayers);
    if (!ix)
        return pc_error_fmt(PC_ENOMEM, w->err, w->errlen, "out of memory");
    for (int i = 0; i < t->nlayers; i++)
        ix[i] = (named_t){t->layers[i].name, i};
    qsort(ix, (size_t)t->nlayers, sizeof(named_t), by_name);
    int dup = -1, first = -1, group = 0; /* group: where the run of equal names began */
    for (int k = 1; k < t->nlayers; k++) {
        if (strcmp(ix[k].name, ix[k - 1].name) != 0) {
            group = k;
            continue;
        }
        if (dup < 0 || ix[k].index < dup) {
            dup = ix[k].index;
            first = ix[group].index;
        }
    }
    free(ix);
    if (dup < 0)
        return PC_OK;
    char s[64];
    snprintf(w->where, sizeof(w->where), "layers[%d] (%s)", dup,
             shown(t->layers[dup].name, s, sizeof(s)));
    return fail(w, "name", "repeats the name of layers[%d] (layer names are unique)", first);
}

/* The whole tree: the top level's keys and fields, then each layer, then the rules across
 * layers. t is filled as far as the walk got (pc_trace_destroy frees it either way). */
static int walk_root(walk_t *w, json_t *root, pc_trace_t *t)
{
    static const char *const keys[] = {"model",  "device", "batch",        "precision",
                                       "source", "layers", "optimizer_ms", NULL};
    if (!json_is_object(root))
        return pc_error_fmt(PC_EFORMAT, w->err, w->errlen,
                            "the top level is %s, not an object (doc/replay.md)", type_name(root));
    int rc = known_keys(w, root, keys,
                        "a trace has model, device, batch, precision, source, layers, "
                        "optimizer_ms");
    if (rc == PC_OK)
        rc = get_string(w, root, "model", &t->model);
    if (rc == PC_OK)
        rc = get_string(w, root, "device", &t->device);
    if (rc == PC_OK)
        rc = get_batch(w, root, &t->batch);
    if (rc == PC_OK)
        rc = get_string(w, root, "precision", &t->precision);
    if (rc == PC_OK)
        rc = get_string(w, root, "source", &t->source);
    json_t *opt = json_object_get(root, "optimizer_ms");
    if (rc == PC_OK && opt)
        rc = get_ms(w, "optimizer_ms", opt, &t->optimizer_ms);
    if (rc != PC_OK)
        return rc;
    json_t *layers = json_object_get(root, "layers");
    if (!layers)
        return fail(w, "layers", "missing");
    if (!json_is_array(layers))
        return fail(w, "layers", "%s, not an array of layers", type_name(layers));
    size_t nl = json_array_size(layers);
    if (nl == 0)
        return fail(w, "layers", "empty (a trace has at least one layer)");
    if (nl > PC_TRACE_MAX_LAYERS)
        return fail(w, "layers", "%zu layers, more than %d", nl, PC_TRACE_MAX_LAYERS);
    if (!(t->layers = calloc(nl, sizeof(layer_t))))
        return pc_error_fmt(PC_ENOMEM, w->err, w->errlen, "out of memory");
    t->nlayers = (int)nl;
    for (size_t i = 0; i < nl; i++) {
        layer_t *l = &t->layers[i];
        if ((rc = get_layer(w, (int)i, json_array_get(layers, i), l)) != PC_OK)
            return rc;
        for (int j = 0; j < l->nparams; j++)
            t->total_params += l->params[j].numel;
        t->compute_ms += l->forward_ms + l->backward_ms;
    }
    w->where[0] = '\0';
    if ((rc = unique_names(w, t)) != PC_OK)
        return rc;
    if (t->total_params == 0)
        return fail(w, "layers", "no layer has parameters (nothing to train or send)");
    return PC_OK;
}

int pc_trace_parse(const char *buf, size_t len, pc_trace_t **out, char *err, size_t errlen)
{
    if (!buf || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "pc_trace_parse: no buffer or no result");
    if (len > PC_TRACE_MAX_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%zu bytes, more than the %u MiB a trace may have", len,
                            PC_TRACE_MAX_BYTES >> 20);
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        /* jansson quotes the text near the error, which may hold a newline or any byte of
         * the file: '?' for each that is not printable ASCII keeps the message one line. */
        for (char *c = je.text; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
                *c = '?';
        return pc_error_fmt(PC_EFORMAT, err, errlen, "not valid JSON: line %d column %d: %s",
                            je.line, je.column, je.text);
    }
    pc_trace_t *t = calloc(1, sizeof(*t));
    if (!t) {
        json_decref(root);
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    }
    t->optimizer_ms = -1;
    walk_t w = {.err = err, .errlen = errlen};
    int rc = walk_root(&w, root, t);
    json_decref(root);
    if (rc != PC_OK) {
        pc_trace_destroy(t);
        return rc;
    }
    *out = t;
    return PC_OK;
}

int pc_trace_load(const char *path, pc_trace_t **out, char *err, size_t errlen)
{
    if (!path || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "pc_trace_load: no path or no result");
    FILE *f = fopen(path, "rb");
    if (!f)
        return pc_error_fmt(PC_EIO, err, errlen, "%s: %s", path, strerror(errno));
    /* Read at most one byte more than the limit: a bigger file is refused without being
     * read whole (a FIFO or /dev/zero has no size to ask for first). */
    size_t cap = 0, len = 0;
    char *buf = NULL;
    int rc = PC_OK;
    for (;;) {
        if (len == cap) {
            if (cap > PC_TRACE_MAX_BYTES) {
                rc = pc_error_fmt(PC_EFORMAT, err, errlen,
                                  "%s: more than the %u MiB a trace may have", path,
                                  PC_TRACE_MAX_BYTES >> 20);
                break;
            }
            size_t ncap = cap ? 2 * cap : (size_t)1 << 16;
            if (ncap > (size_t)PC_TRACE_MAX_BYTES + 1)
                ncap = (size_t)PC_TRACE_MAX_BYTES + 1;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                rc = pc_error_fmt(PC_ENOMEM, err, errlen, "%s: out of memory", path);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                rc = pc_error_fmt(PC_EIO, err, errlen, "%s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (rc == PC_OK)
        rc = pc_trace_parse(buf, len, out, err, errlen);
    free(buf);
    return rc;
}

void pc_trace_destroy(pc_trace_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nlayers; i++) {
        free(t->layers[i].name);
        free(t->layers[i].params);
    }
    free(t->layers);
    free(t->model);
    free(t->device);
    free(t->precision);
    free(t->source);
    free(t);
}

const char *pc_trace_model(const pc_trace_t *t)
{
    return t->model;
}

const char *pc_trace_device(const pc_trace_t *t)
{
    return t->device;
}

const char *pc_trace_precision(const pc_trace_t *t)
{
    return t->precision;
}

const char *pc_trace_source(const pc_trace_t *t)
{
    return t->source;
}

int pc_trace_batch(const pc_trace_t *t)
{
    return t->batch;
}

double pc_trace_optimizer_ms(const pc_trace_t *t)
{
    return t->optimizer_ms;
}

int pc_trace_nlayers(const pc_trace_t *t)
{
    return t->nlayers;
}

/* Layer i, or NULL out of range. */
static const layer_t *layer_at(const pc_trace_t *t, int i)
{
    return i >= 0 && i < t->nlayers ? &t->layers[i] : NULL;
}

/* Tensor j of layer i, or NULL out of range. */
static const param_t *param_at(const pc_trace_t *t, int i, int j)
{
    const layer_t *l = layer_at(t, i);
    return l && j >= 0 && j < l->nparams ? &l->params[j] : NULL;
}

const char *pc_trace_layer_name(const pc_trace_t *t, int layer)
{
    const layer_t *l = layer_at(t, layer);
    return l ? l->name : NULL;
}

double pc_trace_forward_ms(const pc_trace_t *t, int layer)
{
    const layer_t *l = layer_at(t, layer);
    return l ? l->forward_ms : -1;
}

double pc_trace_backward_ms(const pc_trace_t *t, int layer)
{
    const layer_t *l = layer_at(t, layer);
    return l ? l->backward_ms : -1;
}

int pc_trace_nparams(const pc_trace_t *t, int layer)
{
    const layer_t *l = layer_at(t, layer);
    return l ? l->nparams : 0;
}

size_t pc_trace_param_numel(const pc_trace_t *t, int layer, int j)
{
    const param_t *p = param_at(t, layer, j);
    return p ? p->numel : 0;
}

size_t pc_trace_param_rows(const pc_trace_t *t, int layer, int j)
{
    const param_t *p = param_at(t, layer, j);
    return p && p->ndim >= 2 ? p->dims[0] : 0;
}

int pc_trace_param_shape(const pc_trace_t *t, int layer, int j, const size_t **dims, int *ndim)
{
    const param_t *p = param_at(t, layer, j);
    if (!p || !dims || !ndim)
        return PC_EINVAL;
    *dims = p->dims;
    *ndim = p->ndim;
    return PC_OK;
}

size_t pc_trace_total_params(const pc_trace_t *t)
{
    return t->total_params;
}

double pc_trace_compute_ms(const pc_trace_t *t)
{
    return t->compute_ms;
}
