"""The shared library and its C prototypes (ctypes): private to the package.

libpipecompress.so is found, in this order, at $PIPECOMPRESS_LIB (a path; nothing else is
tried when it is set), at the path `make install` recorded in _installed.py, beside a
source tree's default build directory (build/src/.libs), and through the dynamic linker's
search path. It is loaded with RTLD_GLOBAL: Open MPI opens its plugins later, and they
need libmpi's symbols visible to the whole process.
"""
import ctypes
import os

_c = ctypes
c_int, c_size_t, c_char_p, c_void_p, c_double, c_int64 = (
    _c.c_int, _c.c_size_t, _c.c_char_p, _c.c_void_p, _c.c_double, _c.c_int64)


# pc_embed_length_fn: int64_t (*)(void *ud, int workers)
LENGTH_FN = _c.CFUNCTYPE(c_int64, c_void_p, c_int)


def _candidates():
    env = os.environ.get("PIPECOMPRESS_LIB")
    if env:
        return [env]
    found = []
    try:
        from . import _installed  # written by `make install`
        found.append(_installed.LIBRARY)
    except ImportError:
        pass
    here = os.path.dirname(os.path.realpath(__file__))
    found.append(os.path.join(here, "..", "..", "build", "src", ".libs", "libpipecompress.so.0"))
    found.append("libpipecompress.so.0")
    return found


_loaded = None


def load():
    """The library with its prototypes declared, loaded once per process (pc.init and
    pc.data share it); raises OSError naming what was tried."""
    global _loaded
    if _loaded is None:
        _loaded = _load()
    return _loaded


def _load():
    tried = []
    lib = None
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (no such file)")
            continue
        try:
            lib = _c.CDLL(path, mode=_c.RTLD_GLOBAL)
            break
        except OSError as e:
            tried.append(f"{path} ({e})")
    if lib is None:
        hint = ("" if os.environ.get("PIPECOMPRESS_LIB")
                else " (set PIPECOMPRESS_LIB to the library's path)")
        raise OSError("cannot load libpipecompress: tried " + "; ".join(tried) + hint)
    proto = {
        "pc_strerror": (c_char_p, [c_int]),
        "pc_time_ns": (c_int64, []),
        "pc_embed_create": (c_int, [c_int, _c.POINTER(c_char_p), LENGTH_FN, c_void_p,
                                    _c.POINTER(c_void_p),
                                    _c.POINTER(c_int), c_char_p, c_size_t]),
        "pc_embed_rank": (c_int, [c_void_p]),
        "pc_embed_size": (c_int, [c_void_p]),
        "pc_embed_runtime": (c_void_p, [c_void_p]),
        "pc_embed_worker": (c_void_p, [c_void_p]),
        "pc_embed_config_text": (c_int, [c_void_p, c_char_p, c_size_t]),
        "pc_embed_run_server": (c_int, [c_void_p, c_char_p, c_size_t]),
        "pc_embed_destroy": (None, [c_void_p]),
        "pc_embed_pending": (_c.c_bool, [c_void_p]),
        "pc_embed_choose": (c_int, [c_void_p, _c.POINTER(AutoProbe), c_int, c_char_p,
                                    c_size_t]),
        "pc_embed_auto_flags": (c_char_p, [c_void_p]),
        "pc_embed_abort": (None, [c_int]),
        "pc_runtime_workers": (c_int, [c_void_p]),
        "pc_runtime_servers": (c_int, [c_void_p]),
        "pc_runtime_set_stop_flag": (None, [c_void_p, _c.POINTER(c_int)]),
        "pc_runtime_stop_signal": (c_int, [c_void_p]),
        "pc_runtime_lr": (c_double, [c_void_p, c_int64]),
        "pc_worker_register": (c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t]),
        "pc_worker_set_rows": (c_int, [c_void_p, c_int, c_size_t]),
        "pc_worker_lowrank_q": (c_int, [c_void_p, c_int, c_void_p, c_size_t]),
        "pc_worker_lowrank_q_len": (c_size_t, [c_void_p, c_int]),
        "pc_worker_set_device_step": (c_int, [c_void_p, c_int64]),
        "pc_worker_set_optimizer": (c_int, [c_void_p, c_int, _c.POINTER(c_double), c_int,
                                            _c.POINTER(c_int)]),
        "pc_worker_set_lrs": (c_int, [c_void_p, _c.POINTER(c_double), c_int]),
        # update="servers": opt.clip_grad_norm_ clips on the servers, the norm comes back.
        "pc_worker_clip_grad_norm": (c_int, [c_void_p, c_double, _c.POINTER(c_double)]),
        "pc_worker_start": (c_int, [c_void_p]),
        "pc_worker_param_wait": (c_int, [c_void_p, c_int]),
        # --update workers with the user's own optimizer (pc.DistributedOptimizer's
        # update="workers"): switch, then wait for each tensor's mean gradient in p.grad.
        "pc_worker_set_user_step": (c_int, [c_void_p, _c.c_bool]),
        # update="workers" without --update given to pc.init: the wrapper chooses.
        "pc_worker_set_update": (c_int, [c_void_p, c_int]),
        # the codec the worker runs: momentum=0 added where the wrapper turned the codec's
        # default momentum correction off, dense=1000 (powersgd: warmup=1000) where it gave
        # the default warm-up; the servers' v frozen after top-k's and dgc's dense=1000.
        "pc_worker_compress": (c_char_p, [c_void_p]),
        "pc_worker_adam_moments": (c_char_p, [c_void_p]),
        "pc_worker_adam_freeze_after": (c_int64, [c_void_p]),
        # update="workers" with an optimizer other than SGD: the sparsifiers' default
        # warm-up (top-k and dgc dense=1000), before the start.
        "pc_worker_warm_codec": (c_int, [c_void_p]),
        "pc_worker_grad_wait": (c_int, [c_void_p, c_int]),
        "pc_worker_grad_ready": (c_int, [c_void_p, c_int]),
        "pc_worker_iteration_end": (c_int, [c_void_p, _c.POINTER(_c.c_bool)]),
        "pc_worker_broadcast": (c_int, [c_void_p, c_void_p, c_size_t]),
        "pc_worker_finish": (c_int, [c_void_p]),
        "pc_worker_error": (c_char_p, [c_void_p]),
        "pc_worker_error_agreed": (_c.c_bool, [c_void_p]),
        "pc_worker_iteration": (c_int64, [c_void_p]),
        "pc_worker_report": (None, [c_void_p, c_double, c_double]),
        "pc_worker_metrics_note": (None, [c_void_p, c_char_p]),
        "pc_worker_trace": (None, [c_void_p, c_char_p, c_int64, c_int64]),
        "pc_data_load_fashion": (c_int, [c_char_p, c_int, c_void_p, c_char_p, c_size_t]),
        "pc_data_synthetic": (c_int, [_c.c_uint32, _c.c_uint64, c_int, c_void_p]),
        "pc_data_free": (None, [c_void_p]),
        "pc_data_order": (None, [c_void_p, _c.c_uint32, _c.c_uint64, _c.c_uint64]),
    }
    for name, (res, args) in proto.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise OSError(f"{lib._name} has no {name}: a library older than this package "
                          "(rebuild, or point PIPECOMPRESS_LIB at the matching one)") from None
        f.restype = res
        f.argtypes = args
    return lib


