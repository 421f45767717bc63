/* Micro-batch pipeline schedule (see pipeline.h and pyaccel/kernels/reference_pipeline.py). */
#include <stdint.h>
#include <stdlib.h>
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

/* The state a round leaves (each stage's and link's free time, booked intervals), kept to see
 * whether the round k later leaves the same state shifted in time. */
typedef struct {
    int64_t *stage_free, *link_free, *n_booked, *bs, *be;
    int64_t round, k; /* the round it was kept after, compared k rounds later */
    int have;         /* a state is kept */
} snapshot;

/* cycles of up to this many rounds are recognised (longer ones run all the rounds asked) */
#define SETTLE_ROUNDS 8

/* Whether the state now is the kept one shifted by period cycles. */
static int shifted(const snapshot *k, const int64_t *stage_free, const int64_t *link_free,
                   const int64_t *n_booked, const int64_t *bs, const int64_t *be, int64_t cap,
                   int64_t n_stages, int64_t period)
{
    for (int64_t s = 0; s < n_stages; s++) {
        if (stage_free[s] != k->stage_free[s] + period || link_free[s] != k->link_free[s] + period ||
            n_booked[s] != k->n_booked[s])
            return 0;
        for (int64_t i = 0; i < n_booked[s]; i++)
            if (bs[s * cap + i] != k->bs[s * cap + i] + period ||
                be[s * cap + i] != k->be[s * cap + i] + period)
                return 0;
    }
    return 1;
}

static void keep(snapshot *k, const int64_t *stage_free, const int64_t *link_free,
                 const int64_t *n_booked, const int64_t *bs, const int64_t *be, int64_t cap,
                 int64_t n_stages)
{
    memcpy(k->stage_free, stage_free, (size_t)n_stages * sizeof(int64_t));
    memcpy(k->link_free, link_free, (size_t)n_stages * sizeof(int64_t));
    memcpy(k->n_booked, n_booked, (size_t)n_stages * sizeof(int64_t));
    for (int64_t s = 0; s < n_stages; s++) {
        memcpy(k->bs + s * cap, bs + s * cap, (size_t)n_booked[s] * sizeof(int64_t));
        memcpy(k->be + s * cap, be + s * cap, (size_t)n_booked[s] * sizeof(int64_t));
    }
    k->have = 1;
}

/* Whether every micro-batch's finish moved by the same cycles from round r - k to round r; that
 * shift in *moved. */
static int moved_alike(const int64_t *finish, int64_t n_micro, int64_t r, int64_t k,
                       int64_t *moved)
{
    const int64_t *now = finish + r * n_micro, *then = now - k * n_micro;
    *moved = now[0] - then[0];
    for (int64_t m = 1; m < n_micro; m++)
        if (now[m] - then[m] != *moved)
            return 0;
    return 1;
}

/* After round r. The rounds are max-plus in the times (shifting every time shifts the result),
 * so when the state is the state k rounds before shifted by some cycles (every micro-batch's
 * finish, every stage's and link's free time, every booked window), every later round is the
 * round k before it shifted alike: fill finish so and return 1. The state is kept only when
 * the finishes of round r moved alike from some round r - k (k up to SETTLE_ROUNDS), and
 * compared k rounds later. */
static int settled(snapshot *kept, int64_t *finish, const int64_t *stage_free,
                   const int64_t *link_free, const int64_t *n_booked, const int64_t *bs,
                   const int64_t *be, int64_t cap, int64_t n_micro, int64_t n_stages, int64_t r,
                   int64_t rounds)
{
    int64_t moved;
    if (kept->have && r == kept->round + kept->k) {
        int64_t k = kept->k;
        if (moved_alike(finish, n_micro, r, k, &moved) &&
            shifted(kept, stage_free, link_free, n_booked, bs, be, cap, n_stages, moved)) {
            for (int64_t rr = r + 1; rr < rounds; rr++)
                for (int64_t m = 0; m < n_micro; m++)
                    finish[rr * n_micro + m] = finish[(rr - k) * n_micro + m] + moved;
            return 1;
        }
        kept->have = 0;
    }
    if (kept->have)
        return 0;
    for (int64_t k = 1; k <= SETTLE_ROUNDS && r - k >= 1; k++)
        if (moved_alike(finish, n_micro, r, k, &moved)) {
            keep(kept, stage_free, link_free, n_booked, bs, be, cap, n_stages);
            kept->round = r;
            kept->k = k;
            return 0;
        }
    return 0;
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
    int64_t status = 0;
    snapshot kept = {0};
    int64_t *mem = malloc((size_t)(3 + 2 * cap) * (size_t)n_stages * sizeof(int64_t));
    if (!mem)
        return -2;
    kept.stage_free = mem;
    kept.link_free = mem + n_stages;
    kept.n_booked = mem + 2 * n_stages;
    kept.bs = mem + 3 * n_stages;
    kept.be = kept.bs + cap * n_stages;
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
                        if (t < 0) {
                            status = -1;
                            goto done;
                        }
                    }
                    t += lat[k];
                }
                int64_t start = max64(t, stage_free[s]);
                stage_free[s] = start + occ[k];
                t = stage_free[s];
                if (win_ptr[k + 1] > win_ptr[k])
                    forget(sb, se, n_booked + s, link_free[s]);
                int64_t j0 = win_ptr[k], count = win_ptr[k + 1] - j0, n = n_booked[s];
                if (n + count > cap) {
                    status = -1;
                    goto done;
                }
                for (int64_t j = 0; j < count; j++) {
                    sb[n + j] = start + win_start[j0 + j];
                    se[n + j] = start + win_end[j0 + j];
                }
                n_booked[s] = n + count;
            }
            finish[r * n_micro + m] = t;
        }
        /* from the third round on (rounds 1, 2 ... follow one rule; round 0 has no loop back) */
        if (r >= 2 && settled(&kept, finish, stage_free, link_free, n_booked, bs, be, cap,
                              n_micro, n_stages, r, rounds))
            break;
    }
done:
    free(mem);
    return status;
}
