/* cuda_baseline: the GPU benchmark's baselines (cuda_baseline.h), over the launchers of
 * cuda/pc_baseline.cu. One thread at a time per baseline. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "../../cuda/pc_cuda_kernels.h"
#include "cuda_baseline.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_error.h"

struct pc_cuda__baseline {
    size_t nmax;
    pc_cuda_baseline_dev_t *dev;
};

int pc_cuda__baseline_create(int device, size_t nmax, pc_cuda__baseline_t **out, char *err,
                             size_t errlen)
{
    if (!out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "baseline: no result pointer");
    if (device < 0 || device >= pc_cuda_device_count())
        return pc_error_fmt(PC_ENODEV, err, errlen, "baseline: no CUDA device %d", device);
    if (nmax > UINT32_MAX)
        return pc_error_fmt(PC_EINVAL, err, errlen, "baseline: %zu elements is over 2^32 - 1",
                            nmax);
    pc_cuda__baseline_t *b = calloc(1, sizeof(*b));
    if (!b)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "baseline: out of memory");
    b->nmax = nmax;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_baseline_alloc(device, nmax, &b->dev, &cuerr);
    if (rc != PC_OK) {
        free(b);
        return pc_cuda_err_fail(rc, &cuerr, err, errlen, "baseline scratch for %zu elements", nmax);
    }
    *out = b;
    return PC_OK;
}

void pc_cuda__baseline_destroy(pc_cuda__baseline_t *b)
{
    if (!b)
        return;
    pc_cuda_baseline_free(b->dev);
    free(b);
}

int pc_cuda__baseline_read(pc_cuda__baseline_t *b, const float *x, size_t n)
{
    if (!b || !x || n > b->nmax)
        return PC_EINVAL;
    return pc_cuda_baseline_read_launch(b->dev, x, n, NULL);
}

int pc_cuda__baseline_copy(pc_cuda__baseline_t *b, const float *x, size_t n)
{
    if (!b || !x || n > b->nmax)
        return PC_EINVAL;
    return pc_cuda_baseline_copy_launch(b->dev, x, n, NULL);
}

int pc_cuda__baseline_sort_topk(pc_cuda__baseline_t *b, const float *x, size_t n, size_t k)
{
    if (!b || !x || n > b->nmax || k > n)
        return PC_EINVAL;
    return pc_cuda_baseline_sort_launch(b->dev, x, n, k, NULL);
}
