/* pc_model: layer lists, slabs and the forward/backward drivers (see pc_model.h). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_file.h"
#include "pipecompress/pc_layers.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_wire.h"

enum ltype { L_LINEAR, L_CONV, L_POOL, L_RELU, L_DROPOUT };

typedef struct layer {
    enum ltype type;
    char name[16];
    int c, h, w;    /* input shape (linear: c = features, h = w = 1) */
    int oc, oh, ow; /* output shape */
    int k;          /* conv kernel */
    float p;        /* dropout */
    int wt, bt;     /* tensor ids of weight and bias, -1 if none */
    size_t out_off; /* offset of this layer's output in the activation slabs */
    size_t aux_off; /* argmax (pool) or mask (dropout) offset in their slabs */
} layer_t;

#define MAX_LAYERS  16
#define MAX_TENSORS 16

struct pc_model {
    pc_model_kind_t kind;
    int in_c, in_h, in_w;
    int nlayers, ntensors, max_batch, classes;
    layer_t layers[MAX_LAYERS];
    char tname[MAX_TENSORS][24];
    size_t toff[MAX_TENSORS], tsize[MAX_TENSORS];
    size_t nparams, nacts;
    float *params, *grads;
    float *acts, *dacts; /* per sample sizes * max_batch */
    float *probs;
    int32_t *argmax;
    uint8_t *mask;
    float *col, *dcol;
    size_t col_size, argmax_size, mask_size;
    const float *last_x;
};

static int add_tensor(pc_model_t *m, const char *layer, const char *what, size_t n)
{
    int t = m->ntensors++;
    snprintf(m->tname[t], sizeof(m->tname[t]), "%s.%s", layer, what);
    m->toff[t] = m->nparams;
    m->tsize[t] = n;
    m->nparams += n;
    return t;
}

/* Append a layer taking the current shape (*c, *h, *w) and update it. */
static void add(pc_model_t *m, enum ltype type, const char *name, int *c, int *h, int *w, int arg,
                float p)
{
    layer_t *l = &m->layers[m->nlayers++];
    memset(l, 0, sizeof(*l));
    l->type = type;
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->c = *c;
    l->h = *h;
    l->w = *w;
    l->wt = l->bt = -1;
    l->oc = *c;
    l->oh = *h;
    l->ow = *w;
    switch (type) {
    case L_LINEAR:
        l->c = *c * *h * *w; /* flatten */
        l->h = l->w = 1;
        l->oc = arg;
        l->oh = l->ow = 1;
        l->wt = add_tensor(m, name, "weight", (size_t)arg * l->c);
        l->bt = add_tensor(m, name, "bias", (size_t)arg);
        break;
    case L_CONV:
        l->k = 5;
        l->oc = arg;
        l->wt = add_tensor(m, name, "weight", (size_t)arg * l->c * 25);
        l->bt = add_tensor(m, name, "bias", (size_t)arg);
        {
            size_t col = (size_t)l->c * 25 * l->h * l->w;
            m->col_size = col > m->col_size ? col : m->col_size;
        }
        break;
    case L_POOL:
        l->oh = *h / 2;
        l->ow = *w / 2;
        l->aux_off = m->argmax_size;
        m->argmax_size += (size_t)l->oc * l->oh * l->ow;
        break;
    case L_DROPOUT:
        l->p = p;
        l->aux_off = m->mask_size;
        m->mask_size += (size_t)l->c * l->h * l->w;
        break;
    case L_RELU:
        break;
    }
    l->out_off = m->nacts;
    m->nacts += (size_t)l->oc * l->oh * l->ow;
    *c = l->oc;
    *h = l->oh;
    *w = l->ow;
}

