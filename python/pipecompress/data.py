"""Data helpers over the library's own loaders (pc_data.h), so that a torch script sees
exactly what pc-train sees: Fashion-MNIST's IDX files (plain or gzip, every field
validated), pixels scaled to [0, 1], the per-epoch Philox order, and the synthetic set."""
import ctypes

from . import _lib

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"

class DataError(ValueError):
    """A data file could not be read or is malformed; the message names the file."""


def _take(lib, ds):
    import torch

    n, rows, cols = ds.n, ds.rows, ds.cols
    try:
        images = torch.empty((n, 1, rows, cols), dtype=torch.float32)
        labels8 = torch.empty((n,), dtype=torch.uint8)
        ctypes.memmove(images.data_ptr(), ds.images, n * rows * cols * 4)
        ctypes.memmove(labels8.data_ptr(), ds.labels, n)
    finally:
        lib.pc_data_free(ctypes.byref(ds))
    return images, labels8.long()


def fashion_mnist(directory=FASHION_MNIST, train=True):
    """(images float32 [n, 1, 28, 28] in [0, 1], labels int64 [n]) of the training set
    (train=True) or the test set; DataError naming the file on any problem."""
    lib = _lib.load()
    ds = _lib.Dataset()
    err = ctypes.create_string_buffer(1024)
    rc = lib.pc_data_load_fashion(str(directory).encode(), 1 if train else 0, ctypes.byref(ds),
                                  err, len(err))
    if rc != 0:
        raise DataError(err.value.decode(errors="replace") or lib.pc_strerror(rc).decode())
    return _take(lib, ds)


def synthetic(n, seed, train=True):
    """pc-train's synthetic set (--data synthetic): n learnable 28x28 samples of 10
    classes, deterministic in seed; the test set (train=False) shares the prototypes."""
    lib = _lib.load()
    if not isinstance(n, int) or not 100 <= n <= 10_000_000:
        raise DataError(f"synthetic: {n!r} samples is out of range (100..10000000)")
    ds = _lib.Dataset()
    rc = lib.pc_data_synthetic(n, seed, 0 if train else 1, ctypes.byref(ds))
    if rc != 0:
        raise DataError("synthetic: " + lib.pc_strerror(rc).decode())
    return _take(lib, ds)


def order(n, seed, epoch):
    """Epoch `epoch`'s permutation of 0..n-1 (int64), the one pc-train uses."""
    import torch

    lib = _lib.load()
    perm = torch.empty((n,), dtype=torch.int32)
    lib.pc_data_order(perm.data_ptr(), n, seed, epoch)
    return perm.long()


def shard(perm, iteration_in_epoch, batch, workers, rank):
    """The sample indices of worker `rank` in an iteration, as pc-train takes them: sample
    j of the batch is perm[(i * batch + j) * workers + rank]."""
    import torch

    base = iteration_in_epoch * batch * workers
    idx = base + torch.arange(batch) * workers + rank
    return perm[idx]
