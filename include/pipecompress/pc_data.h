/* pc_data: training data: IDX files (plain or gzip, fully validated), a synthetic
 * dataset for benchmarks and tests, and per-epoch shuffled worker shards.
 *
 * IDX (the MNIST format): a big-endian header of magic (0x00 0x00 type ndims), ndims u32
 * dimensions, then the data. Images are type 0x08 (unsigned byte) with 3 dimensions
 * (count, rows, cols); labels type 0x08 with 1 dimension. Everything is checked: magic,
 * type, dimensions (positive, plausible), exact data size (truncated and trailing bytes
 * are both errors), label range, and that image and label counts agree. Errors name the
 * file. */
#ifndef PC_DATA_H
#define PC_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest accepted counts: 2^26 samples, 4096 x 4096 pixels (MNIST-like sets are far
 * smaller; the bounds keep a hostile header from asking for absurd memory). */
#define PC_DATA_MAX_COUNT (1u << 26)
#define PC_DATA_MAX_SIDE  4096

typedef struct pc_dataset {
    uint32_t n; /* samples */
    uint32_t rows, cols;
    float *images;   /* (n, rows*cols), pixel / 255 */
    uint8_t *labels; /* (n) */
    int classes;
} pc_dataset_t;

/* Parse IDX bytes. kind 3: images (out: n, rows, cols, pixels as bytes, malloc'd);
 * kind 1: labels (out: n, bytes). name is used in messages. PC_EFORMAT + message on any
 * problem; nothing allocated then. Thread-safe. */
int pc_data_parse_idx(const uint8_t *buf, size_t len, int kind, const char *name, uint32_t *n,
                      uint32_t *rows, uint32_t *cols, uint8_t **data, char *err, size_t errlen);

/* Load images and labels (each plain or gzip, detected by content) into ds, with labels
 * < classes. PC_EIO (cannot read), PC_EFORMAT (malformed), PC_ENOMEM; message in err. */
int pc_data_load_idx(const char *images_path, const char *labels_path, int classes,
                     pc_dataset_t *ds, char *err, size_t errlen);

/* Fashion-MNIST from dir: {train,t10k}-images-idx3-ubyte and -labels-idx1-ubyte, each file
 * gzipped (NAME.gz, preferred) or not (NAME) on its own. PC_EIO naming both names when
 * neither exists; otherwise as pc_data_load_idx. */
int pc_data_load_fashion(const char *dir, int train, pc_dataset_t *ds, char *err, size_t errlen);

/* A synthetic 28x28, 10-class set: each class a fixed random prototype (pixels 0.3 or 0.7)
 * plus uniform noise of +-0.6, all from Philox(seed, which): learnable but not trivially,
 * deterministic. which = 0 train, 1 test (same prototypes, other samples). */
int pc_data_synthetic(uint32_t n, uint64_t seed, int which, pc_dataset_t *ds);

/* Free what a loader allocated in ds and zero it (a zeroed ds is accepted; ds itself is
 * the caller's). */
void pc_data_free(pc_dataset_t *ds);

/* The order of epoch e: a permutation of 0..n-1 (Fisher-Yates with Philox(seed, e)). */
void pc_data_order(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch);

#ifdef __cplusplus
}
#endif
#endif /* PC_DATA_H */