int pc_model_create(pc_model_kind_t kind, int max_batch, int channels, int height, int width,
                    int classes, float dropout, pc_model_t **out)
{
    if (max_batch < 1 || channels < 1 || height < 1 || width < 1 || classes < 2 ||
        !(dropout >= 0 && dropout < 1))
        return PC_EINVAL;
    if (kind == PC_MODEL_CNN && (height % 4 || width % 4))
        return PC_EINVAL; /* two 2x2 poolings */
    pc_model_t *m = calloc(1, sizeof(*m));
    if (!m)
        return PC_ENOMEM;
    m->kind = kind;
    m->max_batch = max_batch;
    m->classes = classes;
    m->in_c = channels;
    m->in_h = height;
    m->in_w = width;
    int c = channels, h = height, w = width;
    switch (kind) {
    case PC_MODEL_MLP:
        add(m, L_LINEAR, "fc1", &c, &h, &w, 256, 0);
        add(m, L_RELU, "relu1", &c, &h, &w, 0, 0);
        add(m, L_LINEAR, "fc2", &c, &h, &w, 128, 0);
        add(m, L_RELU, "relu2", &c, &h, &w, 0, 0);
        add(m, L_LINEAR, "fc3", &c, &h, &w, classes, 0);
        break;
    case PC_MODEL_CNN:
        add(m, L_CONV, "conv1", &c, &h, &w, 32, 0);
        add(m, L_RELU, "relu1", &c, &h, &w, 0, 0);
        add(m, L_POOL, "pool1", &c, &h, &w, 0, 0);
        add(m, L_CONV, "conv2", &c, &h, &w, 64, 0);
        add(m, L_RELU, "relu2", &c, &h, &w, 0, 0);
        add(m, L_POOL, "pool2", &c, &h, &w, 0, 0);
        add(m, L_LINEAR, "fc1", &c, &h, &w, 1024, 0);
        add(m, L_RELU, "relu3", &c, &h, &w, 0, 0);
        add(m, L_DROPOUT, "dropout", &c, &h, &w, 0, dropout);
        add(m, L_LINEAR, "fc2", &c, &h, &w, classes, 0);
        break;
    case PC_MODEL_WIDE:
        add(m, L_LINEAR, "fc1", &c, &h, &w, 4096, 0);
        add(m, L_RELU, "relu1", &c, &h, &w, 0, 0);
        add(m, L_LINEAR, "fc2", &c, &h, &w, 4096, 0);
        add(m, L_RELU, "relu2", &c, &h, &w, 0, 0);
        add(m, L_LINEAR, "fc3", &c, &h, &w, 4096, 0);
        add(m, L_RELU, "relu3", &c, &h, &w, 0, 0);
        add(m, L_LINEAR, "fc4", &c, &h, &w, classes, 0);
        break;
    default:
        free(m);
        return PC_EINVAL;
    }
    size_t B = (size_t)max_batch;
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    m->acts = calloc(m->nacts * B, sizeof(float));
    m->dacts = calloc(m->nacts * B, sizeof(float));
    m->probs = calloc((size_t)classes * B, sizeof(float));
    m->argmax = calloc(m->argmax_size * B + 1, sizeof(int32_t));
    m->mask = calloc(m->mask_size * B + 1, 1);
    m->col = calloc(m->col_size + 1, sizeof(float));
    m->dcol = calloc(m->col_size + 1, sizeof(float));
    if (!m->params || !m->grads || !m->acts || !m->dacts || !m->probs || !m->argmax || !m->mask ||
        !m->col || !m->dcol) {
        pc_model_destroy(m);
        return PC_ENOMEM;
    }
    *out = m;
    return PC_OK;
}

void pc_model_destroy(pc_model_t *m)
{
    if (!m)
        return;
    free(m->params);
    free(m->grads);
    free(m->acts);
    free(m->dacts);
    free(m->probs);
    free(m->argmax);
    free(m->mask);
    free(m->col);
    free(m->dcol);
    free(m);
}

