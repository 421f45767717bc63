/* LPU static-order schedules (see lpu.h and pyaccel/kernels/reference_lpu.py). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

/* A fragment's schedule depends only on the state it starts from: every resource's free cycle
 * and the previous fragment's output cycle x. When every instruction of the fragment waits for
 * a dependency or a resource, each cycle it computes is a max of state values plus constants
 * (durations and latencies are never negative, checks.py, so the max's floor of cycle 0 never
 * decides), so the same state moved by c cycles gives every cycle moved by c. A program's fragments are
 * therefore memoised by (fragment, each resource's free cycle - x): a hit gives
 * the fragment's output, latest result, marked starts and resources' free cycles, all relative
 * to x, without scheduling its instructions. Stage programs that differ only in an attention
 * op's length reach the same relative states after it, so most fragments hit. */
typedef struct {
    int64_t *keys;  /* per entry: fragment, rel free[n_res] */
    int64_t *vals;  /* per entry: out rel, latest result rel, marks at, rel free[n_res] */
    int64_t *marks; /* marked starts rel x, the entries' runs end to end */
    int64_t *table; /* open addressing: entry + 1, 0 empty */
    int64_t n_entries, cap_entries, n_marks, cap_marks, mask, n_res;
} FragMemo;

static uint64_t memo_hash(const int64_t *key, int64_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (int64_t k = 0; k < n; k++) {
        h = (h ^ (uint64_t)key[k]) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 29;
    }
    return h;
}

/* The table slot holding key's entry, or the empty slot it would take. */
static int64_t memo_slot(const FragMemo *m, const int64_t *key)
{
    int64_t w = 1 + m->n_res;
    int64_t slot = (int64_t)(memo_hash(key, w) & (uint64_t)m->mask);
    for (;;) {
        int64_t e = m->table[slot];
        if (e == 0) return slot;
        const int64_t *k = m->keys + (e - 1) * w;
        int64_t q = 0;
        while (q < w && k[q] == key[q]) q++;
        if (q == w) return slot;
        slot = (slot + 1) & m->mask;
    }
}

static int memo_open(FragMemo *m, int64_t n_res)
{
    FragMemo z = {0};
    *m = z;
    m->n_res = n_res;
    m->cap_entries = 256;
    m->cap_marks = 1024;
    m->mask = 2 * m->cap_entries - 1;
    m->keys = malloc(sizeof(int64_t) * (size_t)(m->cap_entries * (1 + n_res)));
    m->vals = malloc(sizeof(int64_t) * (size_t)(m->cap_entries * (3 + n_res)));
    m->marks = malloc(sizeof(int64_t) * (size_t)m->cap_marks);
    m->table = calloc((size_t)(m->mask + 1), sizeof(int64_t));
    return m->keys && m->vals && m->marks && m->table;
}

static void memo_close(FragMemo *m)
{
    free(m->keys);
    free(m->vals);
    free(m->marks);
    free(m->table);
}

/* Room for one more entry with n_marks marks (the table kept at most half full); 0 when memory
 * ran out (the memo is then left as it was, and the caller stops using it). */
static int memo_room(FragMemo *m, int64_t n_marks)
{
    if (m->n_marks + n_marks > m->cap_marks) {
        int64_t cap = m->cap_marks;
        while (m->n_marks + n_marks > cap) cap *= 2;
        int64_t *got = realloc(m->marks, sizeof(int64_t) * (size_t)cap);
        if (!got) return 0;
        m->marks = got;
        m->cap_marks = cap;
    }
    if (m->n_entries < m->cap_entries) return 1;
    int64_t cap = 2 * m->cap_entries, wk = 1 + m->n_res, wv = 3 + m->n_res;
    int64_t *keys = realloc(m->keys, sizeof(int64_t) * (size_t)(cap * wk));
    if (!keys) return 0;
    m->keys = keys;
    int64_t *vals = realloc(m->vals, sizeof(int64_t) * (size_t)(cap * wv));
    if (!vals) return 0;
    m->vals = vals;
    int64_t *table = calloc((size_t)(2 * cap), sizeof(int64_t));
    if (!table) return 0;
    free(m->table);
    m->table = table;
    m->mask = 2 * cap - 1;
    m->cap_entries = cap;
    for (int64_t e = 0; e < m->n_entries; e++)
        m->table[memo_slot(m, m->keys + e * wk)] = e + 1;
    return 1;
}

