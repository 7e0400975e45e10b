// codec_select.cu: the sparsifiers: the radix select of exact top-k, its sampled path, dgc's
// sampled threshold, Floyd's randomk and threshold (the shared parts: codec_impl.cuh).
#include "codec_impl.cuh"

namespace pc_codec_cu
{
namespace
{

// ---- radix select -----------------------------------------------------------------------

// Level 1 histogram of all n keys, with the error-feedback fold when g is given.
__global__ void hist1_kernel(float *v, const float *g, size_t n, unsigned *hist, dstate *st)
{
    __shared__ unsigned h[L1_BINS];
    smem_clear(h, L1_BINS);
    bool bad = false;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = fold_at(v, g, i);
        unsigned k = pc_elem_key(x);
        bad |= k >= KEY_NONFINITE;
        atomicAdd(&h[pc_elem_digit(k, 0)], 1u);
    }
    flag_bad(bad, st);
    smem_flush(h, L1_BINS, hist);
}

// Find level `level`'s boundary bin: the largest b with (count of bins >= b) >= kleft.
// One block. Level 0 starts from kleft = k.
__global__ void find_bin_kernel(const unsigned *hist, int nbins, int level, unsigned k, dstate *st)
{
    typedef cub::BlockScan<unsigned, TPB> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    unsigned kleft = level == 0 ? k : st->kleft;
    int per = nbins / TPB;                        // 8 or 2 bins per thread
    int top = nbins - 1 - (int)threadIdx.x * per; // thread t covers bins top .. top - per + 1
    unsigned mine = 0;
    for (int j = 0; j < per; j++)
        mine += hist[top - j];
    unsigned above;
    scan_t(tmp).ExclusiveSum(mine, above);
    unsigned bin, size, left; // exactly one thread's bins hold the boundary
    if (pc_elem_find_bin(hist, top, per, above, kleft, &bin, &size, &left)) {
        st->digit[level] = bin;
        st->binsize[level] = size;
        st->kleft = left;
        if (level == 2)
            st->key = pc_elem_key_of_digits(st->digit);
    }
}

// Pass 2 over all n, FILTER_ITEMS elements per thread per step (one atomic per list per
// step of a block): above the boundary bin -> selected (when sel); in it -> candidates, and
// the level 2 histogram of their keys.
constexpr int FILTER_ITEMS = 8;

__global__ void filter1_kernel(const float *v, size_t n, dstate *st, unsigned *sel, unsigned *ckey,
                               unsigned *cidx, unsigned *hist2)
{
    __shared__ unsigned h[L2_BINS];
    smem_clear(h, L2_BINS);
    const unsigned dig[3] = {st->digit[0], 0, 0};
    size_t tile = (size_t)blockDim.x * FILTER_ITEMS;
    for (size_t base = (size_t)blockIdx.x * tile; base < n; base += (size_t)gridDim.x * tile) {
        unsigned key[FILTER_ITEMS], ns = 0, nc = 0;
        for (int j = 0; j < FILTER_ITEMS; j++) {
            size_t i = base + (size_t)j * blockDim.x + threadIdx.x;
            key[j] = i < n ? pc_elem_key(v[i]) : 0;
            int c = pc_elem_classify(key[j], 0, dig);
            ns += i < n && c == PC_ELEM_ABOVE;
            nc += i < n && c == PC_ELEM_IN;
        }
        unsigned ps = sel ? block_append(ns, &st->nsel) : 0; // sel is the same for all threads
        unsigned pc = block_append(nc, &st->ncand);
        for (int j = 0; j < FILTER_ITEMS; j++) {
            size_t i = base + (size_t)j * blockDim.x + threadIdx.x;
            if (i >= n)
                break;
            int c = pc_elem_classify(key[j], 0, dig);
            if (sel && c == PC_ELEM_ABOVE) {
                sel[ps++] = (unsigned)i;
            } else if (c == PC_ELEM_IN) {
                ckey[pc] = key[j];
                cidx[pc++] = (unsigned)i;
                atomicAdd(&h[pc_elem_digit(key[j], 1)], 1u);
            }
        }
    }
    smem_flush(h, L2_BINS, hist2);
}

// Over the candidates: level 2 digit above its boundary -> selected; equal -> the level 3
// histogram.
__global__ void filter2_kernel(const unsigned *ckey, const unsigned *cidx, dstate *st,
                               unsigned *sel, unsigned *hist3)
{
    __shared__ unsigned h[L3_BINS];
    smem_clear(h, L3_BINS);
    const unsigned dig[3] = {st->digit[0], st->digit[1], 0};
    unsigned m = st->ncand;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t base = (size_t)blockIdx.x * blockDim.x; base < m; base += stride) {
        size_t j = base + threadIdx.x;
        bool in = j < m;
        unsigned k = in ? ckey[j] : 0;
        int c = in ? pc_elem_classify(k, 1, dig) : PC_ELEM_DECIDED;
        unsigned p = warp_append(sel && c == PC_ELEM_ABOVE, &st->nsel);
        if (sel && c == PC_ELEM_ABOVE)
            sel[p] = cidx[j];
        if (c == PC_ELEM_IN)
            atomicAdd(&h[pc_elem_digit(k, 2)], 1u);
    }
    smem_flush(h, L3_BINS, hist3);
}

