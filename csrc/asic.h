/* ASIC spatial pipeline: tokens of n_users rows through n_stages stages, step by step (twin of
 * pyaccel/kernels/reference_asic.py, which states the semantics). Outputs first: finish
 * (n_steps x n_users), starts (recorded steps x n_users x n_stages); scratch unit_free (n_units)
 * and ready (n_users). Inputs row-major: a stage's busy cycles are occ_base[s], or for a stage
 * with occ_col_of[s] >= 0 that column of occ_cols ((n_steps + group - 1) x n_cols: positions, a
 * group's row j of step t at position t + j); res n_stages x res_width
 * (-1 padding); record n_steps; ex_layer n_stages (-1: not routed); picks n_steps x n_users x
 * n_layers x top_k; ex_unit n_stages x n_experts; stages from tail on are taken only by each
 * group's last row (starts -1 where a row skips them). */
void pyaccel_asic_pipeline(int64_t *finish, int64_t *starts, int64_t *unit_free, int64_t *ready,
                           const int64_t *occ_base, const int64_t *occ_cols,
                           const int64_t *occ_col_of, int64_t n_cols, const int64_t *lat,
                           const int64_t *res,
                           int64_t res_width, const int8_t *record, const int64_t *ex_layer,
                           const int64_t *picks, int64_t n_layers, int64_t top_k,
                           const int64_t *ex_unit, int64_t n_experts, int64_t n_steps,
                           int64_t n_stages, int64_t n_users, int64_t group, int64_t tail);
