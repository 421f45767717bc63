/* Wafer mesh task-list builders (twins of the Tasks builders in pyaccel/sim/wafer/mesh.py:
 * allreduce and multicast, which state the semantics). They write the task list of a whole line
 * into caller-allocated arrays, with setup cycles and message lengths as the slots -1 (setup),
 * -2 (overhead), -3 (wavelets). counts[] receives: tasks, dependencies, path links, messages.
 * arrive[j]: the task after which PE j holds the result. scratch: 3 x min(seg, n) entries.
 * Returns 0, or -1 when an array's capacity (cap_tasks, cap_deps, cap_links) would be exceeded. */
int64_t pyaccel_allreduce_tasks(int64_t *pe, int64_t *setup, int64_t *stream, int64_t *nwav,
                                int64_t *dep_ptr, int64_t *dep_idx, int64_t *path_ptr,
                                int64_t *path_link, int64_t *arrive, int64_t *counts, int64_t n,
                                int64_t *scratch, int64_t seg, int64_t two_level,
                                int64_t broadcast, int64_t cap_tasks, int64_t cap_deps,
                                int64_t cap_links);
int64_t pyaccel_multicast_tasks(int64_t *pe, int64_t *setup, int64_t *stream, int64_t *nwav,
                                int64_t *dep_ptr, int64_t *dep_idx, int64_t *path_ptr,
                                int64_t *path_link, int64_t *counts, int64_t n, int64_t root,
                                int64_t lead, int64_t cap_tasks, int64_t cap_deps,
                                int64_t cap_links);
