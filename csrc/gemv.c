/* Packed low-bit GEMV kernels; the order of every fp32 operation matches
 * pyaccel/kernels/reference_gemv.py exactly. Per row r and column j:
 *     v   = lut[code(r, j)]            (fp32, exact table value)
 *     v   = v * bscale[r, j / block]   (one rounded multiply; skipped when block == 0)
 *     p   = v * x[j]                   (one rounded multiply)
 *     acc[j % 16] = acc[j % 16] + p    (16 fp32 lanes, columns in increasing order)
 * then the lanes are added pairwise (+8, +4, +2, +1) and y[r] = rscale[r] * acc[0].
 * No fast-math and no fused multiply-add: the file is built with -std=c99 (ISO mode: GCC's
 * fp-contract is off) and the pragma below says so again, because the avx512f target implies
 * FMA and a*b+c could otherwise be contracted. Results are bit-identical to the NumPy twin.
 *
 * Three implementations of that one order, chosen at run time (__builtin_cpu_supports); the
 * two SIMD ones exist only on x86 with GCC or Clang (PYACCEL_X86 below; -DPYACCEL_NO_X86 turns
 * them off, as on aarch64, for the test that builds this portable variant):
 *   - AVX-512 (F+BW+VBMI): one zmm holds the 16 lanes of a row; 4 rows at a time share each
 *     x load. Codes are unpacked straight into registers (vpmultishiftqb picks each code's bits
 *     out of a broadcast qword); a 4- or 3-bit code selects its value from a 16-float table
 *     held in a register (vpermps), and for block-scaled formats that table is lut * block
 *     scale, computed once per block (the same rounded products lut[c] * s as per element, so
 *     the same bits). 8-bit and 6-bit two's complement codes (mode 1) are sign-extended and
 *     converted (exact integers); other 8/6-bit tables are gathered.
 *   - AVX2: two ymm per row (lanes 0-7, 8-15), 4 rows at a time; codes by variable shifts of a
 *     broadcast word (6-bit: a byte shuffle first), a 3-bit code's 8-entry table in one ymm.
 *     4-bit codes: a ymm holds 4 lanes of two rows (one per 128-bit half); the codes become
 *     bytes and one byte shuffle per byte of a float looks their values up (byte planes).
 *     Tables whose floats all end in 16 zero bits (int4's and hc1's integers, e2m1) need two
 *     planes, and a ymm carries 32 columns of two rows (x laid out once per call in their
 *     order; blocks of 16 or of whole 32s); 3-bit codes are spread into words by a shuffle
 *     and two 16-bit multiplies, and one shuffle holds both planes of their 8 entries. These
 *     two-plane paths are in gemv_planes.c; both files include internal/gemv_shared.h.
 *   - generic C (any CPU, and any layout the SIMD paths do not cover: bits other than
 *     3/4/6/8, blocks that are not a multiple of 16): decode a chunk into a buffer, then the
 *     16-lane loop.
 * Large calls split their rows over up to 2 POSIX threads (see pyaccel_gemv_packed_isa); each
 * row is computed by one thread in the order above, so results do not depend on the thread count. */
#define _POSIX_C_SOURCE 200809L /* pthreads and sysconf under -std=c99 */
#define _DARWIN_C_SOURCE        /* macOS hides _SC_NPROCESSORS_ONLN under plain POSIX */
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "gemv.h"

/* -O3 for this file only (the generic decode and 16-lane loops need the vectoriser's full cost
 * model); never contract a*b+c into an FMA (build_ffi.py also passes -ffp-contract=off, which
 * is what keeps Clang, which has no such pragma, from contracting). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif
#include "internal/gemv_shared.h" /* PYACCEL_X86, gemv_args, finish_row, the two-plane paths */

#define CHUNK 1024 /* generic path: elements decoded at a time (multiple of 16, 32 and 128) */

/* ------------------------------------------------------------------------------------------
 * generic path */

