/* fuzz_manifest: libFuzzer target for the checkpoint manifest parser (a manifest on disk is
 * untrusted: a crash may have cut it, a disk may have flipped bits). Invariants: no crash
 * or overread; an accepted manifest is self-consistent (workers + servers == world within
 * the caller's limit); a rejected one says why. Built by `make fuzz`. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_ckpt.h"
#include "pipecompress/pc_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAXF = 64 };
    pc_ckpt_meta_t m;
    pc_ckpt_file_t files[MAXF];
    char err[256];
    /* A copy of exactly size bytes, so ASan sees any read past the end. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    int rc = pc_ckpt_manifest_parse(buf, size, &m, files, MAXF, err, sizeof(err));
    if (rc == PC_OK) {
        if (m.world < 1 || m.world > MAXF || m.workers + m.servers != m.world ||
            strlen(m.config) >= sizeof(m.config))
            abort();
    } else if (rc != PC_EFORMAT || !err[0]) {
        abort();
    }
    free(buf);
    return 0;
}
