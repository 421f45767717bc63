/* Packed low-bit GEMV (twin: pyaccel/kernels/reference_gemv.py). out[rows] = rscale[r] *
 * lanes16( (lut[code(r, j)] * bscale[r, j / block]) * x[j] ), fp32, no fused multiply-add.
 * packed: rows x row_bytes bytes (little-endian bit stream of `bits` per element per row);
 * bscale: rows x n_blocks (ignored when block == 0); mode 1: lut is the two's complement table
 * (8-bit codes are then converted arithmetically, same values). */
void pyaccel_gemv_packed(float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes,
                         int64_t bits, const float *lut, const float *bscale, int64_t n_blocks,
                         int64_t block, const float *rscale, int64_t mode, const float *x,
                         int64_t cols);
/* The same with the instruction set and thread count chosen by the caller (for tests): isa -1
 * the best this CPU has, 0 generic C, 1 AVX2, 2 AVX-512 (F+BW+VBMI); threads 0 automatic (2 for
 * large calls on a multi-core CPU, else 1), else at most 2 (same bits for any count). Returns
 * the path that ran (0 when the layout has no SIMD decoder), or -1 without computing anything
 * when the CPU lacks the requested ISA. */
int64_t pyaccel_gemv_packed_isa(float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes,
                                int64_t bits, const float *lut, const float *bscale,
                                int64_t n_blocks, int64_t block, const float *rscale, int64_t mode,
                                const float *x, int64_t cols, int64_t isa, int64_t threads);