/* Decode elements [j0, j0 + n) of one row into buf (n a multiple of 16). */
static inline void decode_chunk(float *restrict buf, const uint8_t *restrict row, int64_t row_bytes,
                                int64_t j0, int64_t n, int64_t bits, const float *restrict lut,
                                const float *restrict pair, int64_t mode) {
    if (bits == 8) {
        const uint8_t *p = row + j0;
        if (mode == 1)
            for (int64_t i = 0; i < n; i++) buf[i] = (float)(int8_t)p[i];
        else
            for (int64_t i = 0; i < n; i++) buf[i] = lut[p[i]];
    } else if (bits == 4) {
        /* one packed byte -> two values through a 256-entry pair table (built per call) */
        const uint8_t *p = row + (j0 >> 1);
        for (int64_t i = 0; i < n / 2; i++) {
            const float *v = pair + 2 * p[i];
            buf[2 * i] = v[0];
            buf[2 * i + 1] = v[1];
        }
    } else if (bits == 3) {
        /* 3 bytes hold 8 codes = 4 pairs of 6 bits, each through a 64-entry pair table */
        const uint8_t *p = row + (j0 * 3 >> 3);
        for (int64_t g = 0; g < n / 8; g++) {
            uint32_t w = p[3 * g] | ((uint32_t)p[3 * g + 1] << 8) | ((uint32_t)p[3 * g + 2] << 16);
            for (int i = 0; i < 4; i++) {
                const float *v = pair + 2 * ((w >> (6 * i)) & 63u);
                buf[8 * g + 2 * i] = v[0];
                buf[8 * g + 2 * i + 1] = v[1];
            }
        }
    } else if (bits == 6) {
        const uint8_t *p = row + (j0 * 6 >> 3);
        for (int64_t g = 0; g < n / 4; g++) {
            uint32_t w = p[3 * g] | ((uint32_t)p[3 * g + 1] << 8) | ((uint32_t)p[3 * g + 2] << 16);
            for (int i = 0; i < 4; i++) buf[4 * g + i] = lut[(w >> (6 * i)) & 63u];
        }
    } else {
        for (int64_t i = 0; i < n; i++) buf[i] = lut[code_at(row, row_bytes, j0 + i, bits)];
    }
}

static void gemv_generic(const gemv_args *a, int64_t r_begin, int64_t r_end) {
    const int64_t bits = a->bits, block = a->block, cols = a->cols;
    const int64_t whole = cols - cols % LANES;
    const float *x = a->x;
    float buf[CHUNK];
    /* pair table: entry c holds the values of the two codes packed in the low 2*bits of c */
    float pair[2 * 256];
    if (bits == 4 || bits == 3)
        for (int c = 0; c < (1 << (2 * bits)); c++) {
            pair[2 * c] = a->lut[c & ((1 << bits) - 1)];
            pair[2 * c + 1] = a->lut[c >> bits];
        }
    for (int64_t r = r_begin; r < r_end; r++) {
        const uint8_t *row = a->packed + r * a->row_bytes;
        const float *bs = a->bscale + r * a->n_blocks;
        float acc[LANES] = {0};
        for (int64_t j0 = 0; j0 < whole; j0 += CHUNK) {
            int64_t n = whole - j0 < CHUNK ? whole - j0 : CHUNK;
            decode_chunk(buf, row, a->row_bytes, j0, n, bits, a->lut, pair, a->mode);
            const float *xs = x + j0;
            if (block && block % LANES == 0) {
                /* one scale per block: fold it into the dot loop (same operations, one pass);
                 * a block may start before the chunk (CHUNK need not be a multiple of it) */
                for (int64_t b0 = 0, end; b0 < n; b0 = end) {
                    int64_t ib = (j0 + b0) / block;
                    float s = bs[ib];
                    end = (ib + 1) * block - j0 < n ? (ib + 1) * block - j0 : n;
                    for (int64_t i = b0; i < end; i += LANES)
                        for (int l = 0; l < LANES; l++)
                            acc[l] = acc[l] + (buf[i + l] * s) * xs[i + l];
                }
            } else {
                if (block)
                    for (int64_t i = 0; i < n; i++) buf[i] = buf[i] * bs[(j0 + i) / block];
                for (int64_t i = 0; i < n; i += LANES)
                    for (int l = 0; l < LANES; l++) acc[l] = acc[l] + buf[i + l] * xs[i + l];
            }
        }
        finish_row(a, r, acc, whole);
    }
}

/* ------------------------------------------------------------------------------------------
 * SIMD paths: which decoder a call uses (KIND_NONE: the generic path) */

enum { KIND_NONE, KIND_I8, KIND_LUT8, KIND_NIB, KIND_TRI, KIND_I6, KIND_LUT6 };

