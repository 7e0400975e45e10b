/* pc_layers: CPU layers on OpenBLAS (GEMM) and plain loops. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <cblas.h>

#include "pipecompress/pc_layers.h"
#include "pipecompress/pc_philox.h"

void pc_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int B,
                       int C, int OC)
{
    for (int b = 0; b < B; b++)
        memcpy(out + (size_t)b * OC, bias, sizeof(float) * (size_t)OC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, weight, C, 1.0f,
                out, OC);
}

void pc_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int B, int C, int OC)
{
    /* dweight (OC, C) = dout^T (OC, B) . inp (B, C) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC, inp, C, 0.0f,
                dweight, C);
    memset(dbias, 0, sizeof(float) * (size_t)OC);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OC; o++)
            dbias[o] += dout[(size_t)b * OC + (size_t)o];
    /* dinp (B, C) = dout (B, OC) . weight (OC, C) */
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC, weight, C,
                    0.0f, dinp, C);
}

/* col (C*K*K, H*W) from one image (C, H, W), zero padding. */
static void im2col(float *col, const float *img, int C, int H, int W, int K)
{
    int pad = K / 2;
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                float *row = col + ((size_t)(c * K + ky) * K + kx) * (size_t)H * W;
                for (int y = 0; y < H; y++) {
                    int iy = y + ky - pad;
                    for (int x = 0; x < W; x++) {
                        int ix = x + kx - pad;
                        row[y * W + x] = (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                             ? img[((size_t)c * H + iy) * W + ix]
                                             : 0.0f;
                    }
                }
            }
}

/* The adjoint of im2col: accumulate col back into img (C, H, W) (zeroed first). */
static void col2im(float *img, const float *col, int C, int H, int W, int K)
{
    int pad = K / 2;
    memset(img, 0, sizeof(float) * (size_t)C * H * W);
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                const float *row = col + ((size_t)(c * K + ky) * K + kx) * (size_t)H * W;
                for (int y = 0; y < H; y++) {
                    int iy = y + ky - pad;
                    if (iy < 0 || iy >= H)
                        continue;
                    for (int x = 0; x < W; x++) {
                        int ix = x + kx - pad;
                        if (ix >= 0 && ix < W)
                            img[((size_t)c * H + iy) * W + ix] += row[y * W + x];
                    }
                }
            }
}

void pc_conv2d_forward(float *out, float *col, const float *inp, const float *weight,
                       const float *bias, int B, int C, int H, int W, int OC, int K)
{
    int HW = H * W, CKK = C * K * K;
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * OC * HW;
        im2col(col, inp + (size_t)b * C * HW, C, H, W, K);
        for (int oc = 0; oc < OC; oc++)
            for (int i = 0; i < HW; i++)
                o[(size_t)oc * HW + i] = bias[oc];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, HW, CKK, 1.0f, weight, CKK, col,
                    HW, 1.0f, o, HW);
    }
}