void pc_model_init(pc_model_t *m, uint64_t seed)
{
    int last = -1;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].wt >= 0)
            last = i;
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *l = &m->layers[i];
        if (l->wt < 0)
            continue;
        size_t fan_in = m->tsize[l->wt] / (size_t)l->oc;
        double bound = i == last ? sqrt(6.0 / (double)(fan_in + (size_t)l->oc)) /* Xavier */
                                 : sqrt(6.0 / (double)fan_in);                  /* He */
        pc_philox_t g;
        pc_philox_init(&g, seed, 0x1000 + (uint64_t)l->wt, 0);
        float *w = m->params + m->toff[l->wt];
        for (size_t j = 0; j < m->tsize[l->wt]; j++)
            w[j] = (float)((2.0 * pc_philox_uniform(pc_philox_next(&g)) - 1.0) * bound);
        memset(m->params + m->toff[l->bt], 0, sizeof(float) * m->tsize[l->bt]);
    }
}

const char *pc_model_kind_name(pc_model_kind_t kind)
{
    static const char *const names[] = {
#define MODEL_NAME(name, text) text,
        PC_MODEL_TABLE(MODEL_NAME)
#undef MODEL_NAME
    };
    return (size_t)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

size_t pc_model_nparams(const pc_model_t *m)
{
    return m->nparams;
}

float *pc_model_params(pc_model_t *m)
{
    return m->params;
}

int pc_model_ntensors(const pc_model_t *m)
{
    return m->ntensors;
}

const char *pc_model_tensor_name(const pc_model_t *m, int t)
{
    return m->tname[t];
}

size_t pc_model_tensor_size(const pc_model_t *m, int t)
{
    return m->tsize[t];
}

float *pc_model_tensor_param(pc_model_t *m, int t)
{
    return m->params + m->toff[t];
}

float *pc_model_tensor_grad(pc_model_t *m, int t)
{
    return m->grads + m->toff[t];
}

static size_t out_size(const layer_t *l)
{
    return (size_t)l->oc * l->oh * l->ow;
}

static size_t in_size(const layer_t *l)
{
    return (size_t)l->c * l->h * l->w;
}

int pc_model_forward(pc_model_t *m, const float *x, const uint8_t *labels, int B, bool train,
                     uint64_t seed, uint64_t noise, const pc_model_hooks_t *hooks, float *loss,
                     int *correct)
{
    if (B < 1 || B > m->max_batch)
        return PC_EINVAL;
    m->last_x = x;
    const float *in = x;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *l = &m->layers[i];
        float *out = m->acts + l->out_off * (size_t)m->max_batch;
        if (l->wt >= 0 && hooks && hooks->param_wait) {
            int rc = hooks->param_wait(hooks->ud, l->wt);
            if (rc == PC_OK)
                rc = hooks->param_wait(hooks->ud, l->bt);
            if (rc != PC_OK)
                return rc;
        }
        if (hooks && hooks->layer_begin)
            hooks->layer_begin(hooks->ud, l->name, false);
        const float *W = l->wt >= 0 ? m->params + m->toff[l->wt] : NULL;
        const float *b = l->bt >= 0 ? m->params + m->toff[l->bt] : NULL;
        switch (l->type) {
        case L_LINEAR:
            pc_linear_forward(out, in, W, b, B, l->c, l->oc);
            break;
        case L_CONV:
            pc_conv2d_forward(out, m->col, in, W, b, B, l->c, l->h, l->w, l->oc, l->k);
            break;
        case L_POOL:
            pc_maxpool_forward(out, m->argmax + l->aux_off * (size_t)m->max_batch, in, B, l->c,
                               l->h, l->w);
            break;
        case L_RELU:
            pc_relu_forward(out, in, out_size(l) * (size_t)B);
            break;
        case L_DROPOUT:
            pc_dropout_forward(out, m->mask + l->aux_off * (size_t)m->max_batch, in,
                               out_size(l) * (size_t)B, train ? l->p : 0.0f, seed,
                               noise * MAX_LAYERS + (uint64_t)i);
            break;
        }
        if (hooks && hooks->layer_end)
            hooks->layer_end(hooks->ud, l->name, false);
        in = out;
    }
    float lo = pc_softmax_xent_forward(m->probs, correct, in, labels, B, m->classes);
    if (loss)
        *loss = lo;
    return PC_OK;
}

