/* LPU static-order schedules (twins of pyaccel/kernels/reference_lpu.py, which states the
 * semantics). Cycles throughout.
 * List schedule: start (n) out; free_scratch (n_resources, zeroed by the caller); resource
 * (-1: none), duration, latency per instruction; dependencies in CSR (dep_ptr n+1, dep_idx). */
void pyaccel_lpu_list_schedule(int64_t *start, int64_t *free_scratch, const int64_t *resource,
                               const int64_t *duration, const int64_t *latency,
                               const int64_t *dep_ptr, const int64_t *dep_idx, int64_t n);
/* Link schedule: start, end, arrive (n) out; free_scratch (n_links, zeroed); per transfer its
 * link, bytes and cut-through flag; per link bytes per cycle and latency (cycles). */
void pyaccel_lpu_link_schedule(int64_t *start, int64_t *end, int64_t *arrive,
                               int64_t *free_scratch, const int64_t *link, const int64_t *n_bytes,
                               const int8_t *cut_through, const int64_t *dep_ptr,
                               const int64_t *dep_idx, const double *link_bytes_per_cycle,
                               const int64_t *link_latency, int64_t vector_bytes, int64_t n);
/* Fragment schedule: programs joined from a pool of fragments, each list-scheduled from 0.
 * cycles (n_programs) and marked (the marked instructions' starts, program by program) out;
 * ready_scratch (the longest program's length) and free_scratch (n_resources) scratch;
 * memo_hits (1) out: fragments given by the memo of relative states (see lpu.c). Pool
 * instructions as in the list schedule, dependencies local to their fragment (-2: the previous
 * fragment's output); fragment f is frag_ptr[f]..frag_ptr[f+1], its output frag_out[f], its
 * marks mark_idx[mark_ptr[f]..]; program s is seq[seq_ptr[s]..]. */
void pyaccel_lpu_fragment_schedule(int64_t *cycles, int64_t *marked, int64_t *ready_scratch,
                                   int64_t *free_scratch, int64_t *memo_hits,
                                   const int64_t *resource, const int64_t *duration,
                                   const int64_t *latency, const int64_t *dep_ptr,
                                   const int64_t *dep_idx, const int64_t *frag_ptr,
                                   const int64_t *frag_out, const int64_t *mark_ptr,
                                   const int64_t *mark_idx, const int64_t *seq_ptr,
                                   const int64_t *seq, int64_t n_frags, int64_t n_programs,
                                   int64_t n_resources);
