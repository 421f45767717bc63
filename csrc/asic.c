/* ASIC spatial pipeline (see asic.h and pyaccel/kernels/reference_asic.py). Cycles throughout. */
#include <stdint.h>
#include "pyaccel_kernels.h"
#include "asic.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void pyaccel_asic_pipeline(int64_t *finish, int64_t *starts, int64_t *unit_free, int64_t *ready,
                           const int64_t *occ_base, const int64_t *occ_cols,
                           const int64_t *occ_col_of, int64_t n_cols, const int64_t *lat,
                           const int64_t *res,
                           int64_t res_width, const int8_t *record, const int64_t *ex_layer,
                           const int64_t *picks, int64_t n_layers, int64_t top_k,
                           const int64_t *ex_unit, int64_t n_experts, int64_t n_steps,
                           int64_t n_stages, int64_t n_users, int64_t group, int64_t tail)
{
    int64_t r = 0;
    for (int64_t t = 0; t < n_steps; t++) {
        for (int64_t u = 0; u < n_users; u++) {
            int64_t tt = ready[u - u % group];
            /* row j of a group is j positions on from its step's first (its context j longer) */
            const int64_t *cols = occ_cols + (t + u % group) * n_cols;
            /* a group's rows but its last leave before the tail stages (its sampled row's) */
            int64_t stop = u % group == group - 1 ? n_stages : tail;
            if (record[t])
                for (int64_t s = stop; s < n_stages; s++)
                    starts[(r * n_users + u) * n_stages + s] = -1;
            for (int64_t s = 0; s < stop; s++) {
                int64_t layer = ex_layer[s], start = tt;
                int64_t busy = occ_col_of[s] < 0 ? occ_base[s] : cols[occ_col_of[s]];
                const int64_t *pick = picks; /* the row's picks in this stage's MoE layer */
                if (layer >= 0)
                    pick = picks + ((t * n_users + u) * n_layers + layer) * top_k;
                /* the stage starts when every unit it takes is free */
                if (layer < 0) {
                    for (int64_t j = 0; j < res_width; j++) {
                        int64_t unit = res[s * res_width + j];
                        if (unit >= 0)
                            start = max64(start, unit_free[unit]);
                    }
                } else {
                    for (int64_t j = 0; j < top_k; j++) /* experts sharing a unit: same max */
                        start = max64(start, unit_free[ex_unit[s * n_experts + pick[j]]]);
                }
                if (record[t])
                    starts[(r * n_users + u) * n_stages + s] = start;
                if (layer < 0) {
                    for (int64_t j = 0; j < res_width; j++) {
                        int64_t unit = res[s * res_width + j];
                        if (unit >= 0)
                            unit_free[unit] = start + busy;
                    }
                } else {
                    for (int64_t j = 0; j < top_k; j++)
                        unit_free[ex_unit[s * n_experts + pick[j]]] = start + busy;
                }
                tt = start + busy + lat[s];
            }
            finish[t * n_users + u] = tt;
        }
        for (int64_t u = 0; u < n_users; u += group) { /* a sequence waits for its last row */
            int64_t last = finish[t * n_users + u];
            for (int64_t v = u + 1; v < u + group && v < n_users; v++)
                last = max64(last, finish[t * n_users + v]);
            ready[u] = last;
        }
        if (record[t])
            r++;
    }
}
