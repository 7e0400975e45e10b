/* pc_ckpt: crash-safe checkpoint files, manifests and their selection on resume.
 *
 * A checkpoint of iteration N lives in DIR/ckpt-NNNNNNNNNNNN/ (N in 12 digits): one file
 * per rank, rank-R.bin (its contents are the runtime's business: server shards, worker
 * codec state), and a text MANIFEST written last:
 *
 *     PipeCompress checkpoint 1
 *     iteration 1200
 *     world 3
 *     workers 2
 *     servers 1
 *     model 9a3f0c1e22b4d871
 *     config ps topk:ratio=0.01
 *     file rank-0.bin 8388712 1a2b3c4d
 *     file rank-1.bin 8388712 99aa00ff
 *     file rank-2.bin 1048620 5e6f7a8b
 *     crc 0c1d2e3f
 *
 * (file: name, size in bytes, CRC-32 in hex; crc: CRC-32 of every byte before that line.)
 * Every file is written to a temporary name, fsynced, renamed, and its directory fsynced;
 * the manifest likewise, after every rank's file is in place. A checkpoint is complete
 * exactly when its manifest parses, its own CRC holds, and every file it names has the
 * size and CRC it states. Resume picks the newest complete checkpoint whose world, model
 * and config match the job; every other one it passes over is reported with the reason.
 *
 * Thread-safety: every function is thread-safe on distinct objects; a writer or reader is
 * used by one thread at a time. Nothing here touches MPI. */
#ifndef PC_CKPT_H
#define PC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_log.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_CKPT_CONFIG_LEN 320
/* Most ranks a manifest may name. */
#define PC_CKPT_MAX_RANKS 65536

/* What identifies a job for resuming: a checkpoint is only loaded into a job whose meta
 * (all but the iteration) is equal. */
typedef struct pc_ckpt_meta {
    uint64_t iteration; /* iterations completed */
    int world, workers, servers;
    uint64_t model;                  /* hash of the tensors and the chunk plan */
    char config[PC_CKPT_CONFIG_LEN]; /* mode and --compress: what the state's layout depends on */
} pc_ckpt_meta_t;

typedef struct pc_ckpt_file {
    uint64_t size;
    uint32_t crc;
} pc_ckpt_file_t;

/* Create dir and its missing parents (mode 0755) and check it is a writable directory.
 * PC_EIO with a message naming dir otherwise. */
int pc_ckpt_dir_create(const char *dir, char *err, size_t errlen);

/* The path of checkpoint `iteration`'s directory (rank < 0) or of rank's file in it.
 * PC_ERANGE when it does not fit in len. */
int pc_ckpt_path(const char *dir, uint64_t iteration, int rank, char *out, size_t len);

/* ---- writing one rank's file ---------------------------------------------------------- */

typedef struct pc_ckpt_writer pc_ckpt_writer_t;

/* Create the checkpoint's directory if needed (dir itself must exist) and open rank's file
 * under a temporary name. The writer is owned by the caller until commit or abort. */
int pc_ckpt_writer_open(const char *dir, uint64_t iteration, int rank, pc_ckpt_writer_t **out,
                        char *err, size_t errlen);

/* Append len bytes (buffered; an I/O error is kept and reported by commit). */
void pc_ckpt_writer_write(pc_ckpt_writer_t *w, const void *data, size_t len);

/* Flush, fsync, rename into place, fsync the directory; the file's size and CRC go to
 * *info. Frees w in every case; on error the temporary file is removed. */
int pc_ckpt_writer_commit(pc_ckpt_writer_t *w, pc_ckpt_file_t *info, char *err, size_t errlen);

/* Discard a writer and its temporary file. NULL is a no-op. */
void pc_ckpt_writer_abort(pc_ckpt_writer_t *w);

/* ---- manifests ------------------------------------------------------------------------ */

/* Write the manifest of meta->iteration naming files[0..meta->world) (crash-safe, as
 * above). Call after every rank's file is committed. */
int pc_ckpt_manifest_write(const char *dir, const pc_ckpt_meta_t *meta, const pc_ckpt_file_t *files,
                           char *err, size_t errlen);

/* Parse manifest text (untrusted bytes, len of them). files gets meta->world entries and
 * must hold max_files. PC_EFORMAT with a message naming the problem. */
int pc_ckpt_manifest_parse(const char *buf, size_t len, pc_ckpt_meta_t *meta, pc_ckpt_file_t *files,
                           int max_files, char *err, size_t errlen);

/* Whether checkpoint `iteration` in dir is complete and matches want (its iteration field
 * is ignored): the manifest, then every file's size and CRC. PC_OK, or PC_ENOENT (no
 * manifest: partial), PC_EINCOMPAT (intact manifest of another job: world, model or
 * configuration differ), PC_EFORMAT (corrupt) with the reason. */
int pc_ckpt_verify(const char *dir, uint64_t iteration, const pc_ckpt_meta_t *want, char *err,
                   size_t errlen);

/* The newest complete matching checkpoint in dir: *iteration. Each newer one that fails
 * pc_ckpt_verify is logged as a warning with its reason and, when remove_bad is set and it
 * is damaged or partial, deleted (another job's checkpoints are never deleted).
 * PC_EINCOMPAT when none matches but dir holds an intact checkpoint of another job (the
 * message names the newest and what differs); PC_ENOENT when there is none at all (dir may
 * not exist); PC_EIO when dir cannot be read. */
int pc_ckpt_find(const char *dir, const pc_ckpt_meta_t *want, pc_log_t *log, int remove_bad,
                 uint64_t *iteration, char *err, size_t errlen);

/* Delete this job's complete checkpoints in dir older than `newest` except the keep - 1
 * newest of them (keep >= 1 counts `newest` itself). "This job's": the manifest matches
 * want (world, model, configuration); another job's checkpoints and partial ones (no
 * manifest) are left alone. Only files a checkpoint consists of are removed. */
int pc_ckpt_prune(const char *dir, const pc_ckpt_meta_t *want, uint64_t newest, int keep, char *err,
                  size_t errlen);

/* Delete checkpoint `iteration` (its files and directory). */
int pc_ckpt_remove(const char *dir, uint64_t iteration);

/* ---- reading one rank's file ---------------------------------------------------------- */

typedef struct pc_ckpt_reader pc_ckpt_reader_t;

/* Open rank's file of checkpoint `iteration`; its expected size and CRC come from the
 * manifest. */
int pc_ckpt_reader_open(const char *dir, uint64_t iteration, int rank, pc_ckpt_reader_t **out,
                        char *err, size_t errlen);

/* Read exactly len bytes. PC_EFORMAT (with the file named in pc_ckpt_reader_close's
 * message) when the file is shorter. */
int pc_ckpt_reader_read(pc_ckpt_reader_t *r, void *dst, size_t len);

/* Check that the whole file was read and its CRC matches the manifest; frees r. A reader
 * whose read failed reports that here. */
int pc_ckpt_reader_close(pc_ckpt_reader_t *r, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_CKPT_H */
