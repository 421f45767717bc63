/* Wafer mesh engine (see mesh.h and pyaccel/kernels/reference_mesh.py for the semantics). */
#include <stdint.h>
#include "mesh.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t pyaccel_mesh_run(int64_t *head, int64_t *tail, int64_t *busy, int64_t *pe_free,
                         int64_t *link_free, const int64_t *task_pe, const int64_t *task_setup,
                         const int64_t *task_stream, const int64_t *task_nwav,
                         const int64_t *dep_ptr, const int64_t *dep_idx, const int64_t *path_ptr,
                         const int64_t *path_link, const int64_t *link_lat, int64_t n_tasks,
                         int64_t n_links, int64_t n_pes, int64_t pass_lat)
{
    for (int64_t p = 0; p < n_pes; p++)
        pe_free[p] = 0;
    for (int64_t l = 0; l < n_links; l++) {
        link_free[l] = 0;
        busy[l] = 0;
    }
    for (int64_t i = 0; i < n_tasks; i++) {
        int64_t dep_head = 0, dep_tail = 0, start, src_tail;
        int64_t n_deps = dep_ptr[i + 1] - dep_ptr[i];
        for (int64_t j = dep_ptr[i]; j < dep_ptr[i + 1]; j++) {
            int64_t d = dep_idx[j];
            if (d < 0 || d >= i)
                return -1; /* dependencies must come earlier */
            dep_head = max64(dep_head, head[d]);
            dep_tail = max64(dep_tail, tail[d]);
        }
        int64_t pe = task_pe[i];
        if (pe >= n_pes)
            return -1;
        if (pe < 0) { /* router forward */
            start = dep_head;
            src_tail = dep_tail;
        } else if (task_stream[i] && n_deps > 0) {
            start = max64(pe_free[pe] + task_setup[i], dep_head + pass_lat);
            src_tail = dep_tail + pass_lat;
        } else {
            start = max64(pe_free[pe], dep_tail) + task_setup[i];
            src_tail = start;
        }
        if (pe >= 0)
            pe_free[pe] = start;
        if (path_ptr[i + 1] == path_ptr[i]) {
            head[i] = start;
            tail[i] = max64(start, src_tail);
            continue;
        }
        int64_t n = task_nwav[i], t_head = start, t_tail = src_tail;
        for (int64_t j = path_ptr[i]; j < path_ptr[i + 1]; j++) {
            int64_t link = path_link[j];
            if (link < 0 || link >= n_links)
                return -1;
            int64_t h_in = max64(t_head, link_free[link]);
            int64_t tail_in = max64(h_in + n - 1, t_tail);
            link_free[link] = tail_in + 1;
            busy[link] += tail_in + 1 - h_in;
            t_head = h_in + link_lat[link];
            t_tail = tail_in + link_lat[link];
        }
        head[i] = t_head;
        tail[i] = t_tail;
    }
    return 0;
}
