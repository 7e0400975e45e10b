/* pc_model: layer lists, slabs and the forward/backward drivers (see pc_model.h).
 *
 * One layer list drives both backends: each layer's forward and backward call pc_layers on
 * the CPU or the launchers of cuda/pc_layers.cu on a device (forward_layer, backward_layer),
 * between the same hooks. A device model's slabs have the CPU's offsets in device memory;
 * it adds the batch's copy (x_dev, labels_dev), the softmax's per-row scratch, and
 * convolution scratch for conv_chunk images at a time (the CPU's col is one image's). The
 * object is model_impl.h's; the profile is model_profile.c, model files model_file.c. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_file.h"
#include "pipecompress/pc_layers.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_wire.h"
#include "model_impl.h"

#include "../../cuda/pc_cuda_err.h"
#include "../../cuda/pc_layers_cuda.h"
#include "gpu/gpu_mem.h"

bool pc_model__on_device(const pc_model_t *m)
{
    return m->device != PC_MODEL_CPU;
}

/* Record a launcher's failure (its PC_* code; the failed call in the engine, or in cuerr
 * when given) with its message in m->err. The message buffer is m's only mutable state
 * reachable through a const model (pc_model_params_get); every model is allocated
 * writable. */
static int dev_fail_at(const pc_model_t *m, int code, const pc_cuda_err_t *cuerr, const char *what)
{
    pc_model_t *w = (pc_model_t *)m;
    if (!cuerr && m->eng)
        cuerr = pc_cuda_engine_error(m->eng);
    return pc_cuda_err_fail(code, cuerr, w->err, sizeof(w->err), "%s model on CUDA device %d: %s",
                            pc_model_kind_name(m->kind), m->device, what);
}

static int dev_fail(const pc_model_t *m, int code, const char *what)
{
    return dev_fail_at(m, code, NULL, what);
}

/* Record a failure of pc_gpu's memory calls (gpu_mem.h), whose message is msg. */
static int mem_fail(const pc_model_t *m, int code, const char *msg)
{
    pc_model_t *w = (pc_model_t *)m;
    return pc_error_fmt(code, w->err, sizeof(w->err), "%s model on CUDA device %d: %s",
                        pc_model_kind_name(m->kind), m->device, msg);
}

