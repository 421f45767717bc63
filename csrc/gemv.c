/* Packed low-bit GEMV kernels; the order of every fp32 operation matches
 * pyaccel/kernels/reference_gemv.py exactly: each row is decoded chunk by chunk into fp32 values
 * (lut[code] * block scale), then accumulated into 16 lanes (lane j % 16), lanes added pairwise.
 * No fast-math, and the AVX2 clone is compiled without the "fma" target, so the compiler cannot
 * contract a*b+c: results are bit-identical to the NumPy twin. */
#include <stdint.h>
#include "gemv.h"

/* -O3 for this file only: the decode and 16-lane loops need the vectoriser's full cost model. */
#pragma GCC optimize("O3")

#define LANES 16
#define CHUNK 1024 /* elements decoded at a time (multiple of 16, 32 and 128) */

static inline uint32_t code_at(const uint8_t *row, int64_t row_bytes, int64_t j, int64_t bits) {
    int64_t off = j * bits, byte = off >> 3;
    uint32_t word = row[byte];
    if (byte + 1 < row_bytes) word |= (uint32_t)row[byte + 1] << 8;
    return (word >> (off & 7)) & ((1u << bits) - 1u);
}

/* Decode elements [j0, j0 + n) of one row into buf (n a multiple of 16 unless at the row end). */
static inline void decode_chunk(float *restrict buf, const uint8_t *restrict row, int64_t row_bytes,
                                int64_t j0, int64_t n, int64_t bits, const float *restrict lut,
                                const float *restrict pair, int64_t mode) {
    int64_t whole = n - n % LANES;
    if (bits == 8) {
        const uint8_t *p = row + j0;
        if (mode == 1)
            for (int64_t i = 0; i < whole; i++) buf[i] = (float)(int8_t)p[i];
        else
            for (int64_t i = 0; i < whole; i++) buf[i] = lut[p[i]];
    } else if (bits == 4) {
        /* one packed byte -> two values through a 256-entry pair table (built per call) */
        const uint8_t *p = row + (j0 >> 1);
        for (int64_t i = 0; i < whole / 2; i++) {
            const float *v = pair + 2 * p[i];
            buf[2 * i] = v[0];
            buf[2 * i + 1] = v[1];
        }
    } else if (bits == 3) {
        /* 3 bytes hold 8 codes = 4 pairs of 6 bits, each through a 64-entry pair table */
        const uint8_t *p = row + (j0 * 3 >> 3);
        for (int64_t g = 0; g < whole / 8; g++) {
            uint32_t w = p[3 * g] | ((uint32_t)p[3 * g + 1] << 8) | ((uint32_t)p[3 * g + 2] << 16);
            for (int i = 0; i < 4; i++) {
                const float *v = pair + 2 * ((w >> (6 * i)) & 63u);
                buf[8 * g + 2 * i] = v[0];
                buf[8 * g + 2 * i + 1] = v[1];
            }
        }
    } else if (bits == 6) {
        const uint8_t *p = row + (j0 * 6 >> 3);
        for (int64_t g = 0; g < whole / 4; g++) {
            uint32_t w = p[3 * g] | ((uint32_t)p[3 * g + 1] << 8) | ((uint32_t)p[3 * g + 2] << 16);
            for (int i = 0; i < 4; i++) buf[4 * g + i] = lut[(w >> (6 * i)) & 63u];
        }
    } else {
        for (int64_t i = 0; i < whole; i++) buf[i] = lut[code_at(row, row_bytes, j0 + i, bits)];
    }
    for (int64_t i = whole; i < n; i++) buf[i] = lut[code_at(row, row_bytes, j0 + i, bits)];
}

static inline __attribute__((always_inline)) void gemv_body(
    float *restrict out, const uint8_t *restrict packed, int64_t rows, int64_t row_bytes,
    int64_t bits, const float *restrict lut, const float *restrict bscale, int64_t n_blocks,
    int64_t block, const float *restrict rscale, int64_t mode, const float *restrict x,
    int64_t cols) {
    float buf[CHUNK];
    /* pair table: entry c holds the values of the two codes packed in the low 2*bits of c */
    float pair[2 * 256];
    if (bits == 4 || bits == 3)
        for (int c = 0; c < (1 << (2 * bits)); c++) {
            pair[2 * c] = lut[c & ((1 << bits) - 1)];
            pair[2 * c + 1] = lut[c >> bits];
        }
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = packed + r * row_bytes;
        const float *bs = bscale + r * n_blocks;
        float acc[LANES] = {0};
        for (int64_t j0 = 0; j0 < cols; j0 += CHUNK) {
            int64_t n = cols - j0 < CHUNK ? cols - j0 : CHUNK;
            decode_chunk(buf, row, row_bytes, j0, n, bits, lut, pair, mode);
            const float *xs = x + j0;
            int64_t whole = n - n % LANES;
            if (block && block % LANES == 0) {
                /* one scale per block: fold it into the dot loop (same operations, one pass) */
                for (int64_t b0 = 0; b0 < whole; b0 += block) {
                    float s = bs[(j0 + b0) / block];
                    int64_t end = b0 + block < whole ? b0 + block : whole;
                    for (int64_t i = b0; i < end; i += LANES)
                        for (int l = 0; l < LANES; l++)
                            acc[l] = acc[l] + (buf[i + l] * s) * xs[i + l];
                }
            } else {
                if (block)
                    for (int64_t i = 0; i < whole; i++) buf[i] = buf[i] * bs[(j0 + i) / block];
                for (int64_t i = 0; i < whole; i += LANES)
                    for (int l = 0; l < LANES; l++) acc[l] = acc[l] + buf[i + l] * xs[i + l];
            }
            for (int64_t i = whole; i < n; i++) {
                float v = block ? buf[i] * bs[(j0 + i) / block] : buf[i];
                acc[i - whole] = acc[i - whole] + v * xs[i];
            }
        }
        for (int h = LANES / 2; h; h /= 2)
            for (int i = 0; i < h; i++) acc[i] = acc[i] + acc[i + h];
        out[r] = rscale[r] * acc[0];
    }
}

__attribute__((target("avx2"))) static void gemv_avx2(
    float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes, int64_t bits,
    const float *lut, const float *bscale, int64_t n_blocks, int64_t block, const float *rscale,
    int64_t mode, const float *x, int64_t cols) {
    gemv_body(out, packed, rows, row_bytes, bits, lut, bscale, n_blocks, block, rscale, mode, x,
              cols);
}

static void gemv_generic(float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes,
                         int64_t bits, const float *lut, const float *bscale, int64_t n_blocks,
                         int64_t block, const float *rscale, int64_t mode, const float *x,
                         int64_t cols) {
    gemv_body(out, packed, rows, row_bytes, bits, lut, bscale, n_blocks, block, rscale, mode, x,
              cols);
}

void pyaccel_gemv_packed(float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes,
                         int64_t bits, const float *lut, const float *bscale, int64_t n_blocks,
                         int64_t block, const float *rscale, int64_t mode, const float *x,
                         int64_t cols) {
    if (__builtin_cpu_supports("avx2"))
        gemv_avx2(out, packed, rows, row_bytes, bits, lut, bscale, n_blocks, block, rscale, mode,
                  x, cols);
    else
        gemv_generic(out, packed, rows, row_bytes, bits, lut, bscale, n_blocks, block, rscale,
                     mode, x, cols);
}
