/* Interval arithmetic over trace events (cycles). */
#include <stdint.h>
#include "pyaccel_kernels.h"

#ifndef PYACCEL_SRC_HASH
#define PYACCEL_SRC_HASH "unknown"
#endif

const char *pyaccel_src_hash(void) { return PYACCEL_SRC_HASH; }

int64_t pyaccel_interval_union(const int64_t *starts, const int64_t *ends, int64_t n)
{
    int64_t total = 0, cur_start = 0, cur_end = 0;
    int open = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ends[i] <= starts[i])
            continue; /* empty interval */
        if (!open || starts[i] > cur_end) {
            /* a gap: close the running interval and start a new one */
            if (open)
                total += cur_end - cur_start;
            cur_start = starts[i];
            cur_end = ends[i];
            open = 1;
        } else if (ends[i] > cur_end) {
            cur_end = ends[i];
        }
    }
    if (open)
        total += cur_end - cur_start;
    return total;
}