// Over the candidates with the boundary's first two digits: above the k-th key ->
// selected; equal -> the ties list.
__global__ void filter3_kernel(const unsigned *ckey, const unsigned *cidx, dstate *st,
                               unsigned *sel, unsigned *eq)
{
    const unsigned dig[3] = {st->digit[0], st->digit[1], st->digit[2]};
    unsigned m = st->ncand;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t base = (size_t)blockIdx.x * blockDim.x; base < m; base += stride) {
        size_t j = base + threadIdx.x;
        bool in = j < m;
        int c = in ? pc_elem_classify(ckey[j], 2, dig) : PC_ELEM_DECIDED;
        unsigned p = warp_append(c == PC_ELEM_ABOVE, &st->nsel);
        if (c == PC_ELEM_ABOVE)
            sel[p] = cidx[j];
        p = warp_append(c == PC_ELEM_IN, &st->neq);
        if (c == PC_ELEM_IN)
            eq[p] = cidx[j];
    }
}

__global__ void iota_kernel(unsigned *idx, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        idx[i] = (unsigned)i;
}

// out[j] = v[idx[j]] for j < m.
__global__ void gather_idx_kernel(const float *v, const unsigned *idx, size_t m, float *out)
{
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += step)
        out[j] = v[idx[j]];
}

// The sample both sampled selections take: out[j] = v[floor(j * n / ns)] for j < ns.
__global__ void sample_kernel(const float *v, size_t n, size_t ns, float *out)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < ns; j += stride)
        out[j] = v[(size_t)(((unsigned long long)j * n) / ns)]; // pc_codec__dgc_sample_index
}

// ---- randomk: Floyd's algorithm in parallel ------------------------------------------------
// The CPU runs, for j = n-k .. n-1, t_j = (draw (j - (n-k)) * (j + 1)) >> 32; takes t_j
// unless already taken, else j. The set it ends with: every value some step drew, plus each
// j >= n-k that fell back. Step x falls back iff y = t_x was taken before step x: drawn by
// an earlier step (first_hit[y] < x), or y >= n-k and y itself fell back (y < x). Each
// element's membership is decided independently from first_hit (the earliest step that
// drew each value) by walking that chain down.

struct randomk_args {
    unsigned long long seed, subseq;
    unsigned n, k;
};

__global__ void randomk_hits_kernel(randomk_args a, unsigned *first_hit)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; 4 * q < a.k; q += stride) {
        uint4 d = draws4(a.seed, a.subseq, q);
        for (int l = 0; l < 4 && 4 * q + l < a.k; l++) {
            unsigned j = a.n - a.k + (unsigned)(4 * q + l);
            atomicMin(&first_hit[pc_elem_randomk_t(j, word_of(d, l))], j);
        }
    }
}

