/* layers_elem.h: the engine kernels' per-element arithmetic (cuda/pc_layers.cu), in
 * functions a CPU unit test also compiles (elem_base.h says how): ReLU and its gradient,
 * dropout's keep decision, scaling and gradient, 2x2 max pooling's window and its gradient,
 * and softmax cross-entropy's gradient. tests/unit/test_layers_elem.c runs them
 * over whole tensors in the kernels' order and compares with the CPU layers
 * (src/engine/pc_layers.c), which are the reference. Private; C and CUDA. */
#ifndef PC_LAYERS_ELEM_H
#define PC_LAYERS_ELEM_H

#include "elem_base.h"

PC_ELEM float pc_elem_relu(float x)
{
    return x > 0 ? x : 0.0f;
}

/* ReLU's gradient from its output. */
PC_ELEM float pc_elem_relu_back(float dout, float out)
{
    return out > 0 ? dout : 0.0f;
}

/* Dropout keeps an element when its draw's uniform is <= keep (1 - p). */
PC_ELEM bool pc_elem_dropout_kept(uint32_t draw, float keep)
{
    return pc_elem_uniform(draw) <= keep;
}

/* A kept element's value (and gradient): x * scale (1 / keep); a dropped one's: 0. */
PC_ELEM float pc_elem_dropout(float x, bool kept, float scale)
{
    return kept ? PC_FMUL(x, scale) : 0.0f;
}

/* The input index of the maximum of output (y, x)'s 2x2 window in an (H, W) plane,
 * pc_maxpool_forward's comparisons in its order (ties to the first). */
PC_ELEM int pc_elem_maxpool_arg(const float *in, int W, int y, int x)
{
    int best = (2 * y) * W + 2 * x;
    const int cand[3] = {best + 1, best + W, best + W + 1};
    for (int k = 0; k < 3; k++)
        if (in[cand[k]] > in[best])
            best = cand[k];
    return best;
}

/* The pooling gradient of element idx of a (BC, H, W) input from dout and argmax (BC, H/2,
 * W/2): its window's gradient when it was the window's maximum, else 0 (0 + dout, as the
 * CPU's zeroing then adding gives: -0 becomes +0 the same way). A gather: windows do not
 * overlap. */
PC_ELEM float pc_elem_maxpool_grad(size_t idx, int H, int W, const int32_t *argmax,
                                   const float *dout)
{
    int OH = H / 2, OW = W / 2;
    size_t bc = idx / ((size_t)H * W);
    int pos = (int)(idx - bc * H * W), y = pos / W, x = pos - y * W;
    if (y / 2 >= OH || x / 2 >= OW)
        return 0.0f;
    size_t o = bc * OH * OW + (size_t)(y / 2) * OW + x / 2;
    return argmax[o] == pos ? PC_FADD(0.0f, dout[o]) : 0.0f;
}

/* Softmax cross-entropy's gradient of one logit: (p - onehot) * (1 / B). */
PC_ELEM float pc_elem_xent_back(float p, bool is_label, float inv_batch)
{
    return PC_FMUL(PC_FSUB(p, is_label ? 1.0f : 0.0f), inv_batch);
}

#endif /* PC_LAYERS_ELEM_H */