int pc_model_backward(pc_model_t *m, const uint8_t *labels, int B, const pc_model_hooks_t *hooks)
{
    size_t MB = (size_t)m->max_batch;
    layer_t *lastl = &m->layers[m->nlayers - 1];
    pc_softmax_xent_backward(m->dacts + lastl->out_off * MB, m->probs, labels, B, m->classes);
    for (int i = m->nlayers - 1; i >= 0; i--) {
        layer_t *l = &m->layers[i];
        const float *dout = m->dacts + l->out_off * MB;
        const float *out = m->acts + l->out_off * MB;
        const float *in = i ? m->acts + m->layers[i - 1].out_off * MB : m->last_x;
        float *din = i ? m->dacts + m->layers[i - 1].out_off * MB : NULL;
        const float *W = l->wt >= 0 ? m->params + m->toff[l->wt] : NULL;
        float *dW = l->wt >= 0 ? m->grads + m->toff[l->wt] : NULL;
        float *db = l->bt >= 0 ? m->grads + m->toff[l->bt] : NULL;
        if (hooks && hooks->layer_begin)
            hooks->layer_begin(hooks->ud, l->name, true);
        switch (l->type) {
        case L_LINEAR:
            pc_linear_backward(din, dW, db, dout, in, W, B, l->c, l->oc);
            break;
        case L_CONV:
            pc_conv2d_backward(din, dW, db, m->col, m->dcol, dout, in, W, B, l->c, l->h, l->w,
                               l->oc, l->k);
            break;
        case L_POOL:
            if (din)
                pc_maxpool_backward(din, dout, m->argmax + l->aux_off * MB, B, l->c, l->h, l->w);
            break;
        case L_RELU:
            if (din)
                pc_relu_backward(din, dout, out, out_size(l) * (size_t)B);
            break;
        case L_DROPOUT:
            if (din)
                pc_dropout_backward(din, dout, m->mask + l->aux_off * MB, in_size(l) * (size_t)B,
                                    l->p);
            break;
        }
        if (hooks && hooks->layer_end)
            hooks->layer_end(hooks->ud, l->name, true);
        if (l->wt >= 0 && hooks && hooks->grad_ready) {
            int rc = hooks->grad_ready(hooks->ud, l->bt);
            if (rc == PC_OK)
                rc = hooks->grad_ready(hooks->ud, l->wt);
            if (rc != PC_OK)
                return rc;
        }
    }
    return PC_OK;
}

/* ---- profile: per-layer times for pc_cost ------------------------------------------------ */

/* What the profile's hooks record in one pass: the first param_wait and the first
 * grad_ready of each parameterised layer. */
typedef struct profile {
    const int *tensor_layer;
    int64_t fwd_start[MAX_LAYERS];
    int64_t bwd_ready[MAX_LAYERS];
} profile_t;

static int profile_wait(void *ud, int t)
{
    profile_t *p = ud;
    int64_t now = pc_time_ns();
    int l = p->tensor_layer[t];
    if (!p->fwd_start[l])
        p->fwd_start[l] = now;
    return PC_OK;
}

static int profile_ready(void *ud, int t)
{
    profile_t *p = ud;
    int64_t now = pc_time_ns();
    int l = p->tensor_layer[t];
    if (!p->bwd_ready[l])
        p->bwd_ready[l] = now;
    return PC_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n), n >= 1 (sorts v). */