static int add_tensor(pc_model_t *m, const char *layer, const char *what, size_t n, size_t rows)
{
    int t = m->ntensors++;
    m->trows[t] = rows;
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
        l->wt = add_tensor(m, name, "weight", (size_t)arg * l->c, (size_t)arg);
        l->bt = add_tensor(m, name, "bias", (size_t)arg, 0);
        break;
    case L_CONV:
        l->k = 5;
        l->oc = arg;
        l->wt = add_tensor(m, name, "weight", (size_t)arg * l->c * 25, (size_t)arg);
        l->bt = add_tensor(m, name, "bias", (size_t)arg, 0);
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

/* The layer list and the slab sizes of a model, with no slab allocated (device: CPU). */
static int build(pc_model_kind_t kind, int max_batch, int channels, int height, int width,
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
    m->device = PC_MODEL_CPU;
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
    *out = m;
    return PC_OK;
}

int pc_model_create(pc_model_kind_t kind, int max_batch, int channels, int height, int width,
                    int classes, float dropout, pc_model_t **out)
{
    pc_model_t *m;
    int rc = build(kind, max_batch, channels, height, width, classes, dropout, &m);
    if (rc != PC_OK)
        return rc;
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

/* Every device slab of m, zeroed; m->eng exists. PC_OK or dev_fail's code. */
static int alloc_device(pc_model_t *m)
{
    size_t B = (size_t)m->max_batch, col_img = 0, tmp_img = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *l = &m->layers[i];
        if (l->type != L_CONV)
            continue;
        size_t c = pc_cuda_conv2d_col_floats(l->c, l->h, l->w, l->k);
        size_t t = pc_cuda_conv2d_tmp_floats(l->h, l->w, l->oc);
        col_img = c > col_img ? c : col_img;
        tmp_img = t > tmp_img ? t : tmp_img;
    }
    size_t chunk = col_img ? COL_MAX_BYTES / (col_img * sizeof(float)) : 1;
    chunk = chunk < 1 ? 1 : chunk > B ? B : chunk;
    m->conv_chunk = (int)chunk;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    const size_t bytes[NSLABS] = {
        [S_PARAMS] = m->nparams * sizeof(float),
        [S_GRADS] = m->nparams * sizeof(float),
        [S_ACTS] = m->nacts * B * sizeof(float),
        [S_DACTS] = m->nacts * B * sizeof(float),
        [S_PROBS] = (size_t)m->classes * B * sizeof(float),
        [S_ARGMAX] = (m->argmax_size * B + 1) * sizeof(int32_t),
        [S_MASK] = m->mask_size * B + 1,
        [S_COL] = (col_img * chunk + 1) * sizeof(float),
        [S_CTMP] = (tmp_img * chunk + 1) * sizeof(float),
        [S_X] = in * B * sizeof(float),
        [S_LABELS] = B,
        [S_ROWS] = pc_cuda_softmax_rows_bytes(m->max_batch),
    };
    void *q = pc_cuda_engine_stream(m->eng);
    for (int i = 0; i < NSLABS; i++) {
        char msg[256];
        int rc = pc_gpu__alloc(m->device, bytes[i], false, &m->slab[i], msg, sizeof(msg));
        if (rc == PC_OK)
            rc = pc_gpu__zero(m->device, m->slab[i], bytes[i], q, false, msg, sizeof(msg));
        if (rc != PC_OK)
            return mem_fail(m, rc, msg);
    }
    m->params = m->slab[S_PARAMS];
    m->grads = m->slab[S_GRADS];
    m->acts = m->slab[S_ACTS];
    m->dacts = m->slab[S_DACTS];
    m->probs = m->slab[S_PROBS];
    m->argmax = m->slab[S_ARGMAX];
    m->mask = m->slab[S_MASK];
    m->col = m->slab[S_COL];
    m->ctmp = m->slab[S_CTMP];
    m->x_dev = m->slab[S_X];
    m->labels_dev = m->slab[S_LABELS];
    m->rows = m->slab[S_ROWS];
    int code = pc_cuda_engine_sync(m->eng);
    return code ? dev_fail(m, code, "zeroing its memory") : PC_OK;
}

static void free_device(pc_model_t *m)
{
    if (!m->eng)
        return;
    pc_cuda_engine_sync(m->eng); /* nothing of ours may still run on what is freed */
    for (int i = 0; i < NSLABS; i++)
        pc_gpu__free(m->device, m->slab[i]);
    pc_cuda_engine_destroy(m->eng);
}

int pc_model_create_on(pc_model_kind_t kind, int max_batch, int channels, int height, int width,
                       int classes, float dropout, int device, pc_model_t **out, char *err,
                       size_t errlen)
{
    if (!out || device < PC_MODEL_CPU)
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "model: device %d is not a CUDA device number or PC_MODEL_CPU", device);
    if (device == PC_MODEL_CPU) {
        int rc = pc_model_create(kind, max_batch, channels, height, width, classes, dropout, out);
        return rc == PC_OK ? PC_OK
                           : pc_error_fmt(rc, err, errlen, "cannot build the %s model: %s",
                                          pc_model_kind_name(kind), pc_strerror(rc));
    }
    char why[160];
    int count = pc_cuda_status(why, sizeof(why));
    if (count == 0)
        return pc_error_fmt(PC_ENODEV, err, errlen, "no usable CUDA device: %s", why);
    if (device >= count)
        return pc_error_fmt(PC_ENODEV, err, errlen, "no CUDA device %d (%s)", device, why);
    pc_model_t *m;
    int rc = build(kind, max_batch, channels, height, width, classes, dropout, &m);
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "cannot build the %s model: %s",
                            pc_model_kind_name(kind), pc_strerror(rc));
    m->device = device;
    pc_cuda_err_t cuerr = {0};
    int code = pc_cuda_engine_create(device, &m->eng, &cuerr);
    rc = code ? dev_fail_at(m, code, &cuerr, "creating its stream and cuBLAS handle")
              : alloc_device(m);
    if (rc != PC_OK) {
        pc_error_fmt(rc, err, errlen, "%s", m->err);
        pc_model_destroy(m);
        return rc;
    }
    *out = m;
    return PC_OK;
}

