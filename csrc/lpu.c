/* LPU static-order schedules (see lpu.h and pyaccel/kernels/reference_lpu.py). */
#include <math.h>
#include <stdint.h>
#include "pyaccel_kernels.h"
#include "lpu.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void pyaccel_lpu_list_schedule(int64_t *start, int64_t *free_scratch, const int64_t *resource,
                               const int64_t *duration, const int64_t *latency,
                               const int64_t *dep_ptr, const int64_t *dep_idx, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t ready = 0;
        for (int64_t q = dep_ptr[i]; q < dep_ptr[i + 1]; q++) {
            int64_t j = dep_idx[q];
            ready = max64(ready, start[j] + duration[j] + latency[j]);
        }
        int64_t r = resource[i];
        if (r >= 0) {
            ready = max64(ready, free_scratch[r]);
            free_scratch[r] = ready + duration[i];
        }
        start[i] = ready;
    }
}

/* ceil(bytes / rate) as the twins compute it: one IEEE double division, then ceil. */
static int64_t serial_cycles(int64_t n_bytes, double bytes_per_cycle)
{
    return (int64_t)ceil((double)n_bytes / bytes_per_cycle);
}

void pyaccel_lpu_link_schedule(int64_t *start, int64_t *end, int64_t *arrive,
                               int64_t *free_scratch, const int64_t *link, const int64_t *n_bytes,
                               const int8_t *cut_through, const int64_t *dep_ptr,
                               const int64_t *dep_idx, const double *link_bytes_per_cycle,
                               const int64_t *link_latency, int64_t vector_bytes, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t lk = link[i], ready = 0, floor_end = 0;
        for (int64_t q = dep_ptr[i]; q < dep_ptr[i + 1]; q++) {
            int64_t j = dep_idx[q];
            if (cut_through[i]) { /* relaying a stream: j's first vector gates the start */
                int64_t lj = link[j];
                int64_t first = n_bytes[j] < vector_bytes ? n_bytes[j] : vector_bytes;
                int64_t t = start[j] + serial_cycles(first, link_bytes_per_cycle[lj]) +
                            link_latency[lj];
                ready = max64(ready, t);
                floor_end = max64(floor_end, arrive[j]);
            } else {
                ready = max64(ready, arrive[j]);
            }
        }
        int64_t s = max64(ready, free_scratch[lk]);
        int64_t e = max64(s + serial_cycles(n_bytes[i], link_bytes_per_cycle[lk]), floor_end);
        start[i] = s;
        end[i] = e;
        arrive[i] = e + link_latency[lk];
        free_scratch[lk] = e;
    }
}

void pyaccel_lpu_fragment_schedule(int64_t *cycles, int64_t *marked, int64_t *ready_scratch,
                                   int64_t *free_scratch, const int64_t *resource,
                                   const int64_t *duration, const int64_t *latency,
                                   const int64_t *dep_ptr, const int64_t *dep_idx,
                                   const int64_t *frag_ptr, const int64_t *frag_out,
                                   const int64_t *mark_ptr, const int64_t *mark_idx,
                                   const int64_t *seq_ptr, const int64_t *seq, int64_t n_programs,
                                   int64_t n_resources)
{
    int64_t m = 0; /* marked starts written */
    for (int64_t s = 0; s < n_programs; s++) {
        /* ready_scratch holds one program's ready cycles, from its first instruction (it stays
         * in cache); a start is ready_scratch - latency - duration, so none is stored */
        int64_t base = 0, prev_out = -1, done = 0, i = 0;
        for (int64_t r = 0; r < n_resources; r++) free_scratch[r] = 0;
        for (int64_t k = seq_ptr[s]; k < seq_ptr[s + 1]; k++) {
            int64_t f = seq[k], lo = frag_ptr[f], hi = frag_ptr[f + 1];
            for (int64_t p = lo; p < hi; p++, i++) {
                int64_t ready = 0;
                for (int64_t q = dep_ptr[p]; q < dep_ptr[p + 1]; q++) {
                    int64_t d = dep_idx[q];
                    ready = max64(ready, ready_scratch[d == -2 ? prev_out : base + d]);
                }
                int64_t r = resource[p];
                if (r >= 0) {
                    ready = max64(ready, free_scratch[r]);
                    free_scratch[r] = ready + duration[p];
                }
                ready_scratch[i] = ready + duration[p] + latency[p];
                done = max64(done, ready_scratch[i]);
            }
            for (int64_t q = mark_ptr[f]; q < mark_ptr[f + 1]; q++) {
                int64_t p = lo + mark_idx[q];
                marked[m++] = ready_scratch[base + mark_idx[q]] - latency[p] - duration[p];
            }
            prev_out = base + frag_out[f];
            base = i;
        }
        cycles[s] = done;
    }
}