struct randomk_member {
    randomk_args a;
    const unsigned *first_hit;
    __device__ bool operator()(unsigned i) const
    {
        return pc_elem_randomk_member(i, a.n, a.k, a.seed, a.subseq, first_hit);
    }
};

struct key_above {
    const float *v;
    unsigned t;
    __device__ bool operator()(unsigned i) const
    {
        return pc_elem_key(v[i]) > t;
    }
};

struct key_equal {
    const float *v;
    unsigned t;
    __device__ bool operator()(unsigned i) const
    {
        return pc_elem_key(v[i]) == t;
    }
};

struct key_at_least {
    const float *v;
    unsigned t;
    __device__ bool operator()(unsigned i) const
    {
        return pc_elem_key(v[i]) >= t;
    }
};

} // namespace

// Sort `count` u32 keys from in to out (values < n).
int sort_u32(pc_cuda_codec *s, const unsigned *in, unsigned *out, size_t count, size_t n,
             cudaStream_t q, pc_cuda_err_t *cuerr)
{
    if (count == 0)
        return PC_OK;
    int end_bit = 1;
    while (end_bit < 32 && ((size_t)1 << end_bit) < n)
        end_bit++;
    size_t bytes = 0;
    int64_t items = (int64_t)count;
    CK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, in, out, items, 0, end_bit, q));
    CK(reserve(s->cub, bytes));
    CK(cub::DeviceRadixSort::SortKeys(s->cub.p, bytes, in, out, items, 0, end_bit, q));
    return PC_OK;
}

// The items of in[0..count) with pred(item), in order, into out; their number into
// st->count (device).
template <typename In, typename P>
int select_from(pc_cuda_codec *s, In in, size_t count, P pred, unsigned *out, cudaStream_t q,
                pc_cuda_err_t *cuerr)
{
    size_t bytes = 0;
    CK(cub::DeviceSelect::If(nullptr, bytes, in, out, &s->st->count, (int64_t)count, pred, q));
    CK(reserve(s->cub, bytes));
    CK(cub::DeviceSelect::If(s->cub.p, bytes, in, out, &s->st->count, (int64_t)count, pred, q));
    return PC_OK;
}

// Ascending indices i < n with pred(i) into out; the count into st->count (device).
template <typename P>
int select_if(pc_cuda_codec *s, size_t n, P pred, unsigned *out, cudaStream_t q,
              pc_cuda_err_t *cuerr)
{
    return select_from(s, thrust::counting_iterator<unsigned>(0), n, pred, out, q, cuerr);
}