void pc_model_destroy(pc_model_t *m)
{
    if (!m)
        return;
    if (pc_model__on_device(m)) {
        free_device(m);
        free(m);
        return;
    }
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

int pc_model_init(pc_model_t *m, uint64_t seed)
{
    float *params = m->params; /* on a device: a host copy, then copied over */
    if (pc_model__on_device(m) && !(params = calloc(m->nparams ? m->nparams : 1, sizeof(float))))
        return pc_error_fmt(PC_ENOMEM, m->err, sizeof(m->err), "out of host memory");
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
        float *w = params + m->toff[l->wt];
        for (size_t j = 0; j < m->tsize[l->wt]; j++)
            w[j] = (float)((2.0 * pc_philox_uniform(pc_philox_next(&g)) - 1.0) * bound);
        memset(params + m->toff[l->bt], 0, sizeof(float) * m->tsize[l->bt]);
    }
    if (!pc_model__on_device(m))
        return PC_OK;
    int rc = pc_model_params_set(m, params);
    free(params);
    return rc;
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

size_t pc_model_tensor_rows(const pc_model_t *m, int t)
{
    return m->trows[t];
}

float *pc_model_tensor_param(pc_model_t *m, int t)
{
    return m->params + m->toff[t];
}

float *pc_model_tensor_grad(pc_model_t *m, int t)
{
    return m->grads + m->toff[t];
}

int pc_model_device(const pc_model_t *m)
{
    return m->device;
}

void *pc_model_stream(const pc_model_t *m)
{
    if (pc_model__on_device(m))
        return pc_cuda_engine_stream(m->eng);
    (void)m;
    return NULL;
}

const char *pc_model_error(const pc_model_t *m)
{
    return m->err;
}

int pc_model_sync(pc_model_t *m)
{
    if (pc_model__on_device(m)) {
        int code = pc_cuda_engine_sync(m->eng);
        return code ? dev_fail(m, code, "waiting for its stream") : PC_OK;
    }
    (void)m;
    return PC_OK;
}

/* Copy m's n-float slab out to host: memcpy on the CPU, a copy waited for on a device. */
static int slab_get(const pc_model_t *m, const float *slab, float *host, size_t n, const char *what)
{
    if (!pc_model__on_device(m)) {
        memcpy(host, slab, n * sizeof(float));
        return PC_OK;
    }
    char msg[256];
    int rc = pc_gpu__copy(m->device, host, slab, n * sizeof(float), false,
                          pc_cuda_engine_stream(m->eng), true, msg, sizeof(msg));
    if (rc != PC_OK) {
        char full[320];
        snprintf(full, sizeof(full), "%s: %s", what, msg);
        return mem_fail(m, rc, full);
    }
    return PC_OK;
}

int pc_model_params_get(const pc_model_t *m, float *host)
{
    return slab_get(m, m->params, host, m->nparams, "copying its parameters out");
}

int pc_model_grads_get(const pc_model_t *m, float *host)
{
    return slab_get(m, m->grads, host, m->nparams, "copying its gradients out");
}

int pc_model_params_set(pc_model_t *m, const float *host)
{
    if (!pc_model__on_device(m)) {
        memcpy(m->params, host, m->nparams * sizeof(float));
        return PC_OK;
    }
    char msg[256]; /* complete on return, as on the CPU */
    int rc = pc_gpu__copy(m->device, m->params, host, m->nparams * sizeof(float), true,
                          pc_cuda_engine_stream(m->eng), true, msg, sizeof(msg));
    return rc == PC_OK ? PC_OK : mem_fail(m, rc, msg);
}

int pc_model_host_alloc(const pc_model_t *m, size_t bytes, void **out)
{
    if (!out)
        return PC_EINVAL;
    if (pc_model__on_device(m)) {
        int rc = pc_gpu__host_alloc(m->device, bytes, false, out, NULL, 0);
        return rc == PC_OK ? PC_OK : PC_ENOMEM;
    }
    (void)m;
    return (*out = malloc(bytes ? bytes : 1)) ? PC_OK : PC_ENOMEM;
}

void pc_model_host_free(const pc_model_t *m, void *p)
{
    if (pc_model__on_device(m)) {
        pc_gpu__host_free(m->device, p);
        return;
    }
    (void)m;
    free(p);
}

static size_t out_size(const layer_t *l)
{
    return (size_t)l->oc * l->oh * l->ow;
}

static size_t in_size(const layer_t *l)
{
    return (size_t)l->c * l->h * l->w;
}

/* Layer l (index i) forward from in to out on m's backend. PC_OK, or on a device a
 * launch's failure (dev_fail). */
static int forward_layer(pc_model_t *m, layer_t *l, int i, float *out, const float *in, int B,
                         bool train, uint64_t seed, uint64_t noise)
{
    const float *W = l->wt >= 0 ? m->params + m->toff[l->wt] : NULL;
    const float *b = l->bt >= 0 ? m->params + m->toff[l->bt] : NULL;
    float p = train ? l->p : 0.0f;
    uint64_t stream = noise * MAX_LAYERS + (uint64_t)i;
    if (!pc_model__on_device(m)) {
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
                               out_size(l) * (size_t)B, p, seed, stream);
            break;
        }
        return PC_OK;
    }
    int code = 0;
    switch (l->type) {
    case L_LINEAR:
        code = pc_cuda_linear_forward(m->eng, out, in, W, b, B, l->c, l->oc);
        break;
    case L_CONV:
        code = pc_cuda_conv2d_forward(m->eng, out, m->col, m->ctmp, in, W, b, B, l->c, l->h, l->w,
                                      l->oc, l->k, m->conv_chunk);
        break;
    case L_POOL:
        code = pc_cuda_maxpool_forward(m->eng, out, m->argmax + l->aux_off * (size_t)m->max_batch,
                                       in, B, l->c, l->h, l->w);
        break;
    case L_RELU:
        code = pc_cuda_relu_forward(m->eng, out, in, out_size(l) * (size_t)B);
        break;
    case L_DROPOUT:
        code = pc_cuda_dropout_forward(m->eng, out, m->mask + l->aux_off * (size_t)m->max_batch, in,
                                       out_size(l) * (size_t)B, p, seed, stream);
        break;
    }
    return code ? dev_fail(m, code, l->name) : PC_OK;
}

