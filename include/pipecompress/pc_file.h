/* pc_file: crash-safe files and their CRC-32.
 *
 * Checkpoints, saved models and the metrics and timeline files are written the same way: to
 * a temporary name beside the final one (NAME.tmp.PID), then flushed and fsynced, renamed
 * into place, and the directory fsynced. A crash at any moment leaves either the old file
 * (or none) or the complete new one under the final name, never a torn one; a failed write
 * removes the temporary file. The writer keeps the size and CRC-32 (zlib's polynomial) of
 * what it wrote, which checkpoint manifests and model headers record. */
#ifndef PC_FILE_H
#define PC_FILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_file_writer pc_file_writer_t;

/* Start writing path (its directory must exist). PC_EIO with a message naming the file
 * when the temporary file cannot be created; PC_ERANGE when the name is too long;
 * PC_ENOMEM. The writer is owned by the caller until commit or abort; one thread at a
 * time. */
int pc_file_writer_open(const char *path, pc_file_writer_t **out, char *err, size_t errlen);

/* Whether path could be written later, checked now so that a long run does not find out at
 * its end: path is not a directory, its directory exists, and a file can be created there
 * (the writer's temporary name NAME.tmp.PID is created and removed at once: nothing is
 * left, and permissions, read-only file systems and pseudo file systems are all tested as
 * the real write will meet them). PC_OK, or PC_EIO (PC_ERANGE for a name too long) with a
 * one-line message naming path and the cause. Thread-safe. */
int pc_file_check_writable(const char *path, char *err, size_t errlen);

/* Append len bytes. A failure is remembered and reported by commit (so a sequence of writes
 * needs no checks of its own). */
void pc_file_writer_write(pc_file_writer_t *w, const void *data, size_t len);

/* Bytes written so far and their CRC-32. */
uint64_t pc_file_writer_size(const pc_file_writer_t *w);
uint32_t pc_file_writer_crc(const pc_file_writer_t *w);

/* Finish: flush, fsync, rename into place, fsync the directory; frees w. PC_OK, or PC_EIO
 * with a message naming the file and the cause (then the final name is untouched and the
 * temporary file removed). */
int pc_file_writer_commit(pc_file_writer_t *w, char *err, size_t errlen);

/* Give up: remove the temporary file and free w (NULL is accepted). */
void pc_file_writer_abort(pc_file_writer_t *w);

/* fsync directory dir, so that renames and removals in it are durable. Best effort: a file
 * system that cannot sync directories still has the data. Thread-safe. */
void pc_file_sync_dir(const char *dir);

/* CRC-32 (zlib's) of n bytes, continuing from crc (0 to start). Thread-safe. */
uint32_t pc_file_crc(uint32_t crc, const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* PC_FILE_H */