static int simd_kind(const gemv_args *a) {
    if (a->block && a->block % LANES) return KIND_NONE;
    switch (a->bits) {
    case 8: return a->mode == 1 ? KIND_I8 : KIND_LUT8;
    case 4: return KIND_NIB;
    case 3: return KIND_TRI;
    case 6: return a->mode == 1 ? KIND_I6 : KIND_LUT6;
    default: return KIND_NONE;
    }
}

#if PYACCEL_X86
/* The 16 codes of 3-bit elements j..j+15 sit in 6 bytes, of 6-bit ones in 12 (j % 16 == 0).
 * Load 8 / 16 bytes when the row holds them, else copy the exact bytes (last groups of a row:
 * never read past the buffer). */
static inline uint64_t load6(const uint8_t *row, int64_t row_bytes, int64_t off) {
    uint64_t q = 0;
    if (off + 8 <= row_bytes)
        memcpy(&q, row + off, 8);
    else
        memcpy(&q, row + off, 6);
    return q;
}

static inline __m128i load12(const uint8_t *row, int64_t row_bytes, int64_t off) {
    if (off + 16 <= row_bytes) return _mm_loadu_si128((const __m128i *)(row + off));
    uint8_t buf[16] = {0};
    memcpy(buf, row + off, 12);
    return _mm_loadu_si128((const __m128i *)buf);
}

/* ---- AVX-512 ----------------------------------------------------------------------------- */

#define T512 __attribute__((target("avx512f,avx512bw,avx512vbmi")))

/* Byte controls of the AVX-512 decoders (built once per call). vpmultishiftqb copies into each
 * byte the 8 bits (rotating) of its qword that start at the control byte's bit offset. */
typedef struct {
    __m512i nib, tri;          /* dword k, low byte <- bit 4k / 3k of the 8 row bytes */
    __m512i hex_bytes;         /* vpermb: qwords 0-3 <- row bytes 0-7, qwords 4-7 <- bytes 6-13 */
    __m512i hex_low, hex_top;  /* dword k, low byte / top byte <- bit o / o - 2 of its qword */
} ctl512;

T512 static ctl512 make_ctl512(void) {
    uint8_t nib[64] = {0}, tri[64] = {0}, hex_bytes[64], hex_low[64] = {0}, hex_top[64] = {0};
    for (int k = 0; k < 16; k++) {
        int o = 6 * k - (k >= 8 ? 48 : 0); /* 6-bit element k's bit offset in its qword */
        nib[4 * k] = (uint8_t)(4 * k);
        tri[4 * k] = (uint8_t)(3 * k);
        hex_low[4 * k] = (uint8_t)o;
        hex_top[4 * k + 3] = (uint8_t)((o - 2) & 63); /* field -> bits 26..31 of the dword */
    }
    for (int i = 0; i < 64; i++) hex_bytes[i] = (uint8_t)((i < 32 ? 0 : 6) + (i & 7));
    ctl512 c = {_mm512_loadu_si512(nib), _mm512_loadu_si512(tri), _mm512_loadu_si512(hex_bytes),
                _mm512_loadu_si512(hex_low), _mm512_loadu_si512(hex_top)};
    return c;
}

/* 16 values of elements j..j+15 (j % 16 == 0) of one row; tab: the (scaled) 16-entry table of
 * KIND_NIB / KIND_TRI (3-bit codes: entry c holds lut[c & 7]); vpermps reads the low 4 bits of
 * each dword. */
