/* pipecompress.h: the umbrella header of libpipecompress. */
#ifndef PIPECOMPRESS_H
#define PIPECOMPRESS_H

#include "pipecompress/pc_auto.h"
#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_ckpt.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_file.h"
#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_opt.h" /* the 0.1 names of pc_flags, until 0.2 */
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_devcodec.h"
#include "pipecompress/pc_gpu.h"
#include "pipecompress/pc_data.h"
#include "pipecompress/pc_embed.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_event.h"
#include "pipecompress/pc_layers.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_replay.h"
#include "pipecompress/pc_runtime.h"
#include "pipecompress/pc_select.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_timeline.h"
#include "pipecompress/pc_topo.h"
#include "pipecompress/pc_trace.h"
#include "pipecompress/pc_wire.h"

#endif /* PIPECOMPRESS_H */
