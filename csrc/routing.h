/* MoE router draws (twin of pyaccel/kernels/reference_routing.py, which states the semantics).
 * route_draws: ranks (n_steps x n x k, row-major) of every step's n rows of k distinct draws by
 * successive sampling under weights (cdf = their running sum), each step from its own stream:
 * numpy.random.default_rng([entropy words..., step]) reproduced bit for bit (SeedSequence
 * pool of 4 words, PCG64, doubles of 53 bits). entropy holds the uint32 words of the leading
 * integers; filled is scratch of 2 n + 4 n_experts + 1. route_counts: per step, span and layer of picks
 * (n_steps x rows x n_layers x top_k), the busiest expert's rows (hot) and the experts with rows
 * (distinct), n_steps x n_spans x n_layers; whole: distinct experts of all rows, n_steps x
 * n_layers; scratch count, stamp and whole_stamp of n_experts. */
void pyaccel_route_draws(int32_t *ranks, int64_t *filled, const uint32_t *entropy,
                         int64_t n_entropy, const int64_t *steps, int64_t n_steps,
                         const double *weights, const double *cdf, int64_t n_experts,
                         int64_t n, int64_t k, int64_t rounds);
void pyaccel_route_counts(int64_t *hot, int64_t *distinct, int64_t *whole, int64_t *count,
                          int64_t *stamp, int64_t *whole_stamp, const int32_t *picks,
                          int64_t n_steps, int64_t rows, int64_t n_layers, int64_t top_k,
                          const int64_t *spans, int64_t n_spans, int64_t n_experts);