static inline __attribute__((always_inline)) T512 __m512 dec512(int kind, const gemv_args *a,
                                                                const ctl512 *c,
                                                                const uint8_t *row, int64_t j,
                                                                __m512 tab) {
    switch (kind) {
    case KIND_I8:
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + j))));
    case KIND_LUT8:
        return _mm512_i32gather_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + j))),
                                   a->lut, 4);
    case KIND_NIB: { /* 16 codes in the 8 bytes at j / 2 */
        uint64_t q;
        memcpy(&q, row + (j >> 1), 8);
        __m512i d = _mm512_multishift_epi64_epi8(c->nib, _mm512_set1_epi64((long long)q));
        return _mm512_permutexvar_ps(d, tab);
    }
    case KIND_TRI: { /* 16 codes in the 6 bytes at 6 * (j / 16) */
        __m512i q = _mm512_set1_epi64((long long)load6(row, a->row_bytes, (j >> 4) * 6));
        return _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(c->tri, q), tab);
    }
    default: { /* KIND_I6, KIND_LUT6: 16 codes in the 12 bytes at 12 * (j / 16) */
        __m512i q = _mm512_permutexvar_epi8(
            c->hex_bytes, _mm512_castsi128_si512(load12(row, a->row_bytes, (j >> 4) * 12)));
        if (kind == KIND_I6) /* arithmetic shift of the top 6 bits: the signed code */
            return _mm512_cvtepi32_ps(
                _mm512_srai_epi32(_mm512_multishift_epi64_epi8(c->hex_top, q), 26));
        __m512i d = _mm512_and_si512(_mm512_multishift_epi64_epi8(c->hex_low, q),
                                     _mm512_set1_epi32(63));
        return _mm512_i32gather_ps(d, a->lut, 4);
    }
    }
}

/* Rows r0 .. r0 + nr - 1 over columns [0, whole), then finish_row. */
static inline __attribute__((always_inline)) T512 void rows512(const gemv_args *a, int64_t r0,
                                                               const int nr, const int kind,
                                                               __m512 base, const ctl512 *c) {
    const int64_t block = a->block, whole = a->cols - a->cols % LANES;
    const int table = kind == KIND_NIB || kind == KIND_TRI;
    const int64_t step = block ? block : 512; /* columns per table / scale refresh */
    const uint8_t *row[ROWS_AT_ONCE];
    const float *bs[ROWS_AT_ONCE];
    __m512 acc[ROWS_AT_ONCE], tab[ROWS_AT_ONCE], sc[ROWS_AT_ONCE];
    for (int k = 0; k < nr; k++) {
        row[k] = a->packed + (r0 + k) * a->row_bytes;
        bs[k] = a->bscale + (r0 + k) * a->n_blocks;
        acc[k] = _mm512_setzero_ps();
        tab[k] = base;
        sc[k] = _mm512_set1_ps(1.0f);
    }
    for (int64_t jb = 0; jb < whole; jb += step) {
        int64_t end = jb + step < whole ? jb + step : whole;
        if (block)
            for (int k = 0; k < nr; k++) {
                __m512 s = _mm512_set1_ps(bs[k][jb / block]);
                if (table)
                    tab[k] = _mm512_mul_ps(base, s); /* lut[c] * s for every code c */
                else
                    sc[k] = s;
            }
        for (int64_t j = jb; j < end; j += LANES) {
            __m512 xv = _mm512_loadu_ps(a->x + j);
            for (int k = 0; k < nr; k++) {
                __m512 v = dec512(kind, a, c, row[k], j, tab[k]);
                if (block && !table) v = _mm512_mul_ps(v, sc[k]);
                acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(v, xv));
            }
        }
    }
    for (int k = 0; k < nr; k++) {
        float lanes[LANES];
        _mm512_storeu_ps(lanes, acc[k]);
        finish_row(a, r0 + k, lanes, whole);
    }
}

static inline __attribute__((always_inline)) T512 void all_rows512(const gemv_args *a,
                                                                   const int kind, __m512 base,
                                                                   int64_t r, int64_t r_end) {
    const ctl512 c = make_ctl512();
    for (; r + ROWS_AT_ONCE <= r_end; r += ROWS_AT_ONCE)
        rows512(a, r, ROWS_AT_ONCE, kind, base, &c);
    for (; r < r_end; r++) rows512(a, r, 1, kind, base, &c);
}

T512 static void gemv_avx512(const gemv_args *a, int kind, int64_t r0, int64_t r1) {
    float t[16];
    for (int c = 0; c < 16; c++) t[c] = kind == KIND_TRI ? a->lut[c & 7] : kind == KIND_NIB ? a->lut[c] : 0.0f;
    __m512 base = _mm512_loadu_ps(t);
    switch (kind) {
    case KIND_I8: all_rows512(a, KIND_I8, base, r0, r1); break;
    case KIND_LUT8: all_rows512(a, KIND_LUT8, base, r0, r1); break;
    case KIND_NIB: all_rows512(a, KIND_NIB, base, r0, r1); break;
    case KIND_TRI: all_rows512(a, KIND_TRI, base, r0, r1); break;
    case KIND_I6: all_rows512(a, KIND_I6, base, r0, r1); break;
    default: all_rows512(a, KIND_LUT6, base, r0, r1); break;
    }
}

