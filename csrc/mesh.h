/* Wafer mesh engine: PE tasks and wavelet messages over mesh links (twin of
 * pyaccel/kernels/reference_mesh.py, which states the semantics). Outputs first: head/tail
 * arrival cycle per task, reserved cycles per link. Returns 0, or -1 on a bad index. */
int64_t pyaccel_mesh_run(int64_t *head, int64_t *tail, int64_t *busy, int64_t *pe_free,
                         int64_t *link_free, const int64_t *task_pe, const int64_t *task_setup,
                         const int64_t *task_stream, const int64_t *task_nwav,
                         const int64_t *dep_ptr, const int64_t *dep_idx, const int64_t *path_ptr,
                         const int64_t *path_link, const int64_t *link_lat, int64_t n_tasks,
                         int64_t n_links, int64_t n_pes, int64_t pass_lat);
