/* runtime_server.h: the server's update steps, without MPI (hidden: libpipecompress.so does
 * not export them, and the header is not installed). pc_server.c defines them and runs
 * them on each chunk; src/cost/cost_measure.c includes this header too, because
 * pc_cost_measure_server and pc_cost_measure_lowrank time these very steps for the cost
 * model (a copy would drift from what the server runs). runtime_impl.h includes it for the
 * runtime's own files. Nothing else should include it. */
#ifndef PC_RUNTIME_SERVER_H
#define PC_RUNTIME_SERVER_H

#include <stddef.h>

#include "pipecompress/pc_optim.h"
#include "runtime_proto.h"

#pragma GCC visibility push(hidden)

/* The update of the server's O(nnz) step of one chunk, after pc_rt__grad_aggregate_sparse
 * summed the workers' messages into agg over sp->touched: plain SGD at lr on those entries
 * of p (pc_optim_sgd_sparse; optim must be pc_optim_sparse_friendly), then clear them in
 * agg, so that agg, all zero before the aggregation, is all zero again for the next
 * iteration. Returns how many parameters changed, their indices in sp->scratch
 * (ascending, for the pull). pc_server.c's sparse path; pc_cost_measure_server times it.
 * One thread per sp. */
size_t pc_rt__server_sparse_update(rt_sparse_t *sp, const pc_optim_cfg_t *optim, float lr, float *p,
                                   float *agg);

/* The same for lazy Adam(W) (--adam-moments lazy; optim: pc_optim_lazy): st->steps counts
 * this step (the chunk's, whatever arrived), then pc_optim_adam_lazy at lr on the touched
 * entries of p and st, then those entries of agg cleared. Returns how many parameters
 * changed, their indices in sp->scratch (ascending). pc_server.c's sparse path; pc-bench
 * server times it. One thread per sp. */
size_t pc_rt__server_lazy_update(rt_sparse_t *sp, const pc_optim_cfg_t *optim, double lr, float *p,
                                 pc_optim_state_t *st, float *agg);

/* The update of a powersgd matrix on its server (rows x cols, row-major p; st: its
 * optimizer state, pc_optim_state_alloc's for optim and rows x cols): P^ Q^T made row by
 * row (pc_lowrank_row, from phat rows x rank and qagg cols x rank), or read from made
 * (rows x cols, made so already and clipped: the server's clipping path; NULL otherwise),
 * and optim's step at lr on each row (pc_optim_step; st->steps counts the matrix's step
 * once). work:
 * pc_lowrank_expand_work(cols, rank) floats, the caller's. Returns how many parameters
 * changed. pc_server.c's powersgd path; pc_cost_measure_lowrank times it. Thread-safe on
 * distinct buffers. */
size_t pc_rt__server_lowrank_update(const pc_optim_cfg_t *optim, double lr, const float *made,
                                    float *p, pc_optim_state_t *st, const float *phat,
                                    const float *qagg, size_t rows, size_t cols, int rank,
                                    float *work);

#pragma GCC visibility pop

#endif /* PC_RUNTIME_SERVER_H */