/* ---- AVX2 -------------------------------------------------------------------------------- */

typedef struct {
    __m256 lo, hi; /* table entries 0-7 and 8-15 (3-bit codes: the low half) */
} tab256;

/* 8 values of elements j..j+7 (j % 8 == 0) of one row. */
static inline __attribute__((always_inline)) T256 __m256 dec256(int kind, const gemv_args *a,
                                                                const uint8_t *row, int64_t j,
                                                                tab256 tab) {
    switch (kind) {
    case KIND_I8:
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + j))));
    case KIND_LUT8:
        return _mm256_i32gather_ps(
            a->lut, _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + j))), 4);
    case KIND_TRI: { /* 8 codes in 3 bytes at 3 * (j / 8); vpermps reads the low 3 bits */
        int64_t off = (j >> 3) * 3;
        uint32_t w = 0;
        if (off + 4 <= a->row_bytes)
            memcpy(&w, row + off, 4);
        else
            memcpy(&w, row + off, 3);
        __m256i d = _mm256_srlv_epi32(_mm256_set1_epi32((int)w),
                                      _mm256_set_epi32(21, 18, 15, 12, 9, 6, 3, 0));
        return _mm256_permutevar8x32_ps(tab.lo, d);
    }
    default: { /* 6-bit: 8 codes in 6 bytes at 6 * (j / 8); dword k <- bytes (6k >> 3, +1) */
        int64_t off = (j >> 3) * 6;
        uint64_t q = load6(row, a->row_bytes, off);
        __m256i b = _mm256_set1_epi64x((long long)q);
        const __m256i ctl = _mm256_set_epi8(-1, -1, 6, 5, -1, -1, 5, 4, -1, -1, 4, 3, -1, -1, 4, 3,
                                            -1, -1, 3, 2, -1, -1, 2, 1, -1, -1, 1, 0, -1, -1, 1, 0);
        __m256i d = _mm256_shuffle_epi8(b, ctl);
        if (kind == KIND_I6) {
            const __m256i up = _mm256_set_epi32(24, 22, 20, 26, 24, 22, 20, 26);
            return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_sllv_epi32(d, up), 26));
        }
        const __m256i sh = _mm256_set_epi32(2, 4, 6, 0, 2, 4, 6, 0);
        d = _mm256_and_si256(_mm256_srlv_epi32(d, sh), _mm256_set1_epi32(63));
        return _mm256_i32gather_ps(a->lut, d, 4);
    }
    }
}

static inline __attribute__((always_inline)) T256 void rows256(const gemv_args *a, int64_t r0,
                                                               const int nr, const int kind,
                                                               tab256 base) {
    const int64_t block = a->block, whole = a->cols - a->cols % LANES;
    const int table = kind == KIND_TRI;
    const int64_t step = block ? block : 512;
    const uint8_t *row[ROWS_AT_ONCE];
    const float *bs[ROWS_AT_ONCE];
    __m256 acc0[ROWS_AT_ONCE], acc1[ROWS_AT_ONCE], sc[ROWS_AT_ONCE];
    tab256 tab[ROWS_AT_ONCE];
    for (int k = 0; k < nr; k++) {
        row[k] = a->packed + (r0 + k) * a->row_bytes;
        bs[k] = a->bscale + (r0 + k) * a->n_blocks;
        acc0[k] = acc1[k] = _mm256_setzero_ps();
        tab[k] = base;
        sc[k] = _mm256_set1_ps(1.0f);
    }
    for (int64_t jb = 0; jb < whole; jb += step) {
        int64_t end = jb + step < whole ? jb + step : whole;
        if (block)
            for (int k = 0; k < nr; k++) {
                __m256 s = _mm256_set1_ps(bs[k][jb / block]);
                if (table) {
                    tab[k].lo = _mm256_mul_ps(base.lo, s);
                    tab[k].hi = _mm256_mul_ps(base.hi, s);
                } else {
                    sc[k] = s;
                }
            }
        for (int64_t j = jb; j < end; j += LANES) {
            __m256 x0 = _mm256_loadu_ps(a->x + j), x1 = _mm256_loadu_ps(a->x + j + 8);
            for (int k = 0; k < nr; k++) {
                __m256 v0 = dec256(kind, a, row[k], j, tab[k]);
                __m256 v1 = dec256(kind, a, row[k], j + 8, tab[k]);
                if (block && !table) {
                    v0 = _mm256_mul_ps(v0, sc[k]);
                    v1 = _mm256_mul_ps(v1, sc[k]);
                }
                acc0[k] = _mm256_add_ps(acc0[k], _mm256_mul_ps(v0, x0));
                acc1[k] = _mm256_add_ps(acc1[k], _mm256_mul_ps(v1, x1));
            }
        }
    }
    for (int k = 0; k < nr; k++) {
        float lanes[LANES];
        _mm256_storeu_ps(lanes, acc0[k]);
        _mm256_storeu_ps(lanes + 8, acc1[k]);
        finish_row(a, r0 + k, lanes, whole);
    }
}

