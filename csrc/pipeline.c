/* Micro-batch pipeline schedule (see pipeline.h and pyaccel/kernels/reference_pipeline.py). */
#include <stdint.h>
#include "pipeline.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void pyaccel_micro_batch_rounds(int64_t *finish, int64_t *stage_free, int64_t *link_free,
                                const int64_t *occ, const int64_t *busy, const int64_t *lat,
                                int64_t n_micro, int64_t n_stages, int64_t rounds)
{
    for (int64_t s = 0; s < n_stages; s++) {
        stage_free[s] = 0;
        link_free[s] = 0;
    }
    for (int64_t r = 0; r < rounds; r++) {
        for (int64_t m = 0; m < n_micro; m++) {
            int64_t t = r > 0 ? finish[(r - 1) * n_micro + m] : 0;
            for (int64_t s = 0; s < n_stages; s++) {
                int64_t k = m * n_stages + s;
                if (s > 0 || r > 0) { /* into stage 0 only when looping back */
                    int64_t start = max64(t, link_free[s]);
                    link_free[s] = start + busy[k];
                    t = link_free[s] + lat[k];
                }
                int64_t start = max64(t, stage_free[s]);
                stage_free[s] = start + occ[k];
                t = stage_free[s];
            }
            finish[r * n_micro + m] = t;
        }
    }
}