static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int pc_model_profile(pc_model_t *m, const float *x, const uint8_t *labels, int B, int reps,
                     pc_cost_layer_t *layers, int max_layers, int *nlayers, int *tensor_layer)
{
    if (!m || !x || !labels || !layers || !nlayers || !tensor_layer || reps < 1 || B < 1 ||
        B > m->max_batch)
        return PC_EINVAL;
    int L = 0; /* parameterised layers, in forward order */
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].wt >= 0) {
            if (L == max_layers)
                return PC_EINVAL;
            tensor_layer[m->layers[i].wt] = L;
            tensor_layer[m->layers[i].bt] = L;
            L++;
        }
    double *f = malloc(sizeof(double) * (size_t)reps * (size_t)L * 2);
    if (!f)
        return PC_ENOMEM;
    double *b = f + reps * L;
    profile_t p = {.tensor_layer = tensor_layer};
    pc_model_hooks_t hooks = {.ud = &p, .param_wait = profile_wait, .grad_ready = profile_ready};
    int rc = PC_OK;
    for (int r = -1; r < reps && rc == PC_OK; r++) { /* r = -1: untimed */
        memset(p.fwd_start, 0, sizeof(p.fwd_start));
        memset(p.bwd_ready, 0, sizeof(p.bwd_ready));
        float loss;
        int correct;
        int64_t t0 = pc_time_ns();
        rc = pc_model_forward(m, x, labels, B, true, 1, (uint64_t)(r + 1), &hooks, &loss, &correct);
        int64_t t1 = pc_time_ns();
        if (rc == PC_OK)
            rc = pc_model_backward(m, labels, B, &hooks);
        int64_t t2 = pc_time_ns();
        for (int l = 0; r >= 0 && rc == PC_OK && l < L; l++) {
            int64_t start = l ? p.fwd_start[l] : t0, stop = l + 1 < L ? p.fwd_start[l + 1] : t1;
            int64_t from = l + 1 < L ? p.bwd_ready[l + 1] : t1;
            int64_t to = l ? p.bwd_ready[l] : t2; /* after the first layer's: nothing to hide */
            f[l * reps + r] = (double)(stop - start) * 1e-9;
            b[l * reps + r] = (double)(to - from) * 1e-9;
        }
    }
    for (int l = 0; rc == PC_OK && l < L; l++) {
        layers[l].fwd = median_of(f + l * reps, reps);
        layers[l].bwd = median_of(b + l * reps, reps);
    }
    free(f);
    if (rc == PC_OK)
        *nlayers = L;
    return rc;
}

/* ---- model files ---------------------------------------------------------------------- */

#define FILE_MAGIC   "PCMODEL1"
#define FILE_VERSION 1
#define HEADER_BYTES 48

/* CRC-32 of n bytes (zlib's, as in checkpoints). */
static uint32_t crc_bytes(const void *p, size_t n)
{
    return pc_file_crc(0, p, n);
}

static void make_header(const pc_model_t *m, uint8_t *h, uint32_t params_crc)
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, FILE_MAGIC, 8);
    pc_wire_put_u32(h + 8, FILE_VERSION);
    pc_wire_put_u32(h + 12, (uint32_t)m->kind);
    pc_wire_put_u32(h + 16, (uint32_t)m->in_c);
    pc_wire_put_u32(h + 20, (uint32_t)m->in_h);
    pc_wire_put_u32(h + 24, (uint32_t)m->in_w);
    pc_wire_put_u32(h + 28, (uint32_t)m->classes);
    pc_wire_put_u32(h + 32, (uint32_t)m->nparams);
    pc_wire_put_u32(h + 36, (uint32_t)((uint64_t)m->nparams >> 32));
    pc_wire_put_u32(h + 40, params_crc);
    pc_wire_put_u32(h + 44, crc_bytes(h, 44));
}

