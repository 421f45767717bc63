/* Packed GEMV, AVX2 two-plane paths (4-bit and 3-bit codes whose table floats end in 16 zero
 * bits): the same order of fp32 operations as gemv.c's header comment states, bit for bit the
 * NumPy twin (pyaccel/kernels/reference_gemv.py). gemv.c chooses the path, lays x out through
 * pyaccel_gemv_planes_x, and splits rows over threads; this file holds only the decoders and
 * their row loops. Compiled to nothing but the shared header off x86 (PYACCEL_X86). */
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* As in gemv.c: -O3 for this file, never contract a*b+c into an FMA. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif
#include "internal/gemv_shared.h"

#if PYACCEL_X86
/* Two planes: a 4-bit table whose floats all end in 16 zero bits (integers to +-8, e2m1: a few
 * significant bits) needs only byte planes 2 and 3. A ymm of codes then carries 32 columns of
 * two rows: the even columns' codes (low nibbles) and the odd ones' (high nibbles) are looked
 * up apart, a byte unpack pairs the planes into each value's upper 16 bits, and a shift (even
 * words) or a mask (odd words) makes the floats. They come out in a fixed order within each 32
 * columns (nib32_column), so x is laid out in that order once per call (x32), and each of four
 * accumulators holds 4 of a row's 16 lanes: every lane adds the same products in the same
 * order as in the byte-plane path. */
#define NIB32 32
enum { UNSCALED, SCALED_32, SCALED_16 }; /* two-plane rows: no blocks, blocks of 32n, of 16 */
/* How far ahead of the codes a row pair reads its next codes into L1 (bytes). The hardware
 * prefetcher alone leaves the two row streams short while this path is nearly compute-bound;
 * 512-1024 bytes (16-32 iterations) gave +15-20 % on a DRAM-sized matrix (Zen 1, 2 threads),
 * 1024 the most. */
#define NIB32_AHEAD_BYTES 768

/* Column (of 32) of float i (of 4) of vector v (of 8), in the order the decode makes them:
 * v / 4 even or odd columns, (v / 2) % 2 their lower or upper 16, v % 2 even or odd words. */
static int nib32_column(int v, int i) {
    int w = v % 4, word = 2 * i + w % 2;
    return v / 4 + 2 * (word + 8 * (w / 2));
}

/* nib32_column of accumulator k's first vector, (k / 2) * 4 + k % 2 (the other is 2 later). */
static int nib32_acc_column(int k, int i) { return nib32_column((k / 2) * 4 + k % 2, i); }

/* Whether a call can take a two-plane path: its n_codes table floats all end in 16 zero bits,
 * blocks of 16 or whole 32s, a tail under 16. */
static int planes_fit(const gemv_args *a, int n_codes) {
    if ((a->block && a->block != LANES && a->block % NIB32) || a->cols % NIB32 >= LANES) return 0;
    for (int c = 0; c < n_codes; c++) {
        uint32_t u;
        memcpy(&u, a->lut + c, 4);
        if (u & 0xFFFFu) return 0;
    }
    return 1;
}

/* x in a two-plane decoder's order (column(v, i): see nib32_column), each 4 columns twice (one
 * per 128-bit half): 2 floats a column. */
static float *planes_x(const gemv_args *a, int (*column)(int, int)) {
    const int64_t whole = a->cols - a->cols % NIB32;
    float *x32 = malloc((size_t)(whole > 0 ? 2 * whole : 1) * sizeof(float));
    if (x32)
        for (int64_t j = 0; j < whole; j += NIB32)
            for (int v = 0; v < 8; v++)
                for (int i = 0; i < 4; i++)
                    x32[2 * j + 8 * v + i] = x32[2 * j + 8 * v + 4 + i] = a->x[j + column(v, i)];
    return x32;
}

/* The block scales of rows sa and sb (one per 128-bit half) for the 32 columns at j, when j
 * starts a block (scaled: SCALED_32 or SCALED_16; sc[1] for columns j + 16.. of blocks of 16);
 * *ib is the next block and *next_block its first column. */
static inline __attribute__((always_inline)) T256 void planes_scales(const gemv_args *a,
                                                                     const float *sa,
                                                                     const float *sb, int64_t j,
                                                                     int64_t *ib,
                                                                     int64_t *next_block,
                                                                     __m256 sc[2],
                                                                     const int scaled) {
    if (!scaled || j != *next_block) return;
    sc[0] = _mm256_setr_m128(_mm_set1_ps(sa[*ib]), _mm_set1_ps(sb[*ib]));
    if (scaled == SCALED_16) /* the upper 16 columns have the next block's scale */
        sc[1] = _mm256_setr_m128(_mm_set1_ps(sa[*ib + 1]), _mm_set1_ps(sb[*ib + 1]));
    *ib += scaled == SCALED_16 ? 2 : 1;
    *next_block += scaled == SCALED_16 ? NIB32 : a->block;
}

