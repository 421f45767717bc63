/* MoE router kernels: see routing.h and the NumPy twin pyaccel/kernels/reference_routing.py.
 *
 * Each step draws from numpy.random.default_rng([entropy..., step]): a SeedSequence (pool of 4
 * uint32 words, numpy's hash mixing) seeds a PCG64 (128-bit LCG, XSL-RR output), whose doubles
 * are the top 53 bits of each 64-bit output. Reproducing that stream here keeps every routing
 * bit-identical to the NumPy twin while costing ~1 us a step instead of ~15 us of generator
 * set-up. */
#include <stdint.h>

#include "routing.h"

typedef unsigned __int128 u128;

#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_MULT_L 0xca01f9ddu
#define MIX_MULT_R 0x4973f715u
#define POOL 4
#define MAX_WORDS 64

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= MULT_A;
    value *= *hash_const;
    value ^= value >> 16;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = MIX_MULT_L * x - MIX_MULT_R * y;
    r ^= r >> 16;
    return r;
}

typedef struct {
    u128 state, inc;
} pcg64;

static const u128 PCG_MULT = ((u128)2549297995355413924ULL << 64) + 4865540595714422341ULL;

static void pcg_step(pcg64 *g) { g->state = g->state * PCG_MULT + g->inc; }

static uint64_t pcg_next(pcg64 *g) {
    pcg_step(g);
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((-rot) & 63));
}

static double pcg_double(pcg64 *g) { return (double)(pcg_next(g) >> 11) * (1.0 / 9007199254740992.0); }

/* SeedSequence(words).generate_state(4, uint64) -> PCG64's set_seed(state, inc). */
static void pcg_seed(pcg64 *g, const uint32_t *words, int64_t n_words) {
    uint32_t pool[POOL], hc = INIT_A;
    for (int i = 0; i < POOL; i++) pool[i] = hashmix(i < n_words ? words[i] : 0u, &hc);
    for (int src = 0; src < POOL; src++)
        for (int dst = 0; dst < POOL; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hc));
    for (int64_t src = POOL; src < n_words; src++)
        for (int dst = 0; dst < POOL; dst++) pool[dst] = mix(pool[dst], hashmix(words[src], &hc));
    uint32_t st[8], hb = INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t d = pool[i % POOL];
        d ^= hb;
        hb *= MULT_B;
        d *= hb;
        d ^= d >> 16;
        st[i] = d;
    }
    uint64_t v[4];
    for (int j = 0; j < 4; j++) v[j] = (uint64_t)st[2 * j] | ((uint64_t)st[2 * j + 1] << 32);
    u128 seed = ((u128)v[0] << 64) | v[1], seq = ((u128)v[2] << 64) | v[3];
    g->state = 0;
    g->inc = (seq << 1) | 1u;
    pcg_step(g);
    g->state += seed;
    pcg_step(g);
}

/* guide[b] (b = 0..GUIDE * n): the first cdf entry above b / (GUIDE * n), a starting point for
 * first_above's walk (a guide table: a few steps a draw instead of a binary search). */
#define GUIDE 4

static void make_guide(int64_t *guide, const double *cdf, int64_t n) {
    int64_t nb = GUIDE * n, i = 0;
    for (int64_t b = 0; b <= nb; b++) {
        double edge = (double)b / (double)nb;
        while (i < n && cdf[i] <= edge) i++;
        guide[b] = i;
    }
}

/* Index of the first cdf entry above u (numpy.searchsorted side="right"), at most n - 1. The
 * walk from any start finds it exactly (cdf never decreases); the guide only makes it short. */
static int64_t first_above(const double *cdf, const int64_t *guide, int64_t n, double u) {
    int64_t b = (int64_t)(u * (double)(GUIDE * n));
    int64_t i = guide[b < GUIDE * n ? b : GUIDE * n];
    while (i > 0 && cdf[i - 1] > u) i--;
    while (i < n && cdf[i] <= u) i++;
    return i < n - 1 ? i : n - 1;
}

static int has(const int32_t *row, int64_t filled, int32_t e) {
    for (int64_t j = 0; j < filled; j++)
        if (row[j] == e) return 1;
    return 0;
}