// The radix select of the k largest keys of v[0..n) (0 < k < n), folding g into v first when
// given. With want_indices, the k indices end up ascending in s->sorted; else only the k-th
// key is wanted (st->key). *bad on the host tells of a non-finite value (nothing selected).
int radix_select(pc_cuda_codec *s, float *v, const float *g, size_t n, size_t k, bool want_indices,
                 cudaStream_t q, bool *bad, pc_cuda_err_t *cuerr)
{
    unsigned *h1 = s->hist, *h2 = s->hist + L1_BINS, *h3 = h2 + L2_BINS;
    CK(cudaMemsetAsync(s->hist, 0, sizeof(unsigned) * (L1_BINS + L2_BINS + L3_BINS), q));
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    hist1_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(v, g, n, h1, s->st);
    CK_LAUNCH();
    find_bin_kernel<<<1, TPB, 0, q>>>(h1, L1_BINS, 0, (unsigned)k, s->st);
    CK_LAUNCH();
    // The boundary bin's count sizes the candidate lists (scratch grows with it, not n).
    CK(fetch(s, q));
    *bad = s->st_host->bad != 0;
    if (*bad)
        return PC_OK;
    size_t ncand = s->st_host->binsize[0];
    CK(reserve(s->ckey, sizeof(unsigned) * ncand));
    CK(reserve(s->cidx, sizeof(unsigned) * ncand));
    unsigned *sel = nullptr;
    if (want_indices) {
        CK(reserve(s->sel, sizeof(unsigned) * k));
        CK(reserve(s->eq, sizeof(unsigned) * ncand));
        CK(reserve(s->sorted, sizeof(unsigned) * (k > ncand ? k : ncand)));
        sel = as<unsigned>(s->sel);
    }
    filter1_kernel<<<grid_for(s->sms, (n + FILTER_ITEMS - 1) / FILTER_ITEMS), TPB, 0, q>>>(
        v, n, s->st, sel, as<unsigned>(s->ckey), as<unsigned>(s->cidx), h2);
    CK_LAUNCH();
    find_bin_kernel<<<1, TPB, 0, q>>>(h2, L2_BINS, 1, 0, s->st);
    CK_LAUNCH();
    unsigned cgrid = grid_for(s->sms, ncand);
    filter2_kernel<<<cgrid, TPB, 0, q>>>(as<unsigned>(s->ckey), as<unsigned>(s->cidx), s->st, sel,
                                         h3);
    CK_LAUNCH();
    find_bin_kernel<<<1, TPB, 0, q>>>(h3, L3_BINS, 2, 0, s->st);
    CK_LAUNCH();
    if (want_indices) {
        filter3_kernel<<<cgrid, TPB, 0, q>>>(as<unsigned>(s->ckey), as<unsigned>(s->cidx), s->st,
                                             sel, as<unsigned>(s->eq));
        CK_LAUNCH();
    }
    CK(fetch(s, q));
    if (!want_indices)
        return PC_OK;
    // Ties at the k-th key: the kleft lowest indices among the neq equal ones.
    size_t nsel = s->st_host->nsel, neq = s->st_host->neq, take = s->st_host->kleft;
    if (nsel + take != k || take > neq)
        return PC_CUDA_FAIL(PC_ECUDA); // cannot happen: the counts are exact
    const unsigned *ties = as<unsigned>(s->eq);
    if (take < neq) {
        int rc = sort_u32(s, as<unsigned>(s->eq), as<unsigned>(s->sorted), neq, n, q, cuerr);
        if (rc != PC_OK)
            return rc;
        ties = as<unsigned>(s->sorted);
    }
    CK(cudaMemcpyAsync(sel + nsel, ties, sizeof(unsigned) * take, cudaMemcpyDeviceToDevice, q));
    return sort_u32(s, sel, as<unsigned>(s->sorted), k, n, q, cuerr);
}

// The sampled selections (top-k's fast path, dgc): take_sample puts v[floor(j * n / m)],
// j < m, in s->sample (pc_codec__dgc_sample_index); select_sampled then finds the sample's
// rank-th largest key *t and writes the indices of every key >= *t over all n, ascending,
// into out (room for n), their number into *cnt. PC_ERANGE when the sample holds NaN or
// infinity.
int take_sample(pc_cuda_codec *s, const float *v, size_t n, size_t m, cudaStream_t q,
                pc_cuda_err_t *cuerr)
{
    CK(reserve(s->sample, sizeof(float) * m));
    sample_kernel<<<grid_for(s->sms, m), TPB, 0, q>>>(v, n, m, as<float>(s->sample));
    CK_LAUNCH();
    return PC_OK;
}

int select_sampled(pc_cuda_codec *s, float *v, size_t n, size_t m, size_t rank, unsigned *out,
                   cudaStream_t q, unsigned *t, size_t *cnt, pc_cuda_err_t *cuerr)
{
    bool bad = false;
    int rc = radix_select(s, as<float>(s->sample), nullptr, m, rank, false, q, &bad, cuerr);
    if (rc != PC_OK || bad)
        return bad ? PC_ERANGE : rc;
    *t = s->st_host->key;
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    rc = select_if(s, n, key_at_least{v, *t}, out, q, cuerr);
    if (rc != PC_OK)
        return rc;
    CK(fetch(s, q));
    *cnt = s->st_host->count;
    return PC_OK;
}

