/* Packed low-bit GEMV (twin: pyaccel/kernels/reference_gemv.py). out[rows] = rscale[r] *
 * lanes16( (lut[code(r, j)] * bscale[r, j / block]) * x[j] ), fp32, no fused multiply-add.
 * packed: rows x row_bytes bytes (little-endian bit stream of `bits` per element per row);
 * bscale: rows x n_blocks (ignored when block == 0); mode 1: lut is the two's complement table
 * (8-bit codes are then converted arithmetically, same values). */
void pyaccel_gemv_packed(float *out, const uint8_t *packed, int64_t rows, int64_t row_bytes,
                         int64_t bits, const float *lut, const float *bscale, int64_t n_blocks,
                         int64_t block, const float *rscale, int64_t mode, const float *x,
                         int64_t cols);
