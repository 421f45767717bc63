/* What the packed GEMV's two files share (csrc/gemv.c: the generic, AVX-512 and AVX2 paths,
 * the threads and the API; csrc/gemv_planes.c: the AVX2 two-plane paths). Private: this folder
 * is not part of the cffi cdef (build_ffi.py reads only the headers directly in csrc). Include
 * it after the file's feature macros and the fp-contract pragma: the inline functions below
 * must not contract either. The order of every fp32 operation is the one gemv.c's header
 * comment states. */
#ifndef PYACCEL_GEMV_SHARED_H
#define PYACCEL_GEMV_SHARED_H

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(PYACCEL_NO_X86)
#define PYACCEL_X86 1
#include <immintrin.h>
#else
#define PYACCEL_X86 0
#endif
#include <stdint.h>
#include <string.h>

#define LANES 16
#define ROWS_AT_ONCE 4

typedef struct {
    float *out;
    const uint8_t *packed;
    int64_t rows, row_bytes, bits;
    const float *lut, *bscale;
    int64_t n_blocks, block;
    const float *rscale;
    int64_t mode;
    const float *x;
    int64_t cols;
    const float *x32; /* x in a two-plane path's order (NULL when neither runs) */
} gemv_args;

static inline uint32_t code_at(const uint8_t *row, int64_t row_bytes, int64_t j, int64_t bits) {
    int64_t off = j * bits, byte = off >> 3;
    uint32_t word = row[byte];
    if (byte + 1 < row_bytes) word |= (uint32_t)row[byte + 1] << 8;
    return (word >> (off & 7)) & ((1u << bits) - 1u);
}

/* Columns [whole, cols) (fewer than 16) into lanes 0.., then the pairwise lane sum and the row
 * scale: the common end of every path. acc holds the 16 lanes after columns [0, whole). */
static inline void finish_row(const gemv_args *a, int64_t r, float *acc, int64_t whole) {
    const uint8_t *row = a->packed + r * a->row_bytes;
    const float *bs = a->bscale + r * a->n_blocks;
    for (int64_t j = whole; j < a->cols; j++) {
        float v = a->lut[code_at(row, a->row_bytes, j, a->bits)];
        if (a->block) v = v * bs[j / a->block];
        acc[j - whole] = acc[j - whole] + v * a->x[j];
    }
    for (int h = LANES / 2; h; h /= 2)
        for (int i = 0; i < h; i++) acc[i] = acc[i] + acc[i + h];
    a->out[r] = a->rscale[r] * acc[0];
}

#if PYACCEL_X86
#define T256 __attribute__((target("avx2")))

/* gemv_planes.c. x laid out for a two-plane path of this call's 4- or 3-bit codes (malloc'd:
 * the caller frees it), or NULL when the table or the blocks do not fit one (or out of
 * memory): the call then takes the byte-plane or variable-shift paths. */
float *pyaccel_gemv_planes_x(const gemv_args *a);

/* gemv_planes.c. Rows [r, r_end) of 4-bit (nib32) or 3-bit (tri32) codes through two planes;
 * a->x32 from pyaccel_gemv_planes_x. */
T256 void pyaccel_gemv_rows_nib32(const gemv_args *a, int64_t r, int64_t r_end);
T256 void pyaccel_gemv_rows_tri32(const gemv_args *a, int64_t r, int64_t r_end);
#endif /* PYACCEL_X86 */

#endif /* PYACCEL_GEMV_SHARED_H */
