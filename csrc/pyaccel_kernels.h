/* pyaccel C kernels. This header is also the cffi cdef: no macros, no includes, fixed-width
 * integer types only. Every function takes its outputs first, then inputs and lengths, never
 * allocates and never exits. */

/* Source hash baked in at build time (stale-build check). */
const char *pyaccel_src_hash(void);

/* Total length covered by the union of n half-open intervals [starts[i], ends[i]), which must
 * be sorted by start. Units are whatever the caller uses (cycles). */
int64_t pyaccel_interval_union(const int64_t *starts, const int64_t *ends, int64_t n);