class CostLayer(_c.Structure):
    """pc_cost_layer_t (include/pipecompress/pc_cost.h): seconds."""
    _fields_ = [("fwd", c_double), ("bwd", c_double)]


class PlanTensor(_c.Structure):
    """pc_plan_tensor_t (include/pipecompress/pc_plan.h)."""
    _fields_ = [("n", c_size_t), ("param", c_void_p), ("grad", c_void_p),
                ("whole_rows", c_size_t)]


# pc_auto_profile_fn: int (*)(void *ctx, pc_cost_layer_t *layers, int nlayers)
PROFILE_FN = _c.CFUNCTYPE(c_int, c_void_p, _c.POINTER(CostLayer), c_int)

# PC_EINVAL (include/pipecompress/pc_error.h): what a profile callback returns on failure.
EINVAL = -1


class AutoProbe(_c.Structure):
    """pc_auto_probe_t (include/pipecompress/pc_auto.h)."""
    _fields_ = [("layers", _c.POINTER(CostLayer)), ("nlayers", c_int),
                ("tensors", _c.POINTER(PlanTensor)), ("tensor_layer", _c.POINTER(c_int)),
                ("ntensors", c_int), ("profile", PROFILE_FN), ("ctx", c_void_p)]


# PC_AUTO_MAX_LAYERS: the most layers a probe holds.
AUTO_MAX_LAYERS = 256


class Dataset(_c.Structure):
    """pc_dataset_t (include/pipecompress/pc_data.h)."""
    _fields_ = [("n", _c.c_uint32), ("rows", _c.c_uint32), ("cols", _c.c_uint32),
                ("images", _c.POINTER(_c.c_float)), ("labels", _c.POINTER(_c.c_uint8)),
                ("classes", c_int)]