static void draw_step(int32_t *out, int64_t *filled, int64_t *pend, pcg64 *g,
                      const double *weights, const double *cdf, const int64_t *guide, int64_t n_experts, int64_t n,
                      int64_t k, int64_t rounds) {
    int64_t n_pend = n;
    for (int64_t i = 0; i < n; i++) {
        filled[i] = 0;
        pend[i] = i;
    }
    for (int64_t r = 0; r < rounds && n_pend; r++) {
        int64_t kept = 0;
        for (int64_t p = 0; p < n_pend; p++) {
            int64_t row = pend[p];
            int32_t pick = (int32_t)first_above(cdf, guide, n_experts, pcg_double(g));
            int32_t *o = out + row * k;
            if (!has(o, filled[row], pick)) o[filled[row]++] = pick;
            if (filled[row] < k) pend[kept++] = row;
        }
        n_pend = kept;
    }
    /* rows still short: each iteration, every one draws from the weights left to it */
    while (n_pend) {
        int64_t kept = 0;
        for (int64_t p = 0; p < n_pend; p++) {
            int64_t row = pend[p];
            int32_t *o = out + row * k;
            double total = 0.0;
            for (int64_t e = 0; e < n_experts; e++)
                if (!has(o, filled[row], (int32_t)e)) total += weights[e];
            double u = pcg_double(g) * total, c = 0.0;
            int64_t pick = 0;
            for (int64_t e = 0; e < n_experts; e++) {
                if (!has(o, filled[row], (int32_t)e)) c += weights[e];
                if (c <= u) pick = e + 1;
                else break;
            }
            o[filled[row]++] = (int32_t)(pick < n_experts - 1 ? pick : n_experts - 1);
            if (filled[row] < k) pend[kept++] = row;
        }
        n_pend = kept;
    }
}

void pyaccel_route_draws(int32_t *ranks, int64_t *filled, const uint32_t *entropy,
                         int64_t n_entropy, const int64_t *steps, int64_t n_steps,
                         const double *weights, const double *cdf, int64_t n_experts,
                         int64_t n, int64_t k, int64_t rounds) {
    uint32_t words[MAX_WORDS];
    int64_t *guide = filled + 2 * n;
    make_guide(guide, cdf, n_experts);
    for (int64_t i = 0; i < n_entropy && i < MAX_WORDS - 2; i++) words[i] = entropy[i];
    for (int64_t s = 0; s < n_steps; s++) {
        /* the step's own words, as numpy coerces an integer: 32 bits at a time, 0 -> [0] */
        int64_t m = n_entropy;
        uint64_t t = (uint64_t)steps[s];
        do {
            words[m++] = (uint32_t)t;
            t >>= 32;
        } while (t);
        pcg64 g;
        pcg_seed(&g, words, m);
        draw_step(ranks + s * n * k, filled, filled + n, &g, weights, cdf, guide, n_experts, n, k,
                  rounds);
    }
}

void pyaccel_route_counts(int64_t *hot, int64_t *distinct, int64_t *whole, int64_t *count,
                          int64_t *stamp, int64_t *whole_stamp, const int32_t *picks,
                          int64_t n_steps, int64_t rows, int64_t n_layers, int64_t top_k,
                          const int64_t *spans, int64_t n_spans, int64_t n_experts) {
    int64_t tag = 0;
    /* one span of all the rows (one micro-batch): its distinct experts are the whole step's */
    int all_in_one = n_spans == 1 && spans[0] == 0 && spans[1] == rows;
    for (int64_t e = 0; e < n_experts; e++) stamp[e] = whole_stamp[e] = -1;
    for (int64_t t = 0; t < n_steps; t++) {
        for (int64_t l = 0; l < n_layers; l++) {
            int64_t all = 0, whole_tag = t * n_layers + l;
            for (int64_t s = 0; s < n_spans; s++, tag++) {
                int64_t h = 0, d = 0;
                for (int64_t r = spans[2 * s]; r < spans[2 * s + 1]; r++) {
                    const int32_t *p = picks + ((t * rows + r) * n_layers + l) * top_k;
                    for (int64_t j = 0; j < top_k; j++) {
                        int64_t e = p[j];
                        if (stamp[e] != tag) {
                            stamp[e] = tag;
                            count[e] = 0;
                            d++;
                        }
                        if (++count[e] > h) h = count[e];
                    }
                }
                hot[(t * n_spans + s) * n_layers + l] = h;
                distinct[(t * n_spans + s) * n_layers + l] = d;
            }
            if (all_in_one) {
                whole[t * n_layers + l] = distinct[t * n_layers + l];
                continue;
            }
            for (int64_t r = 0; r < rows; r++) {
                const int32_t *p = picks + ((t * rows + r) * n_layers + l) * top_k;
                for (int64_t j = 0; j < top_k; j++)
                    if (whole_stamp[p[j]] != whole_tag) {
                        whole_stamp[p[j]] = whole_tag;
                        all++;
                    }
            }
            whole[t * n_layers + l] = all;
        }
    }
}