/* The batch's copy to a device model (x and labels are host memory; x NULL: the labels
 * alone): the first layer then reads m->x_dev. */
static int to_device(pc_model_t *m, const float *x, const uint8_t *labels, int B)
{
    size_t in = (size_t)m->in_c * m->in_h * m->in_w * (size_t)B;
    void *q = pc_cuda_engine_stream(m->eng);
    char msg[256];
    int rc = x ? pc_gpu__copy(m->device, m->x_dev, x, in * sizeof(float), true, q, false, msg,
                              sizeof(msg))
               : PC_OK;
    if (rc == PC_OK)
        rc = pc_gpu__copy(m->device, m->labels_dev, labels, (size_t)B, true, q, false, msg,
                          sizeof(msg));
    return rc == PC_OK ? PC_OK : mem_fail(m, rc, msg);
}

/* The softmax cross-entropy of the last layer's output `in` into probs; *loss and *correct
 * when asked (on a device: the one wait of a forward). */
static int forward_loss(pc_model_t *m, const float *in, const uint8_t *labels, int B, float *loss,
                        int *correct)
{
    if (!pc_model__on_device(m)) {
        float lo = pc_softmax_xent_forward(m->probs, correct, in, labels, B, m->classes);
        if (loss)
            *loss = lo;
        return PC_OK;
    }
    int code =
        pc_cuda_softmax_xent_forward(m->eng, m->probs, m->rows, in, m->labels_dev, B, m->classes);
    if (code == 0 && (loss || correct))
        code = pc_cuda_softmax_xent_result(m->eng, loss, correct);
    return code ? dev_fail(m, code, "softmax cross-entropy") : PC_OK;
}