// The sampled path of exact top-k (pc_select's fast path, on the device), for k <= n / 4
// and n >= 65536: a sample's r-th largest key t_lo lies a little below the k-th
// largest of all; one order-keeping pass keeps the indices with keys >= t_lo (about 1.2k
// to 2k of them); the exact k-th key T among those, then one more order-keeping pass over
// them, give the k indices already ascending. *missed when the sample misjudged (fewer
// than k or more than 3k + 4096 candidates): the caller runs the radix path (same result).
int topk_sampled(pc_cuda_codec *s, float *v, size_t n, size_t k, cudaStream_t q,
                 const unsigned **idx, bool *missed, pc_cuda_err_t *cuerr)
{
    *missed = true;
    double dens = (double)k / (double)n;
    size_t m = (size_t)ceil(256.0 / dens); // about 256 sampled hits (pc_select's sizing)
    m = m < 4096 ? 4096 : m;
    m = m > n / 16 ? n / 16 : m;
    double h = dens * (double)m;
    size_t r = (size_t)ceil(h + 3.0 * sqrt(h) + 16.0);
    if (m == 0 || r > m)
        return PC_OK;
    // The sample only chooses the path (the result is exact either way), so it is taken as
    // dgc's is; a NaN or infinity in it is PC_ERANGE, as it would be anywhere.
    CK(reserve(s->hits, sizeof(unsigned) * n)); // the pass's output may hold up to n
    unsigned t_lo;
    size_t cnt;
    int rc = take_sample(s, v, n, m, q, cuerr);
    if (rc == PC_OK)
        rc = select_sampled(s, v, n, m, r, as<unsigned>(s->hits), q, &t_lo, &cnt, cuerr);
    if (rc != PC_OK)
        return rc;
    if (cnt < k || cnt > 3 * k + 4096)
        return PC_OK;
    // The exact k-th key among the candidates' values.
    CK(reserve(s->cvals, sizeof(float) * cnt));
    gather_idx_kernel<<<grid_for(s->sms, cnt), TPB, 0, q>>>(v, as<unsigned>(s->hits), cnt,
                                                            as<float>(s->cvals));
    CK_LAUNCH();
    bool bad = false;
    rc = radix_select(s, as<float>(s->cvals), nullptr, cnt, k, false, q, &bad, cuerr);
    if (rc != PC_OK || bad) // a NaN or infinity is above every threshold: a candidate
        return bad ? PC_ERANGE : rc;
    unsigned t = s->st_host->key;
    size_t take = s->st_host->kleft, neq = s->st_host->binsize[2];
    CK(reserve(s->sorted, sizeof(unsigned) * (k + neq)));
    const unsigned *cand = as<unsigned>(s->hits);
    unsigned *out = as<unsigned>(s->sorted);
    CK(cudaMemsetAsync(s->st, 0, sizeof(dstate), q));
    if (take == neq) { // every key equal to T is taken (no tie to break): one pass
        rc = select_from(s, cand, cnt, key_at_least{v, t}, out, q, cuerr);
        if (rc != PC_OK)
            return rc;
    } else { // above T, then the lowest `take` of those equal to T, then in index order
        CK(reserve(s->sel, sizeof(unsigned) * (k + neq)));
        unsigned *tmp = as<unsigned>(s->sel);
        rc = select_from(s, cand, cnt, key_above{v, t}, tmp, q, cuerr);
        if (rc != PC_OK)
            return rc;
        rc = select_from(s, cand, cnt, key_equal{v, t}, tmp + (k - take), q, cuerr);
        if (rc != PC_OK)
            return rc;
        rc = sort_u32(s, tmp, out, k, n, q, cuerr);
        if (rc != PC_OK)
            return rc;
    }
    *idx = out;
    *missed = false;
    return PC_OK;
}