int pc_model_save(const pc_model_t *m, const char *path, char *err, size_t errlen)
{
    uint8_t h[HEADER_BYTES];
    make_header(m, h, crc_bytes(m->params, m->nparams * sizeof(float)));
    pc_file_writer_t *w;
    int rc = pc_file_writer_open(path, &w, err, errlen);
    if (rc != PC_OK)
        return rc;
    pc_file_writer_write(w, h, HEADER_BYTES);
    pc_file_writer_write(w, m->params, m->nparams * sizeof(float));
    return pc_file_writer_commit(w, err, errlen);
}

static int read_header(const char *path, FILE *f, uint8_t *h, char *err, size_t errlen)
{
    if (fread(h, 1, HEADER_BYTES, f) != HEADER_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: shorter than a model header", path);
    if (memcmp(h, FILE_MAGIC, 8) != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: not a PipeCompress model file (bad magic)", path);
    if (pc_wire_get_u32(h + 44) != crc_bytes(h, 44))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: header checksum mismatch (corrupt file)",
                            path);
    if (pc_wire_get_u32(h + 8) != FILE_VERSION)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: model format version %u, this build reads %d", path,
                            pc_wire_get_u32(h + 8), FILE_VERSION);
    return PC_OK;
}

int pc_model_file_info(const char *path, pc_model_kind_t *kind, int *channels, int *height,
                       int *width, int *classes, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pc_error_fmt(PC_EIO, err, errlen, "%s: cannot open: %s", path, strerror(errno));
    uint8_t h[HEADER_BYTES];
    int rc = read_header(path, f, h, err, errlen);
    fclose(f);
    if (rc != PC_OK)
        return rc;
    uint32_t k = pc_wire_get_u32(h + 12);
    if (k > PC_MODEL_WIDE || pc_wire_get_u32(h + 16) == 0 || pc_wire_get_u32(h + 16) > 4096 ||
        pc_wire_get_u32(h + 20) == 0 || pc_wire_get_u32(h + 20) > 4096 ||
        pc_wire_get_u32(h + 24) == 0 || pc_wire_get_u32(h + 24) > 4096 ||
        pc_wire_get_u32(h + 28) < 2 || pc_wire_get_u32(h + 28) > 65536)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: implausible architecture in the header",
                            path);
    *kind = (pc_model_kind_t)k;
    *channels = (int)pc_wire_get_u32(h + 16);
    *height = (int)pc_wire_get_u32(h + 20);
    *width = (int)pc_wire_get_u32(h + 24);
    *classes = (int)pc_wire_get_u32(h + 28);
    return PC_OK;
}

int pc_model_load(pc_model_t *m, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pc_error_fmt(PC_EIO, err, errlen, "%s: cannot open: %s", path, strerror(errno));
    uint8_t h[HEADER_BYTES], want[HEADER_BYTES];
    int rc = read_header(path, f, h, err, errlen);
    float *buf = NULL;
    if (rc == PC_OK) {
        make_header(m, want, pc_wire_get_u32(h + 40)); /* same architecture -> same bytes 8..39 */
        if (memcmp(h + 8, want + 8, 32) != 0)
            rc = pc_error_fmt(
                PC_EFORMAT, err, errlen,
                "%s: holds a different model (kind %u, %u parameters; expected %s, %zu)", path,
                pc_wire_get_u32(h + 12), pc_wire_get_u32(h + 32), pc_model_kind_name(m->kind),
                m->nparams);
    }
    if (rc == PC_OK && !(buf = malloc(m->nparams * sizeof(float))))
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    if (rc == PC_OK && fread(buf, sizeof(float), m->nparams, f) != m->nparams)
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: truncated parameters", path);
    if (rc == PC_OK && fgetc(f) != EOF)
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: trailing bytes after the parameters", path);
    if (rc == PC_OK && crc_bytes(buf, m->nparams * sizeof(float)) != pc_wire_get_u32(h + 40))
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: parameter checksum mismatch (corrupt file)",
                          path);
    if (rc == PC_OK)
        memcpy(m->params, buf, m->nparams * sizeof(float));
    free(buf);
    fclose(f);
    return rc;
}
