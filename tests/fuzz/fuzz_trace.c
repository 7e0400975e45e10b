/* fuzz_trace: libFuzzer target for the trace loader (pc_trace.h; a trace file is input a
 * user hands pc-train: a hand edit, a generator's bug, the wrong file). Invariants: no
 * crash, overread or leak; a refused trace returns PC_EFORMAT with one non-empty line and
 * nothing; an accepted one obeys every rule of doc/replay.md: layers 1..PC_TRACE_MAX_LAYERS,
 * non-empty unique names, shapes of 1..8 dimensions >= 1 whose product is the tensor's
 * elements and at most 2^31 - 1, rows its first dimension, finite non-negative times whose
 * sum is pc_trace_compute_ms, parameters in all that sum to pc_trace_total_params (> 0).
 * Built by `make fuzz`. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort unless tensor j of layer i keeps the shape rules; returns its elements. */
static size_t check_param(const pc_trace_t *t, int i, int j)
{
    const size_t *dims;
    int nd;
    if (pc_trace_param_shape(t, i, j, &dims, &nd) != PC_OK || nd < 1 || nd > PC_TRACE_MAX_DIMS)
        abort();
    size_t numel = 1;
    for (int k = 0; k < nd; k++) {
        if (dims[k] < 1)
            abort();
        numel *= dims[k];
        if (numel > PC_TRACE_MAX_NUMEL)
            abort();
    }
    if (numel != pc_trace_param_numel(t, i, j) ||
        pc_trace_param_rows(t, i, j) != (nd >= 2 ? dims[0] : 0))
        abort();
    return numel;
}

static void check_trace(const pc_trace_t *t)
{
    int nl = pc_trace_nlayers(t);
    if (nl < 1 || nl > PC_TRACE_MAX_LAYERS || pc_trace_batch(t) < 1)
        abort();
    const char *s[] = {pc_trace_model(t), pc_trace_device(t), pc_trace_precision(t),
                       pc_trace_source(t)};
    for (int k = 0; k < 4; k++)
        if (!s[k] || !s[k][0] || strlen(s[k]) > PC_TRACE_MAX_STRING || strchr(s[k], '\n'))
            abort();
    double opt = pc_trace_optimizer_ms(t), ms = 0;
    if (!(opt == -1 || (isfinite(opt) && opt >= 0)))
        abort();
    size_t total = 0;
    for (int i = 0; i < nl; i++) {
        const char *name = pc_trace_layer_name(t, i);
        if (!name || !name[0] || strchr(name, '\n'))
            abort();
        /* Unique against the next few (the loader checks all; a quadratic check here would
         * slow the fuzzer on the long inputs it grows). */
        for (int k = i + 1; k < nl && k < i + 8; k++)
            if (strcmp(name, pc_trace_layer_name(t, k)) == 0)
                abort();
        double f = pc_trace_forward_ms(t, i), b = pc_trace_backward_ms(t, i);
        if (!isfinite(f) || !isfinite(b) || f < 0 || b < 0)
            abort();
        ms += f + b;
        int np = pc_trace_nparams(t, i);
        if (np < 0 || np > PC_TRACE_MAX_PARAMS)
            abort();
        for (int j = 0; j < np; j++)
            total += check_param(t, i, j);
    }
    if (total == 0 || total != pc_trace_total_params(t) || ms != pc_trace_compute_ms(t))
        abort();
    if (pc_trace_layer_name(t, nl) || pc_trace_nparams(t, nl) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees any read past the end. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    char err[512] = "";
    pc_trace_t *t = NULL;
    int rc = pc_trace_parse(buf, size, &t, err, sizeof(err));
    if (rc == PC_OK) {
        if (!t)
            abort();
        check_trace(t);
        pc_trace_destroy(t);
    } else if ((rc != PC_EFORMAT && rc != PC_ENOMEM) || t || !err[0] || strchr(err, '\n')) {
        abort();
    }
    free(buf);
    return 0;
}