void pc_conv2d_backward(float *dinp, float *dweight, float *dbias, float *col, float *dcol,
                        const float *dout, const float *inp, const float *weight, int B, int C,
                        int H, int W, int OC, int K)
{
    int HW = H * W, CKK = C * K * K;
    memset(dweight, 0, sizeof(float) * (size_t)OC * CKK);
    memset(dbias, 0, sizeof(float) * (size_t)OC);
    for (int b = 0; b < B; b++) {
        const float *d = dout + (size_t)b * OC * HW;
        im2col(col, inp + (size_t)b * C * HW, C, H, W, K);
        /* dweight (OC, CKK) += d (OC, HW) . col^T (HW, CKK) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, CKK, HW, 1.0f, d, HW, col, HW,
                    1.0f, dweight, CKK);
        for (int oc = 0; oc < OC; oc++)
            for (int i = 0; i < HW; i++)
                dbias[oc] += d[(size_t)oc * HW + i];
        if (dinp) {
            /* dcol (CKK, HW) = weight^T (CKK, OC) . d (OC, HW) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CKK, HW, OC, 1.0f, weight, CKK, d,
                        HW, 0.0f, dcol, HW);
            col2im(dinp + (size_t)b * C * HW, dcol, C, H, W, K);
        }
    }
}

void pc_maxpool_forward(float *out, int32_t *argmax, const float *inp, int B, int C, int H, int W)
{
    int OH = H / 2, OW = W / 2;
    for (int bc = 0; bc < B * C; bc++) {
        const float *in = inp + (size_t)bc * H * W;
        for (int y = 0; y < OH; y++)
            for (int x = 0; x < OW; x++) {
                int best = (2 * y) * W + 2 * x;
                const int cand[3] = {best + 1, best + W, best + W + 1};
                for (int k = 0; k < 3; k++)
                    if (in[cand[k]] > in[best])
                        best = cand[k];
                size_t o = (size_t)bc * OH * OW + (size_t)y * OW + x;
                out[o] = in[best];
                argmax[o] = best;
            }
    }
}

void pc_maxpool_backward(float *dinp, const float *dout, const int32_t *argmax, int B, int C, int H,
                         int W)
{
    int OH = H / 2, OW = W / 2;
    memset(dinp, 0, sizeof(float) * (size_t)B * C * H * W);
    for (int bc = 0; bc < B * C; bc++)
        for (int i = 0; i < OH * OW; i++) {
            size_t o = (size_t)bc * OH * OW + (size_t)i;
            dinp[(size_t)bc * H * W + (size_t)argmax[o]] += dout[o];
        }
}

void pc_relu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] > 0 ? inp[i] : 0.0f;
}

void pc_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dinp[i] = out[i] > 0 ? dout[i] : 0.0f;
}

void pc_dropout_forward(float *out, uint8_t *mask, const float *inp, size_t n, float p,
                        uint64_t seed, uint64_t stream)
{
    if (p <= 0) {
        memmove(out, inp, sizeof(float) * n);
        memset(mask, 1, n);
        return;
    }
    float keep = 1.0f - p, scale = 1.0f / keep;
    pc_philox_t g;
    pc_philox_init(&g, seed, stream, 0);
    for (size_t i = 0; i < n; i++) {
        mask[i] = pc_philox_uniform(pc_philox_next(&g)) <= keep;
        out[i] = mask[i] ? inp[i] * scale : 0.0f;
    }
}

void pc_dropout_backward(float *dinp, const float *dout, const uint8_t *mask, size_t n, float p)
{
    float scale = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
    for (size_t i = 0; i < n; i++)
        dinp[i] = mask[i] ? dout[i] * scale : 0.0f;
}

float pc_softmax_xent_forward(float *probs, int *correct, const float *logits,
                              const uint8_t *labels, int B, int V)
{
    double loss = 0;
    int ok = 0;
    for (int b = 0; b < B; b++) {
        const float *l = logits + (size_t)b * V;
        float *p = probs + (size_t)b * V;
        float mx = l[0];
        int arg = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > mx) {
                mx = l[v];
                arg = v;
            }
        double sum = 0;
        for (int v = 0; v < V; v++) {
            p[v] = expf(l[v] - mx);
            sum += p[v];
        }
        for (int v = 0; v < V; v++)
            p[v] = (float)(p[v] / sum);
        loss -= log(fmax((double)p[labels[b]], 1e-30));
        ok += arg == labels[b];
    }
    if (correct)
        *correct = ok;
    return (float)(loss / B);
}

void pc_softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B,
                              int V)
{
    float inv = 1.0f / (float)B;
    for (int b = 0; b < B; b++)
        for (int v = 0; v < V; v++)
            dlogits[(size_t)b * V + v] =
                (probs[(size_t)b * V + v] - (v == labels[b] ? 1.0f : 0.0f)) * inv;
}
