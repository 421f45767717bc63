/* Wafer mesh task-list builders (see mesh_tasks.h; the readable twins are allreduce, multicast
 * and the two template builders in pyaccel/sim/wafer/mesh.py). A line of n PEs: link 2i goes
 * i -> i+1, 2i+1 goes i+1 -> i, 2n+i is the ramp into PE i, 3n+i the ramp out of PE i. */
#include <math.h>
#include <stdint.h>
#include "mesh_tasks.h"

enum { SETUP_SLOT = -1, OVERHEAD_SLOT = -2, NWAV_SLOT = -3 };

/* A task list being written, with its capacities; ok drops to 0 on overflow. */
typedef struct {
    int64_t *pe, *setup, *stream, *nwav, *dep_ptr, *dep_idx, *path_ptr, *path_link;
    int64_t n_line, tasks, deps, links, messages, ramp_only;
    int64_t cap_tasks, cap_deps, cap_links;
    int ok;
} List;

/* Open a task (its deps and links follow with dep()/link(), closed by the next add or end). */
static int64_t add(List *t, int64_t pe, int64_t setup, int64_t stream, int64_t nwav)
{
    if (t->tasks >= t->cap_tasks) {
        t->ok = 0;
        return -1;
    }
    int64_t id = t->tasks++;
    t->pe[id] = pe;
    t->setup[id] = setup;
    t->stream[id] = stream;
    t->nwav[id] = nwav;
    t->dep_ptr[id + 1] = t->deps;
    t->path_ptr[id + 1] = t->links;
    return id;
}

static void dep(List *t, int64_t d)
{
    if (d < 0)
        return;
    if (t->deps >= t->cap_deps) {
        t->ok = 0;
        return;
    }
    t->dep_idx[t->deps++] = d;
    t->dep_ptr[t->tasks] = t->deps;
}

static void link(List *t, int64_t l)
{
    if (t->links >= t->cap_links) {
        t->ok = 0;
        return;
    }
    int64_t first = t->links == t->path_ptr[t->tasks - 1];
    t->path_link[t->links++] = l;
    t->path_ptr[t->tasks] = t->links;
    if (first)
        t->messages++;
}

static int64_t ramp_in(const List *t, int64_t i) { return 2 * t->n_line + i; }
static int64_t ramp_out(const List *t, int64_t i) { return 3 * t->n_line + i; }

/* Mesh links from PE a's router to PE b's. */
static void route(List *t, int64_t a, int64_t b)
{
    if (b >= a)
        for (int64_t i = a; i < b; i++)
            link(t, 2 * i);
    else
        for (int64_t i = a - 1; i >= b; i--)
            link(t, 2 * i + 1);
}

/* Out of PE a, across the mesh, into PE b. */
static void path(List *t, int64_t a, int64_t b)
{
    link(t, ramp_out(t, a));
    route(t, a, b);
    link(t, ramp_in(t, b));
}

static void set(int64_t *arrive, int64_t j, int64_t id)
{
    if (arrive)
        arrive[j] = id;
}

/* The multicast of mesh.py: a send out of root's ramp (after task `after`, if >= 0), then
 * router forwards both ways, each handing the wavelets to its PE over the ramp in. */
static void multicast(List *t, int64_t *arrive, int64_t root, int64_t lo, int64_t hi,
                      int64_t setup, int64_t after)
{
    int64_t send = add(t, root, setup, 1, NWAV_SLOT);
    dep(t, after);
    link(t, ramp_out(t, root));
    t->ramp_only++;
    set(arrive, root, add(t, root, 0, 0, 0));
    for (int dir = 0; dir < 2; dir++) {
        int64_t stop = dir == 0 ? lo : hi - 1, step = dir == 0 ? -1 : 1;
        int64_t prev = send, j = root;
        while (j != stop) {
            int64_t fwd = add(t, -1, 0, 0, NWAV_SLOT);
            dep(t, prev);
            route(t, j, j + step);
            prev = fwd;
            j += step;
            int64_t into = add(t, -1, 0, 0, NWAV_SLOT);
            dep(t, prev);
            link(t, ramp_in(t, j));
            t->ramp_only++;
            set(arrive, j, into);
        }
    }
}

/* mesh.tree_groups: about sqrt(n) groups (n >= 1; sqrt of an integer is never a tie). */
static int64_t tree_groups(int64_t n)
{
    int64_t g = (int64_t)llround(sqrt((double)n));
    return g < 1 ? 1 : (g > n ? n : g);
}

/* One streaming chain j = from, from+step, ... until (not including) r, each sending to its
 * neighbour towards r; returns its last task (or -1 when empty). */
static int64_t chain(List *t, int64_t *arrive, int64_t from, int64_t r, int64_t step)
{
    int64_t prev = -1;
    for (int64_t j = from; j != r; j += step) {
        int64_t id = add(t, j, SETUP_SLOT, 1, NWAV_SLOT);
        dep(t, prev);
        path(t, j, j + step);
        set(arrive, j, id);
        prev = id;
    }
    return prev;
}