static inline __attribute__((always_inline)) T256 void all_rows256(const gemv_args *a,
                                                                   const int kind, tab256 base,
                                                                   int64_t r, int64_t r_end) {
    for (; r + ROWS_AT_ONCE <= r_end; r += ROWS_AT_ONCE) rows256(a, r, ROWS_AT_ONCE, kind, base);
    for (; r < r_end; r++) rows256(a, r, 1, kind, base);
}

/* 4-bit codes through byte planes: plane p holds byte p of each of the 16 table floats, so one
 * byte shuffle per plane looks up 16 codes at once and two rounds of unpacks rebuild the floats
 * in element order (the exact table values, with no variable shift, permute or blend). All of
 * it stays inside 128-bit lanes, so a ymm carries two rows, one a lane (each row's 16 columns
 * in its own lane, x broadcast to both): every row's lanes add the same products in the same
 * order as one row at a time. A block scale multiplies each value, the same rounded product
 * lut[c] * s as a scaled table. */
static inline __attribute__((always_inline)) T256 void make_planes(const float *lut, __m256i p[4]) {
    uint8_t b[4][16];
    for (int c = 0; c < 16; c++) {
        uint32_t u;
        memcpy(&u, lut + c, 4);
        for (int k = 0; k < 4; k++) b[k][c] = (uint8_t)(u >> (8 * k));
    }
    for (int k = 0; k < 4; k++)
        p[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[k]));
}

/* The codes of elements j..j+15 (j % 16 == 0) of rows ra (low lane) and rb (high lane), a byte
 * each in element order: the 8 bytes at j / 2, low nibble first. */
static inline __attribute__((always_inline)) T256 __m256i codes16x2(const uint8_t *ra,
                                                                    const uint8_t *rb, int64_t j) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256i q = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(ra + (j >> 1)))),
        _mm_loadl_epi64((const __m128i *)(rb + (j >> 1))), 1);
    return _mm256_unpacklo_epi8(_mm256_and_si256(q, low),
                                _mm256_and_si256(_mm256_srli_epi16(q, 4), low));
}

/* The table values of 16 codes a lane, four to a vector, in element order. */
static inline __attribute__((always_inline)) T256 void look16x2(__m256i codes, const __m256i p[4],
                                                                __m256 v[4]) {
    __m256i b0 = _mm256_shuffle_epi8(p[0], codes), b1 = _mm256_shuffle_epi8(p[1], codes);
    __m256i b2 = _mm256_shuffle_epi8(p[2], codes), b3 = _mm256_shuffle_epi8(p[3], codes);
    __m256i lo01 = _mm256_unpacklo_epi8(b0, b1), hi01 = _mm256_unpackhi_epi8(b0, b1);
    __m256i lo23 = _mm256_unpacklo_epi8(b2, b3), hi23 = _mm256_unpackhi_epi8(b2, b3);
    v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo01, lo23));
    v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo01, lo23));
    v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(hi01, hi23));
    v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(hi01, hi23));
}