// Exact top-k of v (ascending indices in *idx, device scratch); *got the count. g folded
// first when given. PC_ERANGE when v holds NaN or infinity.
int topk_indices(pc_cuda_codec *s, float *v, const float *g, size_t n, size_t k, cudaStream_t q,
                 const unsigned **idx, size_t *got, pc_cuda_err_t *cuerr)
{
    if (k > n)
        k = n;
    *got = k;
    bool sampled = n >= 65536 && k > 0 && k <= n / 4; // pc_select's fast path's range
    if (k == 0 || k == n || (sampled && g)) {
        // Fold (and check) first. Without a fold the sampled path needs no check of its
        // own: a NaN's or an infinity's key is above any threshold, so it is a candidate,
        // and the candidates' select reports it.
        int rc = fold_check(s, v, g, n, q, cuerr);
        if (rc != PC_OK)
            return rc;
        g = nullptr;
    }
    if (k == 0 || k == n) {
        CK(reserve(s->sorted, sizeof(unsigned) * (n ? n : 1)));
        if (k == n) {
            iota_kernel<<<grid_for(s->sms, n), TPB, 0, q>>>(as<unsigned>(s->sorted), n);
            CK_LAUNCH();
        }
        *idx = as<unsigned>(s->sorted);
        return PC_OK;
    }
    if (sampled) {
        bool missed = true;
        int rc = topk_sampled(s, v, n, k, q, idx, &missed, cuerr);
        if (rc != PC_OK || !missed)
            return rc;
    }
    bool bad = false;
    int rc = radix_select(s, v, g, n, k, true, q, &bad, cuerr);
    if (rc != PC_OK)
        return rc;
    if (bad)
        return PC_ERANGE;
    *idx = as<unsigned>(s->sorted);
    return PC_OK;
}

int compress_topk(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j, cudaStream_t q,
                  size_t *bytes, pc_cuda_err_t *cuerr)
{
    bool ef = spec->ef;
    float *v = ef ? j->residual : const_cast<float *>(j->grad); // only written when ef
    const float *g = ef ? j->grad : nullptr;
    if (j->momentum && j->grad) {
        int rc = momentum_fold(s, spec, j, q, cuerr);
        if (rc != PC_OK)
            return rc;
        g = nullptr;
    }
    const unsigned *idx;
    size_t got;
    int rc = topk_indices(s, v, g, j->n, pc_codec__topk_k(j->codec, j->steps, j->n), q, &idx, &got,
                          cuerr);
    if (rc != PC_OK)
        return rc;
    j->entries = (uint32_t)got;
    return encode(s, spec, idx, got, j->n, v, ef, j->momentum, true, &j->bitmap, q, bytes, cuerr);
}

int compress_threshold(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j,
                       cudaStream_t q, size_t *bytes, pc_cuda_err_t *cuerr)
{
    bool ef = spec->ef;
    float *v = ef ? j->residual : const_cast<float *>(j->grad);
    int rc = fold_check(s, v, ef ? j->grad : nullptr, j->n, q, cuerr);
    if (rc != PC_OK)
        return rc;
    CK(reserve(s->sel, sizeof(unsigned) * j->n));
    float tau = (float)spec->tau;
    unsigned t = 0;
    memcpy(&t, &tau, sizeof(t));
    rc = select_if(s, j->n, key_at_least{v, t & 0x7fffffffu}, as<unsigned>(s->sel), q, cuerr);
    if (rc != PC_OK)
        return rc;
    CK(fetch(s, q));
    j->entries = s->st_host->count;
    return encode(s, spec, as<unsigned>(s->sel), j->entries, j->n, v, ef, nullptr, true, &j->bitmap,
                  q, bytes, cuerr);
}

