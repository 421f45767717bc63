/* Micro-batch pipeline schedule (see pipeline.h and pyaccel/kernels/reference_pipeline.py). */
#include <stdint.h>
#include <string.h>
#include "pipeline.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Book len cycles at the first gap from earliest among the n sorted, disjoint intervals
 * (bs, be) after dropping those ending by before; returns the booking's end, or -1 when the
 * cap intervals are full. */
/* Drop the booked intervals ending by before (no later crossing reaches back to them). */
static void forget(int64_t *bs, int64_t *be, int64_t *n, int64_t before)
{
    int64_t drop = 0;
    while (drop < *n && be[drop] <= before)
        drop++;
    if (drop) {
        memmove(bs, bs + drop, (size_t)(*n - drop) * sizeof(int64_t));
        memmove(be, be + drop, (size_t)(*n - drop) * sizeof(int64_t));
        *n -= drop;
    }
}

static int64_t book_first_fit(int64_t *bs, int64_t *be, int64_t *n, int64_t cap,
                              int64_t earliest, int64_t len, int64_t before)
{
    forget(bs, be, n, before);
    if (*n >= cap)
        return -1;
    int64_t x = earliest, at = 0;
    for (int64_t i = 0; i < *n; i++) {
        if (be[i] <= x) {
            at++;
            continue;
        }
        if (bs[i] >= x + len)
            break;
        x = be[i];
        at++;
    }
    memmove(bs + at + 1, bs + at, (size_t)(*n - at) * sizeof(int64_t));
    memmove(be + at + 1, be + at, (size_t)(*n - at) * sizeof(int64_t));
    bs[at] = x;
    be[at] = x + len;
    *n += 1;
    return x + len;
}

int64_t pyaccel_micro_batch_rounds(int64_t *finish, int64_t *stage_free, int64_t *link_free,
                                   int64_t *n_booked, int64_t *bs, int64_t *be, int64_t cap,
                                   const int64_t *occ, const int64_t *busy, const int64_t *lat,
                                   const int64_t *roff, const int64_t *rbusy,
                                   const int64_t *win_ptr, const int64_t *win_start,
                                   const int64_t *win_end, int64_t n_micro, int64_t n_stages,
                                   int64_t rounds)
{
    for (int64_t s = 0; s < n_stages; s++) {
        stage_free[s] = 0;
        link_free[s] = 0;
        n_booked[s] = 0;
    }
    for (int64_t r = 0; r < rounds; r++) {
        for (int64_t m = 0; m < n_micro; m++) {
            int64_t t = r > 0 ? finish[(r - 1) * n_micro + m] : 0;
            for (int64_t s = 0; s < n_stages; s++) {
                int64_t k = m * n_stages + s;
                int64_t *sb = bs + s * cap, *se = be + s * cap;
                if (s > 0 || r > 0) { /* into stage 0 only when looping back */
                    int64_t start = max64(t, link_free[s]);
                    link_free[s] = start + busy[k];
                    t = link_free[s];
                    if (rbusy[k]) {
                        t = book_first_fit(sb, se, n_booked + s, cap, start + roff[k], rbusy[k],
                                           start);
                        if (t < 0)
                            return -1;
                    }
                    t += lat[k];
                }
                int64_t start = max64(t, stage_free[s]);
                stage_free[s] = start + occ[k];
                t = stage_free[s];
                if (win_ptr[k + 1] > win_ptr[k])
                    forget(sb, se, n_booked + s, link_free[s]);
                for (int64_t j = win_ptr[k]; j < win_ptr[k + 1]; j++) {
                    if (n_booked[s] >= cap)
                        return -1;
                    sb[n_booked[s]] = start + win_start[j];
                    se[n_booked[s]] = start + win_end[j];
                    n_booked[s] += 1;
                }
            }
            finish[r * n_micro + m] = t;
        }
    }
    return 0;
}