/* Rows r0 .. r0 + nr - 1 (nr 1, 2 or 4), two to a ymm (a single row fills both lanes). */
static inline __attribute__((always_inline)) T256 void rows_nib(const gemv_args *a, int64_t r0,
                                                                const int nr,
                                                                const __m256i p[4]) {
    const int64_t block = a->block, whole = a->cols - a->cols % LANES;
    const int64_t step = block ? block : 512;
    const int pairs = (nr + 1) / 2;
    const uint8_t *row[ROWS_AT_ONCE];
    const float *bs[ROWS_AT_ONCE];
    __m256 acc[ROWS_AT_ONCE / 2][4], sc[ROWS_AT_ONCE / 2];
    for (int k = 0; k < 2 * pairs; k++) {
        int64_t r = r0 + (k < nr ? k : nr - 1);
        row[k] = a->packed + r * a->row_bytes;
        bs[k] = a->bscale + r * a->n_blocks;
    }
    for (int h = 0; h < pairs; h++) {
        for (int i = 0; i < 4; i++) acc[h][i] = _mm256_setzero_ps();
        sc[h] = _mm256_set1_ps(1.0f);
    }
    for (int64_t jb = 0; jb < whole; jb += step) {
        int64_t end = jb + step < whole ? jb + step : whole;
        if (block)
            for (int h = 0; h < pairs; h++)
                sc[h] = _mm256_setr_m128(_mm_set1_ps(bs[2 * h][jb / block]),
                                         _mm_set1_ps(bs[2 * h + 1][jb / block]));
        for (int64_t j = jb; j < end; j += LANES) {
            __m256 xv[4];
            for (int i = 0; i < 4; i++)
                xv[i] = _mm256_broadcast_ps((const __m128 *)(a->x + j + 4 * i));
            for (int h = 0; h < pairs; h++) {
                __m256 v[4];
                look16x2(codes16x2(row[2 * h], row[2 * h + 1], j), p, v);
                for (int i = 0; i < 4; i++) {
                    if (block) v[i] = _mm256_mul_ps(v[i], sc[h]);
                    acc[h][i] = _mm256_add_ps(acc[h][i], _mm256_mul_ps(v[i], xv[i]));
                }
            }
        }
    }
    for (int k = 0; k < nr; k++) {
        float lanes[LANES], both[8];
        for (int i = 0; i < 4; i++) {
            _mm256_storeu_ps(both, acc[k / 2][i]);
            memcpy(lanes + 4 * i, both + 4 * (k % 2), 4 * sizeof(float));
        }
        finish_row(a, r0 + k, lanes, whole);
    }
}

T256 static void all_rows_nib(const gemv_args *a, int64_t r, int64_t r_end) {
    __m256i p[4];
    make_planes(a->lut, p);
    for (; r + ROWS_AT_ONCE <= r_end; r += ROWS_AT_ONCE) rows_nib(a, r, ROWS_AT_ONCE, p);
    for (; r + 2 <= r_end; r += 2) rows_nib(a, r, 2, p);
    for (; r < r_end; r++) rows_nib(a, r, 1, p);
}


T256 static void gemv_avx2(const gemv_args *a, int kind, int64_t r0, int64_t r1) {
    float t[16];
    for (int c = 0; c < 16; c++) t[c] = kind == KIND_TRI ? a->lut[c & 7] : 0.0f;
    tab256 base = {_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8)};
    switch (kind) {
    case KIND_I8: all_rows256(a, KIND_I8, base, r0, r1); break;
    case KIND_LUT8: all_rows256(a, KIND_LUT8, base, r0, r1); break;
    case KIND_NIB:
        if (a->x32)
            pyaccel_gemv_rows_nib32(a, r0, r1);
        else
            all_rows_nib(a, r0, r1);
        break;
    case KIND_TRI:
        if (a->x32)
            pyaccel_gemv_rows_tri32(a, r0, r1);
        else
            all_rows256(a, KIND_TRI, base, r0, r1);
        break;
    case KIND_I6: all_rows256(a, KIND_I6, base, r0, r1); break;
    default: all_rows256(a, KIND_LUT6, base, r0, r1); break;
    }
}

/* ------------------------------------------------------------------------------------------ */

static int has_avx512(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
}

/* The path to run for a requested isa (-1: the best this CPU has), or -1 when the CPU lacks it. */
static int64_t choose_isa(int64_t isa) {
    __builtin_cpu_init();
    int avx512 = has_avx512(), avx2 = __builtin_cpu_supports("avx2");
    if (isa < 0) return avx512 ? 2 : avx2 ? 1 : 0;
    if (isa == 0 || (isa == 1 && avx2) || (isa == 2 && avx512)) return isa;
    return -1;
}
#else
/* Not x86 (or PYACCEL_NO_X86): only the generic C path exists. */
static int64_t choose_isa(int64_t isa) { return isa <= 0 ? 0 : -1; }
#endif /* PYACCEL_X86 */

