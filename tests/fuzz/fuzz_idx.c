/* fuzz_idx: libFuzzer target for the IDX parser (training data files are untrusted input).
 * Byte 0 picks images (odd) or labels (even); the rest is the file. Invariants: a rejected
 * file allocates nothing; an accepted one has exactly the announced size. Built by
 * `make fuzz`. */
#include <stdint.h>
#include <stdlib.h>

#include "pipecompress/pc_data.h"
#include "pipecompress/pc_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int kind = (data[0] & 1) ? 3 : 1;
    uint32_t n = 0, r = 0, c = 0;
    uint8_t *out = NULL;
    char err[256];
    int rc =
        pc_data_parse_idx(data + 1, size - 1, kind, "fuzz", &n, &r, &c, &out, err, sizeof(err));
    if (rc != PC_OK) {
        if (out)
            abort();
        return 0;
    }
    size_t want = (size_t)n * (kind == 3 ? (size_t)r * c : 1);
    if (size - 1 != 4 + 4 * (size_t)kind + want)
        abort();
    volatile uint8_t sink = want ? out[want - 1] : 0; /* touch the last byte (ASan checks) */
    (void)sink;
    free(out);
    return 0;
}