/* Each of rows r0.. (nr of them, one per 128-bit half) from the four accumulators of a
 * two-plane path, accumulator k holding vectors k and k + 4 (or + 2, by column's order):
 * lanes by column(k, i) % 16, then the row's tail and lane sum (finish_row). */
static inline __attribute__((always_inline)) T256 void planes_finish(const gemv_args *a,
                                                                     int64_t r0, int nr,
                                                                     const __m256 acc[4],
                                                                     int (*column)(int, int)) {
    const int64_t whole = a->cols - a->cols % NIB32;
    for (int r = 0; r < nr; r++) {
        float lanes[LANES], both[8];
        for (int k = 0; k < 4; k++) {
            _mm256_storeu_ps(both, acc[k]);
            for (int i = 0; i < 4; i++) lanes[column(k, i) % LANES] = both[4 * r + i];
        }
        finish_row(a, r0 + r, lanes, whole);
    }
}

/* The table's planes 2 and 3 for the 32 codes at column j of rows ra and rb (one per 128-bit
 * half): e[0], e[1] the even columns' (low nibbles), e[2], e[3] the odd columns'. */
static inline __attribute__((always_inline)) T256 void nib32_planes(const uint8_t *ra,
                                                                    const uint8_t *rb, int64_t j,
                                                                    const __m256i p2,
                                                                    const __m256i p3,
                                                                    __m256i e[4]) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256i q = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(ra + (j >> 1)))),
        _mm_loadu_si128((const __m128i *)(rb + (j >> 1))), 1);
    __m256i ce = _mm256_and_si256(q, low);
    __m256i co = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
    e[0] = _mm256_shuffle_epi8(p2, ce), e[1] = _mm256_shuffle_epi8(p3, ce);
    e[2] = _mm256_shuffle_epi8(p2, co), e[3] = _mm256_shuffle_epi8(p3, co);
}

/* Rows r0 and r0 + nr - 1 (nr 1 or 2; a single row fills both halves) over their whole 32s,
 * then each row's tail and lane sum (finish_row). The next 32 columns' lookups are issued
 * before this 32's multiplies: in program order, so that Zen 1's small FP scheduler finds
 * independent work (+7-13 % measured against the plain loop). */
static inline __attribute__((always_inline)) T256 void rows_nib32(const gemv_args *a, int64_t r0,
                                                                  const int nr, const __m256i p2,
                                                                  const __m256i p3,
                                                                  const int scaled) {
    const int64_t whole = a->cols - a->cols % NIB32;
    const __m256i upper = _mm256_set1_epi32((int)0xFFFF0000u);
    const uint8_t *ra = a->packed + r0 * a->row_bytes, *rb = ra + (nr - 1) * a->row_bytes;
    const float *sa = a->bscale + r0 * a->n_blocks, *sb = sa + (nr - 1) * a->n_blocks;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    __m256 sc[2] = {_mm256_set1_ps(1.0f), _mm256_set1_ps(1.0f)}; /* columns j.., j + 16.. */
    __m256i e[4];
    if (whole > 0) nib32_planes(ra, rb, 0, p2, p3, e);
    for (int64_t j = 0, ib = 0, next_block = 0; j < whole; j += NIB32) {
        planes_scales(a, sa, sb, j, &ib, &next_block, sc, scaled);
        const float *xj = a->x32 + 2 * j;
        _mm_prefetch((const char *)(ra + (j >> 1) + NIB32_AHEAD_BYTES), _MM_HINT_T0);
        _mm_prefetch((const char *)(rb + (j >> 1) + NIB32_AHEAD_BYTES), _MM_HINT_T0);
        __m256i w[4] = {_mm256_unpacklo_epi8(e[0], e[1]), _mm256_unpackhi_epi8(e[0], e[1]),
                        _mm256_unpacklo_epi8(e[2], e[3]), _mm256_unpackhi_epi8(e[2], e[3])};
        if (j + NIB32 < whole) nib32_planes(ra, rb, j + NIB32, p2, p3, e);
        for (int t = 0; t < 4; t++) { /* vectors 2t and 2t + 1 */
            __m256 v0 = _mm256_castsi256_ps(_mm256_slli_epi32(w[t], 16));
            __m256 v1 = _mm256_castsi256_ps(_mm256_and_si256(w[t], upper));
            if (scaled) { /* vectors of even t: columns j..j + 15; odd t: j + 16..j + 31 */
                __m256 s = scaled == SCALED_16 ? sc[t % 2] : sc[0];
                v0 = _mm256_mul_ps(v0, s);
                v1 = _mm256_mul_ps(v1, s);
            }
            int k = (t / 2) * 2; /* the lower 16 columns' vectors come first */
            acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(v0, _mm256_loadu_ps(xj + 16 * t)));
            acc[k + 1] = _mm256_add_ps(acc[k + 1],
                                       _mm256_mul_ps(v1, _mm256_loadu_ps(xj + 16 * t + 8)));
        }
    }
    planes_finish(a, r0, nr, acc, nib32_acc_column);
}