/* ------------------------------------------------------------------------------------------
 * rows over threads: tasks of whole rows handed out in order from a shared counter (a thread
 * slowed by another process just takes fewer); every row is computed by exactly one thread with
 * the arithmetic above, so the result does not depend on the thread count. */

#define MAX_THREADS 2
#define THREAD_MIN_ELEMS (1 << 20) /* below this a second thread costs more than it saves */

typedef struct {
    const gemv_args *a;
    int isa, kind;
    int64_t task_rows, next; /* next: first row of the next task (atomic) */
} gemv_job;

static void run_rows(const gemv_args *a, int isa, int kind, int64_t r0, int64_t r1) {
#if PYACCEL_X86
    if (kind != KIND_NONE) {
        if (isa == 2)
            gemv_avx512(a, kind, r0, r1);
        else
            gemv_avx2(a, kind, r0, r1);
        return;
    }
#else
    (void)isa; /* kind is always KIND_NONE: choose_isa gives 0 */
    (void)kind;
#endif
    gemv_generic(a, r0, r1);
}

static void *gemv_worker(void *arg) {
    gemv_job *job = arg;
    for (;;) {
        int64_t r0 = __atomic_fetch_add(&job->next, job->task_rows, __ATOMIC_RELAXED);
        if (r0 >= job->a->rows) break;
        int64_t r1 = r0 + job->task_rows < job->a->rows ? r0 + job->task_rows : job->a->rows;
        run_rows(job->a, job->isa, job->kind, r0, r1);
    }
    return NULL;
}

static int64_t auto_threads(const gemv_args *a) {
    if (a->rows < 2 * ROWS_AT_ONCE || a->rows * a->cols < THREAD_MIN_ELEMS) return 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

int64_t pyaccel_gemv_packed_isa(float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes,
                                int64_t bits, const float *lut, const float *bscale,
                                int64_t n_blocks, int64_t block, const float *rscale, int64_t mode,
                                const float *x, int64_t cols, int64_t isa, int64_t threads) {
    gemv_args a = {out, packed, rows, row_bytes, bits, lut, bscale, n_blocks, block, rscale,
                   mode, x, cols, NULL};
    isa = choose_isa(isa);
    if (isa < 0) return -1;
    int kind = isa ? simd_kind(&a) : KIND_NONE;
#if PYACCEL_X86
    float *x32 = NULL; /* NULL (out of memory too): the paths that need no x32 */
    if (isa == 1 && (kind == KIND_NIB || kind == KIND_TRI)) x32 = pyaccel_gemv_planes_x(&a);
    a.x32 = x32;
#endif
    if (threads <= 0) threads = auto_threads(&a);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > rows) threads = rows > 0 ? rows : 1;
    if (threads <= 1) {
        run_rows(&a, (int)isa, kind, 0, rows);
    } else {
        /* about 16 tasks per thread, each a multiple of ROWS_AT_ONCE rows */
        int64_t task = (rows + 16 * threads - 1) / (16 * threads);
        task = (task + ROWS_AT_ONCE - 1) / ROWS_AT_ONCE * ROWS_AT_ONCE;
        gemv_job job = {&a, (int)isa, kind, task, 0};
        pthread_t tid[MAX_THREADS];
        int started[MAX_THREADS] = {0};
        for (int64_t t = 1; t < threads; t++)
            started[t] = pthread_create(&tid[t], NULL, gemv_worker, &job) == 0;
        gemv_worker(&job); /* this thread works too; if a start failed, it does the rest */
        for (int64_t t = 1; t < threads; t++)
            if (started[t]) pthread_join(tid[t], NULL);
    }
#if PYACCEL_X86
    free(x32);
#endif
    return kind == KIND_NONE ? 0 : isa;
}

void pyaccel_gemv_packed(float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes,
                         int64_t bits, const float *lut, const float *bscale, int64_t n_blocks,
                         int64_t block, const float *rscale, int64_t mode, const float *x,
                         int64_t cols) {
    pyaccel_gemv_packed_isa(out, packed, rows, row_bytes, bits, lut, bscale, n_blocks, block,
                            rscale, mode, x, cols, -1, 0);
}