int compress_randomk(pc_cuda_codec *s, const pc_codec_spec_t *spec, pc_cuda_job_t *j,
                     cudaStream_t q, size_t *bytes, pc_cuda_err_t *cuerr)
{
    bool ef = spec->ef;
    float *v = ef ? j->residual : const_cast<float *>(j->grad);
    int rc = j->momentum && j->grad ? momentum_fold(s, spec, j, q, cuerr)
                                    : fold_check(s, v, ef ? j->grad : nullptr, j->n, q, cuerr);
    if (rc != PC_OK)
        return rc;
    size_t n = j->n, k = pc_codec__k(spec->ratio, n);
    CK(reserve(s->hits, sizeof(unsigned) * n));
    CK(reserve(s->sel, sizeof(unsigned) * (k ? k : 1)));
    CK(cudaMemsetAsync(s->hits.p, 0xff, sizeof(unsigned) * n, q));
    randomk_args a = {spec->seed, pc_philox_subsequence(j->iteration, j->chunk), (unsigned)n,
                      (unsigned)k};
    if (k) {
        randomk_hits_kernel<<<grid_for(s->sms, (k + 3) / 4), TPB, 0, q>>>(a, as<unsigned>(s->hits));
        CK_LAUNCH();
        rc = select_if(s, n, randomk_member{a, as<unsigned>(s->hits)}, as<unsigned>(s->sel), q,
                       cuerr);
        if (rc != PC_OK)
            return rc;
        CK(fetch(s, q));
        if (s->st_host->count != k)
            return PC_CUDA_FAIL(PC_ECUDA); // Floyd's algorithm always yields k: a kernel is wrong
    }
    j->entries = (uint32_t)k;
    return encode(s, spec, as<unsigned>(s->sel), k, n, v, ef, j->momentum, false, &j->bitmap, q,
                  bytes, cuerr);
}

int compress_dgc(pc_cuda_codec *s, const pc_codec_t *c, pc_cuda_job_t *j, cudaStream_t q,
                 size_t *bytes, pc_cuda_err_t *cuerr)
{
    const pc_codec_spec_t *spec = pc_codec_spec(c);
    float *v = j->residual;
    size_t n = j->n;
    int rc = j->grad ? momentum_fold(s, spec, j, q, cuerr) : PC_OK;
    if (rc != PC_OK)
        return rc;
    pc_codec_dgc_plan_t pl;
    pc_codec__dgc_plan(c, j->steps, n, &pl);
    size_t got = 0, ks = pl.ks;
    bool done = pl.k == 0;
    const unsigned *idx = nullptr;
    j->dgc_path = -1;
    if (!done && pl.k < n) {
        CK(reserve(s->sel, sizeof(unsigned) * n));
        if ((rc = take_sample(s, v, n, pl.ns, q, cuerr)) != PC_OK)
            return rc;
        for (int attempt = 0; attempt < 2 && !done; attempt++) {
            // The ks-th largest sampled key (pc_select_kth_magnitude; 0 selects everything).
            // A non-finite sample (a residual no fold checked: state_set) is PC_ERANGE.
            unsigned t;
            size_t cnt;
            rc = select_sampled(s, v, n, pl.ns, ks, as<unsigned>(s->sel), q, &t, &cnt, cuerr);
            if (rc != PC_OK)
                return rc;
            if (cnt >= pl.lo && cnt <= pl.hi && cnt <= pl.cap) {
                got = cnt;
                done = true;
                idx = as<unsigned>(s->sel);
                j->dgc_path = attempt;
            } else {
                ks = pc_codec__dgc_reaim(ks, pl.k, cnt, pl.ns);
            }
        }
    }
    if (!done) {
        rc = topk_indices(s, v, nullptr, n, pl.k, q, &idx, &got, cuerr);
        if (rc != PC_OK)
            return rc;
        if (pl.k > 0 && pl.k < n)
            j->dgc_path = 2;
    }
    j->entries = (uint32_t)got;
    return encode(s, spec, idx, got, n, v, true, j->momentum, true, &j->bitmap, q, bytes, cuerr);
}

} // namespace pc_codec_cu