/* Every instruction of fragment f has a dependency or a resource (see FragMemo). */
static int frag_shiftable(int64_t f, const int64_t *frag_ptr, const int64_t *resource,
                          const int64_t *dep_ptr)
{
    for (int64_t p = frag_ptr[f]; p < frag_ptr[f + 1]; p++)
        if (resource[p] < 0 && dep_ptr[p] == dep_ptr[p + 1]) return 0;
    return 1;
}

void pyaccel_lpu_fragment_schedule(int64_t *cycles, int64_t *marked, int64_t *ready_scratch,
                                   int64_t *free_scratch, int64_t *memo_hits,
                                   const int64_t *resource, const int64_t *duration,
                                   const int64_t *latency, const int64_t *dep_ptr,
                                   const int64_t *dep_idx, const int64_t *frag_ptr,
                                   const int64_t *frag_out, const int64_t *mark_ptr,
                                   const int64_t *mark_idx, const int64_t *seq_ptr,
                                   const int64_t *seq, int64_t n_frags, int64_t n_programs,
                                   int64_t n_resources)
{
    int64_t m = 0; /* marked starts written */
    int64_t wk = 1 + n_resources, wv = 3 + n_resources;
    FragMemo memo;
    int64_t *key = malloc(sizeof(int64_t) * (size_t)wk);
    signed char *shift = calloc((size_t)n_frags + 1, 1); /* 0 not yet known, 1 yes, 2 no */
    int use_memo = memo_open(&memo, n_resources) && key && shift;
    *memo_hits = 0;
    for (int64_t s = 0; s < n_programs; s++) {
        /* ready_scratch holds one program's ready cycles, from its first instruction (it stays
         * in cache); a start is ready_scratch - latency - duration, so none is stored */
        int64_t base = 0, prev_out = -1, done = 0, i = 0;
        for (int64_t r = 0; r < n_resources; r++) free_scratch[r] = 0;
        for (int64_t k = seq_ptr[s]; k < seq_ptr[s + 1]; k++) {
            int64_t f = seq[k], lo = frag_ptr[f], hi = frag_ptr[f + 1];
            int64_t x = prev_out < 0 ? 0 : ready_scratch[prev_out], slot = -1;
            if (use_memo && !shift[f])
                shift[f] = frag_shiftable(f, frag_ptr, resource, dep_ptr) ? 1 : 2;
            if (use_memo && shift[f] == 1) {
                key[0] = f; /* a program's first fragment: x = 0, every resource free at 0 */
                for (int64_t r = 0; r < n_resources; r++) key[1 + r] = free_scratch[r] - x;
                slot = memo_slot(&memo, key);
                int64_t e = memo.table[slot];
                if (e) { /* this fragment from this relative state before: moved to x */
                    const int64_t *v = memo.vals + (e - 1) * wv;
                    i += hi - lo;
                    ready_scratch[base + frag_out[f]] = x + v[0];
                    done = max64(done, x + v[1]);
                    for (int64_t q = 0; q < mark_ptr[f + 1] - mark_ptr[f]; q++)
                        marked[m++] = x + memo.marks[v[2] + q];
                    for (int64_t r = 0; r < n_resources; r++) free_scratch[r] = x + v[3 + r];
                    prev_out = base + frag_out[f];
                    base = i;
                    (*memo_hits)++;
                    continue;
                }
            }
            /* the fragment's latest result; x (its input, or 0) is never past the program's */
            int64_t latest = x, m0 = m;
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
                latest = max64(latest, ready_scratch[i]);
            }
            done = max64(done, latest);
            for (int64_t q = mark_ptr[f]; q < mark_ptr[f + 1]; q++) {
                int64_t p = lo + mark_idx[q];
                marked[m++] = ready_scratch[base + mark_idx[q]] - latency[p] - duration[p];
            }
            if (slot >= 0 && !memo_room(&memo, m - m0)) use_memo = 0;
            if (slot >= 0 && use_memo) { /* remember it, relative to x */
                int64_t e = memo.n_entries++;
                int64_t *v = memo.vals + e * wv;
                for (int64_t q = 0; q < wk; q++) memo.keys[e * wk + q] = key[q];
                v[0] = ready_scratch[base + frag_out[f]] - x;
                v[1] = latest - x;
                v[2] = memo.n_marks;
                for (int64_t r = 0; r < n_resources; r++) v[3 + r] = free_scratch[r] - x;
                for (int64_t q = m0; q < m; q++) memo.marks[memo.n_marks++] = marked[q] - x;
                memo.table[memo_slot(&memo, key)] = e + 1; /* the table may have grown */
            }
            prev_out = base + frag_out[f];
            base = i;
        }
        cycles[s] = done;
    }
    memo_close(&memo);
    free(key);
    free(shift);
}
