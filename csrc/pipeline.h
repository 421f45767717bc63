/* Micro-batch pipeline schedule over stages and the links into them (twin of
 * pyaccel/kernels/reference_pipeline.py, which states the semantics). Output first:
 * finish[r * n_micro + m]; scratch stage_free and link_free of n_stages each. Inputs are
 * n_micro x n_stages, row-major. */
void pyaccel_micro_batch_rounds(int64_t *finish, int64_t *stage_free, int64_t *link_free,
                                const int64_t *occ, const int64_t *busy, const int64_t *lat,
                                int64_t n_micro, int64_t n_stages, int64_t rounds);