T256 void pyaccel_gemv_rows_nib32(const gemv_args *a, int64_t r, int64_t r_end) {
    uint8_t b[2][16];
    for (int c = 0; c < 16; c++) {
        uint32_t u;
        memcpy(&u, a->lut + c, 4);
        b[0][c] = (uint8_t)(u >> 16);
        b[1][c] = (uint8_t)(u >> 24);
    }
    __m256i p2 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[0]));
    __m256i p3 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[1]));
    if (a->block == LANES) { /* the scale's multiply compiled in or out, one or two a 32 */
        for (; r + 2 <= r_end; r += 2) rows_nib32(a, r, 2, p2, p3, SCALED_16);
        for (; r < r_end; r++) rows_nib32(a, r, 1, p2, p3, SCALED_16);
    } else if (a->block) {
        for (; r + 2 <= r_end; r += 2) rows_nib32(a, r, 2, p2, p3, SCALED_32);
        for (; r < r_end; r++) rows_nib32(a, r, 1, p2, p3, SCALED_32);
    } else {
        for (; r + 2 <= r_end; r += 2) rows_nib32(a, r, 2, p2, p3, UNSCALED);
        for (; r < r_end; r++) rows_nib32(a, r, 1, p2, p3, UNSCALED);
    }
}

/* 3-bit codes through two planes: an 8-entry table whose floats end in 16 zero bits (hc1's
 * integers -4..3) fits one byte shuffle: entries 0-7 hold plane 2, 8-15 plane 3. 32 codes of
 * a row are 12 bytes (one 128-bit half per row, as above); a byte shuffle spreads code m of
 * each 8 (bits 3m..3m+2 of 3 bytes) into a word with its two bytes, a multiply by
 * 2^(13 - 3m % 8) lifts it to the word's top 3 bits, and a high multiply by 0x0808 brings it
 * down into both bytes (c * 0x0101), the upper one with bit 3 set: the table's word is then
 * the value's upper 16 bits, made a float by a shift or a mask as above. */

/* Column (of 32) of float i (of 4) of vector v (of 8): v / 2 the codes' group of 8, v % 2
 * even or odd words. */
static int tri32_column(int v, int i) { return 8 * (v / 2) + 2 * i + v % 2; }

/* The 12 code bytes (and 4 more, unused) at byte off of rows ra and rb, one per 128-bit half;
 * near a row's end a copy, so nothing past the buffer is read. */
static inline __attribute__((always_inline)) T256 __m256i tri32_bytes(const uint8_t *ra,
                                                                      const uint8_t *rb,
                                                                      int64_t off,
                                                                      int64_t row_bytes) {
    if (off + 16 <= row_bytes)
        return _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(ra + off))),
            _mm_loadu_si128((const __m128i *)(rb + off)), 1);
    uint8_t b[2][16] = {{0}};
    memcpy(b[0], ra + off, (size_t)(row_bytes - off));
    memcpy(b[1], rb + off, (size_t)(row_bytes - off));
    return _mm256_loadu_si256((const __m256i *)b);
}

typedef struct {
    __m256i table, spread[4], lift; /* lift: 2^(13 - 3m % 8) for word m */
} tri32_consts;