int pc_model_forward(pc_model_t *m, const float *x, const uint8_t *labels, int B, bool train,
                     uint64_t seed, uint64_t noise, const pc_model_hooks_t *hooks, float *loss,
                     int *correct)
{
    if (B < 1 || B > m->max_batch)
        return PC_EINVAL;
    const float *in = x;
    if (pc_model__on_device(m)) {
        int rc = to_device(m, x, labels, B);
        if (rc != PC_OK)
            return rc;
        in = m->x_dev;
    }
    m->last_x = in;
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
        int rc = forward_layer(m, l, i, out, in, B, train, seed, noise);
        if (hooks && hooks->layer_end)
            hooks->layer_end(hooks->ud, l->name, false);
        if (rc != PC_OK)
            return rc;
        in = out;
    }
    return forward_loss(m, in, labels, B, loss, correct);
}

/* Layer l backward on m's backend: din (NULL for the first layer), dW and db from dout. */
static int backward_layer(pc_model_t *m, layer_t *l, float *din, float *dW, float *db,
                          const float *dout, const float *out, const float *in, const float *W,
                          int B)
{
    size_t MB = (size_t)m->max_batch;
    if (!pc_model__on_device(m)) {
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
        return PC_OK;
    }
    int code = 0;
    switch (l->type) {
    case L_LINEAR:
        code = pc_cuda_linear_backward(m->eng, din, dW, db, dout, in, W, B, l->c, l->oc);
        break;
    case L_CONV:
        code = pc_cuda_conv2d_backward(m->eng, din, dW, db, m->col, m->ctmp, dout, in, W, B, l->c,
                                       l->h, l->w, l->oc, l->k, m->conv_chunk);
        break;
    case L_POOL:
        if (din)
            code = pc_cuda_maxpool_backward(m->eng, din, dout, m->argmax + l->aux_off * MB, B, l->c,
                                            l->h, l->w);
        break;
    case L_RELU:
        if (din)
            code = pc_cuda_relu_backward(m->eng, din, dout, out, out_size(l) * (size_t)B);
        break;
    case L_DROPOUT:
        if (din)
            code = pc_cuda_dropout_backward(m->eng, din, dout, m->mask + l->aux_off * MB,
                                            in_size(l) * (size_t)B, l->p);
        break;
    }
    return code ? dev_fail(m, code, l->name) : PC_OK;
}

/* dlogits of the softmax cross-entropy into the last layer's activation gradient. */
static int backward_loss(pc_model_t *m, float *dlogits, const uint8_t *labels, int B)
{
    if (!pc_model__on_device(m)) {
        pc_softmax_xent_backward(dlogits, m->probs, labels, B, m->classes);
        return PC_OK;
    }
    int rc = to_device(m, NULL, labels, B);
    if (rc != PC_OK)
        return rc;
    int code =
        pc_cuda_softmax_xent_backward(m->eng, dlogits, m->probs, m->labels_dev, B, m->classes);
    return code ? dev_fail(m, code, "softmax cross-entropy backward") : PC_OK;
}

int pc_model_backward(pc_model_t *m, const uint8_t *labels, int B, const pc_model_hooks_t *hooks)
{
    if (B < 1 || B > m->max_batch)
        return PC_EINVAL;
    size_t MB = (size_t)m->max_batch;
    layer_t *lastl = &m->layers[m->nlayers - 1];
    int rc = backward_loss(m, m->dacts + lastl->out_off * MB, labels, B);
    if (rc != PC_OK)
        return rc;
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
        rc = backward_layer(m, l, din, dW, db, dout, out, in, W, B);
        if (hooks && hooks->layer_end)
            hooks->layer_end(hooks->ud, l->name, true);
        if (rc != PC_OK)
            return rc;
        if (l->wt >= 0 && hooks && hooks->grad_ready) {
            rc = hooks->grad_ready(hooks->ud, l->bt);
            if (rc == PC_OK)
                rc = hooks->grad_ready(hooks->ud, l->wt);
            if (rc != PC_OK)
                return rc;
        }
    }
    return PC_OK;
}