/* mesh.allreduce over PEs lo..hi-1 with `groups` groups. Roots and the (up to two) chain ends
 * into each root use roots[], into[] (caller's scratch of `groups` and 2 x `groups`). */
static void allreduce(List *t, int64_t *arrive, int64_t lo, int64_t hi, int64_t groups,
                      int64_t broadcast, int64_t *roots, int64_t *into)
{
    int64_t size = hi - lo;
    if (size == 1) {
        set(arrive, lo, add(t, lo, SETUP_SLOT, 0, 0));
        return;
    }
    int64_t g = groups < 1 ? 1 : (groups > size ? size : groups);
    for (int64_t k = 0; k < g; k++) {
        int64_t g0 = lo + (size * k) / g, g1 = lo + (size * (k + 1)) / g;
        int64_t r = g0 + (g1 - g0) / 2;
        roots[k] = r;
        into[2 * k] = chain(t, arrive, g0, r, 1);
        into[2 * k + 1] = chain(t, arrive, g1 - 1, r, -1);
    }
    int64_t c = g / 2, ends[2] = {-1, -1};
    for (int side = 0; side < 2; side++) {
        int64_t first = side == 0 ? 0 : g - 1, stop = c, step = side == 0 ? 1 : -1;
        int64_t prev = -1;
        for (int64_t k = first; k != stop; k += step) {
            int64_t id = add(t, roots[k], SETUP_SLOT, 1, NWAV_SLOT);
            dep(t, into[2 * k]);
            dep(t, into[2 * k + 1]);
            dep(t, prev);
            path(t, roots[k], roots[k + step]);
            set(arrive, roots[k], id);
            prev = id;
        }
        ends[side] = prev;
    }
    int64_t final = add(t, roots[c], SETUP_SLOT, 1, 0);
    dep(t, into[2 * c]);
    dep(t, into[2 * c + 1]);
    dep(t, ends[0]);
    dep(t, ends[1]);
    set(arrive, roots[c], final);
    if (broadcast)
        multicast(t, arrive, roots[c], lo, hi, OVERHEAD_SLOT, final);
}

static List open_list(int64_t *pe, int64_t *setup, int64_t *stream, int64_t *nwav,
                      int64_t *dep_ptr, int64_t *dep_idx, int64_t *path_ptr, int64_t *path_link,
                      int64_t n_line, int64_t cap_tasks, int64_t cap_deps, int64_t cap_links)
{
    List t = {pe, setup, stream, nwav, dep_ptr, dep_idx, path_ptr, path_link, n_line,
              0, 0, 0, 0, 0, cap_tasks, cap_deps, cap_links, 1};
    dep_ptr[0] = 0;
    path_ptr[0] = 0;
    return t;
}

static int64_t close_list(const List *t, int64_t *counts)
{
    counts[0] = t->tasks;
    counts[1] = t->deps;
    counts[2] = t->links;
    counts[3] = t->messages - t->ramp_only;
    return t->ok ? 0 : -1;
}

int64_t pyaccel_allreduce_tasks(int64_t *pe, int64_t *setup, int64_t *stream, int64_t *nwav,
                                int64_t *dep_ptr, int64_t *dep_idx, int64_t *path_ptr,
                                int64_t *path_link, int64_t *arrive, int64_t *counts, int64_t n,
                                int64_t *scratch, int64_t seg, int64_t two_level,
                                int64_t broadcast, int64_t cap_tasks, int64_t cap_deps,
                                int64_t cap_links)
{
    if (n < 1 || seg < 1)
        return -1;
    List t = open_list(pe, setup, stream, nwav, dep_ptr, dep_idx, path_ptr, path_link, n,
                       cap_tasks, cap_deps, cap_links);
    int64_t *roots = scratch, *into = scratch + (seg < n ? seg : n);
    for (int64_t lo = 0; lo < n && t.ok; lo += seg) {
        int64_t hi = lo + seg < n ? lo + seg : n;
        int64_t g = two_level ? tree_groups(hi - lo) : 1;
        allreduce(&t, arrive, lo, hi, g, broadcast, roots, into);
    }
    return close_list(&t, counts);
}

int64_t pyaccel_multicast_tasks(int64_t *pe, int64_t *setup, int64_t *stream, int64_t *nwav,
                                int64_t *dep_ptr, int64_t *dep_idx, int64_t *path_ptr,
                                int64_t *path_link, int64_t *counts, int64_t n, int64_t root,
                                int64_t lead, int64_t cap_tasks, int64_t cap_deps,
                                int64_t cap_links)
{
    if (n < 1 || root < 0 || root >= n || lead < 0)
        return -1;
    List t = open_list(pe, setup, stream, nwav, dep_ptr, dep_idx, path_ptr, path_link,
                       n + lead, cap_tasks, cap_deps, cap_links);
    int64_t before = -1, first = SETUP_SLOT;
    if (lead) {
        before = add(&t, 0, SETUP_SLOT, 0, NWAV_SLOT);
        path(&t, 0, lead + root);
        first = OVERHEAD_SLOT;
    }
    multicast(&t, 0, lead + root, lead, lead + n, first, before);
    return close_list(&t, counts);
}