static inline __attribute__((always_inline)) T256 void rows_tri32(const gemv_args *a, int64_t r0,
                                                                  const int nr,
                                                                  const tri32_consts *k,
                                                                  const int scaled) {
    const int64_t whole = a->cols - a->cols % NIB32;
    const __m256i upper = _mm256_set1_epi32((int)0xFFFF0000u), top3 = _mm256_set1_epi16(-8192);
    const __m256i down = _mm256_set1_epi16(0x0808), plane3 = _mm256_set1_epi16(0x0800);
    const uint8_t *ra = a->packed + r0 * a->row_bytes, *rb = ra + (nr - 1) * a->row_bytes;
    const float *sa = a->bscale + r0 * a->n_blocks, *sb = sa + (nr - 1) * a->n_blocks;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    __m256 sc[2] = {_mm256_set1_ps(1.0f), _mm256_set1_ps(1.0f)}; /* columns j.., j + 16.. */
    for (int64_t j = 0, ib = 0, next_block = 0; j < whole; j += NIB32) {
        planes_scales(a, sa, sb, j, &ib, &next_block, sc, scaled);
        const float *xj = a->x32 + 2 * j;
        const int64_t off = 3 * (j >> 3);
        _mm_prefetch((const char *)(ra + off + NIB32_AHEAD_BYTES), _MM_HINT_T0);
        _mm_prefetch((const char *)(rb + off + NIB32_AHEAD_BYTES), _MM_HINT_T0);
        __m256i q = tri32_bytes(ra, rb, off, a->row_bytes);
        for (int g = 0; g < 4; g++) { /* codes 8g..8g + 7: vectors 2g (even) and 2g + 1 */
            __m256i word = _mm256_shuffle_epi8(q, k->spread[g]);
            __m256i top = _mm256_and_si256(_mm256_mullo_epi16(word, k->lift), top3);
            __m256i ix = _mm256_or_si256(_mm256_mulhi_epu16(top, down), plane3);
            __m256i f = _mm256_shuffle_epi8(k->table, ix);
            __m256 v0 = _mm256_castsi256_ps(_mm256_slli_epi32(f, 16));
            __m256 v1 = _mm256_castsi256_ps(_mm256_and_si256(f, upper));
            if (scaled) { /* groups 0, 1: columns j..j + 15; 2, 3: j + 16..j + 31 */
                __m256 s = scaled == SCALED_16 ? sc[g / 2] : sc[0];
                v0 = _mm256_mul_ps(v0, s);
                v1 = _mm256_mul_ps(v1, s);
            }
            int kk = 2 * (g % 2); /* groups 0 and 2 (columns c, c + 16) share a lane */
            acc[kk] = _mm256_add_ps(acc[kk], _mm256_mul_ps(v0, _mm256_loadu_ps(xj + 16 * g)));
            acc[kk + 1] = _mm256_add_ps(acc[kk + 1],
                                        _mm256_mul_ps(v1, _mm256_loadu_ps(xj + 16 * g + 8)));
        }
    }
    planes_finish(a, r0, nr, acc, tri32_column); /* accumulator k: vectors k and k + 4 */
}

T256 void pyaccel_gemv_rows_tri32(const gemv_args *a, int64_t r, int64_t r_end) {
    uint8_t table[16], spread[4][32];
    int16_t lift[16];
    for (int c = 0; c < 8; c++) {
        uint32_t u;
        memcpy(&u, a->lut + c, 4);
        table[c] = (uint8_t)(u >> 16), table[8 + c] = (uint8_t)(u >> 24);
    }
    for (int h = 0; h < 2; h++) /* both 128-bit halves alike */
        for (int m = 0; m < 8; m++) {
            for (int g = 0; g < 4; g++) { /* code m of group g: bit 24g + 3m */
                int byte = 3 * g + 3 * m / 8;
                spread[g][16 * h + 2 * m] = (uint8_t)byte;
                spread[g][16 * h + 2 * m + 1] = (uint8_t)(byte + 1);
            }
            lift[8 * h + m] = (int16_t)(1 << (13 - 3 * m % 8));
        }
    tri32_consts k;
    k.table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)table));
    for (int g = 0; g < 4; g++) k.spread[g] = _mm256_loadu_si256((const __m256i *)spread[g]);
    k.lift = _mm256_loadu_si256((const __m256i *)lift);
    if (a->block == LANES) {
        for (; r + 2 <= r_end; r += 2) rows_tri32(a, r, 2, &k, SCALED_16);
        for (; r < r_end; r++) rows_tri32(a, r, 1, &k, SCALED_16);
    } else if (a->block) {
        for (; r + 2 <= r_end; r += 2) rows_tri32(a, r, 2, &k, SCALED_32);
        for (; r < r_end; r++) rows_tri32(a, r, 1, &k, SCALED_32);
    } else {
        for (; r + 2 <= r_end; r += 2) rows_tri32(a, r, 2, &k, UNSCALED);
        for (; r < r_end; r++) rows_tri32(a, r, 1, &k, UNSCALED);
    }
}

float *pyaccel_gemv_planes_x(const gemv_args *a) {
    if (a->bits == 4 && planes_fit(a, 16)) return planes_x(a, nib32_column);
    if (a->bits == 3 && planes_fit(a, 8)) return planes_x(a, tri32_column);
    return NULL;
}
#endif /* PYACCEL_X86 */
