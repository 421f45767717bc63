/* Micro-batch pipeline schedule over stages and the links into them, with crossings that
 * relay on the receiving stage's own links (twin of pyaccel/kernels/reference_pipeline.py,
 * which states the semantics). Output first: finish[r * n_micro + m]; scratch stage_free,
 * link_free and n_booked of n_stages each, and bs, be of n_stages * cap (each stage's booked
 * windows). Inputs are n_micro x n_stages, row-major; windows CSR over the same order.
 * Returns 0, -1 when a stage had more than cap windows booked at once (call again with a
 * larger cap), or -2 when its own scratch could not be allocated. Once a round leaves the
 * state the round before left, shifted in time, the later rounds' finishes are that shift
 * apart (the same as simulating them). */
int64_t pyaccel_micro_batch_rounds(int64_t *finish, int64_t *stage_free, int64_t *link_free,
                                   int64_t *n_booked, int64_t *bs, int64_t *be, int64_t cap,
                                   const int64_t *occ, const int64_t *busy, const int64_t *lat,
                                   const int64_t *roff, const int64_t *rbusy,
                                   const int64_t *win_ptr, const int64_t *win_start,
                                   const int64_t *win_end, int64_t n_micro, int64_t n_stages,
                                   int64_t rounds);
