/* neighbor.c: builds the receiver-sorted (CSR) neighbor graph with periodic images.
 *
 * Method: atoms are mapped to fractional coordinates of an "effective cell" (the periodic cell
 * rows; non-periodic directions get synthetic unit rows orthogonal to the periodic ones, so a
 * zero or garbage cell is fine there), wrapped into [0,1) along periodic directions and binned
 * into a cell list whose bins are at least the search radius thick (perpendicular width). Two
 * atoms closer than r then differ by at most r/d_k in fractional coordinate k (d_k = perpendicular
 * width of the cell along k), so for each receiver we scan the receiver's bin +-m_k bins in each
 * direction; in periodic directions these "virtual" bins wrap around and carry an image shift, so
 * cells thinner than the cutoff (m_k > 1) are handled by the same loop.
 *
 * Candidates are first tested with the wrapped positions (cheap, slightly enlarged radius), then
 * the edge is decided with the canonical vector from the ORIGINAL positions,
 *     v = x_j - (x_i + S.cell),   S.cell = (S0*a + S1*b) + S2*c   (per component, no FMA),
 * and |v|^2 < cutoff^2, so the result does not depend on binning, wrapping or thread count.
 *
 * Two passes over receivers (count, then fill) keep peak memory at the size of the output; each
 * row is sorted by (sender, S0, S1, S2). With senders_only (an MD code's candidate pairs: 4 bytes an
 * edge instead of 40) one pass suffices: each thread keeps its sorted rows of senders in an arena of
 * its own, and the rows are copied into place once all are counted (the scan was two thirds of a
 * two-pass build, and the fill's sort and 40-byte records most of the rest). Rows are independent,
 * so the OpenMP loops give bitwise identical results for any number of threads. */
#include "graph/neighbor.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/error.h"

/* Atoms closer than this (A) are treated as overlapping: the structure is broken. */
#define OVERLAP_DIST 1e-8
/* Largest number of images scanned in one direction; beyond this the cell is degenerate. */
#define MAX_IMAGES_PER_DIR 100000
/* Wrap counts are bounded so that image shifts always fit in int32. */
#define MAX_WRAP (1 << 29)
/* Bins per search radius in each direction. 2 (5x5x5 bins of r/2 instead of 3x3x3 of r) scans
 * half the volume but measured ~10% slower on liquid-density boxes: per-bin overhead wins. */
#define BIN_DIVISIONS 1
/* Candidates prefiltered per batch in the inner loop. */
#define SCAN_CHUNK 128

/* One edge of a row while it is being sorted. */
typedef struct edge_rec {
    uint64_t key; /* packed (sender, bin shift): same order as (sender, S); see scan_receiver */
    int32_t sender;
    int32_t s[3];
    double v[3];
} edge_rec;

/* Read-only state shared by the count and fill passes. */
typedef struct search_ctx {
    const double *x; /* original positions [n*3], in bin order (locality) */
    double cellz[9]; /* cell with non-periodic rows zeroed: used for S.cell */
    double eff[9];   /* effective cell rows used for binning / wrapped positions */
    int periodic[3];
    int64_t nb[3];            /* bins per direction */
    int64_t m[3];             /* bin offsets scanned per direction */
    const int64_t *bin_start; /* [nbins+1] */
    const int64_t *atom_bin;  /* [n] bin of each atom, in bin order */
    const int32_t *sorted_id; /* [n] atoms in bin order (ascending index within a bin) */
    int64_t n;
    const double *xw;    /* [3][n] wrapped positions (x, y, z arrays), in bin order */
    const int32_t *wrap; /* [n*3] integer wrap counts, in bin order */
    int key_bits[3];     /* bits of the packed per-direction bin shift in edge_rec.key */
    double r2_pre;       /* prefilter radius^2 (wrapped positions) */
    double r2_cut;       /* cutoff^2 (canonical vector) */
} search_ctx;

/* First overlapping pair found, ordered by (receiver, sender, shift) so the report is
 * deterministic. */
typedef struct overlap_info {
    int found;
    int32_t recv, send;
    int32_t s[3];
    double dist;
} overlap_info;

static int rec_less(const edge_rec *a, const edge_rec *b) {
    if (a->sender != b->sender) return a->sender < b->sender;
    if (a->s[0] != b->s[0]) return a->s[0] < b->s[0];
    if (a->s[1] != b->s[1]) return a->s[1] < b->s[1];
    return a->s[2] < b->s[2];
}

static int key_less(int32_t ra, int32_t sa, const int32_t *ta, int32_t rb, int32_t sb,
                    const int32_t *tb) {
    if (ra != rb) return ra < rb;
    if (sa != sb) return sa < sb;
    for (int k = 0; k < 3; ++k)
        if (ta[k] != tb[k]) return ta[k] < tb[k];
    return 0;
}

/* Keeps in *all the first overlap of *ov and *all (by key_less: the same for any thread count). */
static void keep_first_overlap(overlap_info *all, const overlap_info *ov) {
    if (ov->found && (!all->found || key_less(ov->recv, ov->send, ov->s, all->recv, all->send, all->s))) *all = *ov;
}

/* Threads of the builds' parallel loops (one for small systems) and this thread's number. */
static int build_threads(int64_t n) {
#ifdef _OPENMP
    return n >= 512 ? omp_get_max_threads() : 1;
#else
    (void)n;
    return 1;
#endif
}
static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Stable bottom-up merge sort (insertion-sorted runs of 16); O(n log n) even for huge rows.
 * Keys within a row are unique, so any correct sort gives the same order. */
static void sort_row(edge_rec *a, edge_rec *tmp, int64_t n) {
    const int64_t run = 16;
    for (int64_t lo = 0; lo < n; lo += run) {
        int64_t hi = lo + run < n ? lo + run : n;
        for (int64_t i = lo + 1; i < hi; ++i) {
            edge_rec key = a[i];
            int64_t j = i - 1;
            while (j >= lo && rec_less(&key, &a[j])) {
                a[j + 1] = a[j];
                --j;
            }
            a[j + 1] = key;
        }
    }
    edge_rec *src = a, *dst = tmp;
    for (int64_t width = run; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = rec_less(&src[j], &src[i]) ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        edge_rec *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
}

/* The same merge sort on plain 64-bit keys (the fast path: keys pack sender, shift, position). */
static void sort_keys(uint64_t *a, uint64_t *tmp, int64_t n) {
    const int64_t run = 8;
    for (int64_t lo = 0; lo < n; lo += run) {
        int64_t hi = lo + run < n ? lo + run : n;
        for (int64_t i = lo + 1; i < hi; ++i) {
            uint64_t key = a[i];
            int64_t j = i - 1;
            while (j >= lo && key < a[j]) {
                a[j + 1] = a[j];
                --j;
            }
            a[j + 1] = key;
        }
    }
    uint64_t *src = a, *dst = tmp;
    for (int64_t width = run; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) { /* branch-free: the comparison is unpredictable */
                const uint64_t x = src[i], y = src[j];
                const int take_j = y < x;
                dst[k++] = take_j ? y : x;
                j += take_j;
                i += !take_j;
            }
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
}

/* Bits needed to store values 0 .. count-1. */
static int bits_for(uint64_t count) {
    int b = 0;
    while (b < 64 && (count - 1) >> b) ++b;
    return b;
}

static int64_t floor_div(int64_t a, int64_t b) {
    /* C division truncates toward zero; shift down for negative quotients. */
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

/* Steps from virtual bin (r, s) to the next one along dim, wrapping in periodic directions. */
static inline void next_bin(const search_ctx *c, int dim, int64_t *r, int64_t *s) {
    if (++*r == c->nb[dim] && c->periodic[dim]) {
        *r = 0;
        ++*s;
    }
}

/* Scans all candidates of the receiver at bin-order position k. Returns the number of edges;
 * writes them to out (unsorted) when out != NULL, or only their keys (edge_rec.key) to the first
 * cap places of keys when keys != NULL. Records the smallest overlap in *ov. */
static int64_t scan_receiver(const search_ctx *c, int64_t k, edge_rec *out, uint64_t *keys, int64_t cap,
                             overlap_info *ov) {
    const int32_t j = c->sorted_id[k];
    const int64_t bj = c->atom_bin[k];
    const int64_t b[3] = {bj / (c->nb[1] * c->nb[2]), (bj / c->nb[2]) % c->nb[1], bj % c->nb[2]};
    const double *wx = c->xw, *wy = c->xw + c->n, *wz = c->xw + 2 * c->n;
    const double xwj[3] = {wx[k], wy[k], wz[k]};
    const double *xj = c->x + 3 * k;
    const double *xs = c->x, *cz = c->cellz;
    const int32_t *wraps = c->wrap, *ids = c->sorted_id;
    const double r2_pre = c->r2_pre, r2_cut = c->r2_cut;
    const int32_t *wj = c->wrap + 3 * k;
    int64_t count = 0;

    /* Virtual bin b+o (o in [-m, m]) = real bin r plus s whole cells (periodic directions);
     * walk r, s incrementally instead of dividing per bin. */
    int64_t r_first[3], s_first[3];
    for (int dim = 0; dim < 3; ++dim) {
        int64_t v = b[dim] - c->m[dim];
        s_first[dim] = c->periodic[dim] ? floor_div(v, c->nb[dim]) : 0;
        r_first[dim] = v - s_first[dim] * c->nb[dim];
    }
    int64_t r0 = r_first[0], s0 = s_first[0];
    for (int64_t o0 = -c->m[0]; o0 <= c->m[0]; ++o0, next_bin(c, 0, &r0, &s0)) {
        if (r0 < 0 || r0 >= c->nb[0]) continue; /* outside a non-periodic range */
        double t0[3];
        for (int d = 0; d < 3; ++d) t0[d] = (double)s0 * c->eff[d];
        int64_t r1 = r_first[1], s1 = s_first[1];
        for (int64_t o1 = -c->m[1]; o1 <= c->m[1]; ++o1, next_bin(c, 1, &r1, &s1)) {
            if (r1 < 0 || r1 >= c->nb[1]) continue;
            double t1[3];
            for (int d = 0; d < 3; ++d) t1[d] = t0[d] + (double)s1 * c->eff[3 + d];
            /* Along the last direction, consecutive bins with the same shift are contiguous in
             * memory: scan each such run of bins as one range. */
            const int64_t row = (r0 * c->nb[1] + r1) * c->nb[2];
            int64_t r2 = r_first[2], s2 = s_first[2];
            for (int64_t o2 = -c->m[2]; o2 <= c->m[2];) {
                if (r2 < 0) { /* before a non-periodic range */
                    o2 -= r2;
                    r2 = 0;
                    continue;
                }
                if (r2 >= c->nb[2]) break; /* past a non-periodic range */
                int64_t len = c->m[2] - o2 + 1;
                if (len > c->nb[2] - r2) len = c->nb[2] - r2;
                const int64_t seg_begin = c->bin_start[row + r2],
                              q_end = c->bin_start[row + r2 + len];
                const int64_t seg_s2 = s2;
                o2 += len;
                r2 += len;
                if (r2 == c->nb[2] && c->periodic[2]) {
                    r2 = 0;
                    ++s2;
                }
                /* Wrapped sender image sits at xw_i + s.eff; compare against xw_j - s.eff. */
                double base[3];
                for (int d = 0; d < 3; ++d)
                    base[d] = xwj[d] - (t1[d] + (double)seg_s2 * c->eff[6 + d]);
                const int self_shift = (s0 == 0 && s1 == 0 && seg_s2 == 0);
                /* Prefilter a chunk branch-free (hit rate is low, mispredictions dominate
                 * otherwise), then handle the few hits. */
                for (int64_t q0 = seg_begin; q0 < q_end; q0 += SCAN_CHUNK) {
                    const int64_t q1 = q0 + SCAN_CHUNK < q_end ? q0 + SCAN_CHUNK : q_end;
                    int32_t hits[SCAN_CHUNK];
                    int nh = 0;
                    for (int64_t q = q0; q < q1; ++q) {
                        double dx = base[0] - wx[q], dy = base[1] - wy[q], dz = base[2] - wz[q];
                        hits[nh] = (int32_t)(q - q0);
                        nh += (dx * dx + dy * dy + dz * dz < r2_pre);
                    }
                    for (int h = 0; h < nh; ++h) {
                        const int64_t q = q0 + hits[h];
                        if (q == k && self_shift) continue; /* the atom itself */
                        /* Shift relative to the original (unwrapped) positions. */
                        const int32_t *wi = wraps + 3 * q;
                        const int32_t S[3] = {(int32_t)(s0 + wj[0] - wi[0]),
                                              (int32_t)(s1 + wj[1] - wi[1]),
                                              (int32_t)(seg_s2 + wj[2] - wi[2])};
                        const int32_t i = ids[q];
                        const double *xi = xs + 3 * q;
                        double v[3];
                        for (int d = 0; d < 3; ++d) {
                            double t = (double)S[0] * cz[d] + (double)S[1] * cz[3 + d];
                            t = t + (double)S[2] * cz[6 + d];
                            v[d] = xj[d] - (xi[d] + t);
                        }
                        double d2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
                        if (d2 < OVERLAP_DIST * OVERLAP_DIST) {
                            if (!ov->found || key_less(j, i, S, ov->recv, ov->send, ov->s)) {
                                ov->found = 1;
                                ov->recv = j;
                                ov->send = i;
                                memcpy(ov->s, S, sizeof S);
                                ov->dist = sqrt(d2);
                            }
                            continue;
                        }
                        if (d2 >= r2_cut) continue;
                        if (out || keys) {
                            /* For a fixed sender, S - s is constant, so (sender, s - s_first) sorts
                             * like (sender, S). The fill pass checks that the key fits. */
                            const uint64_t key =
                                ((((uint64_t)i << c->key_bits[0] | (uint64_t)(s0 - s_first[0]))
                                      << c->key_bits[1] |
                                  (uint64_t)(s1 - s_first[1]))
                                 << c->key_bits[2]) |
                                (uint64_t)(seg_s2 - s_first[2]);
                            if (out) {
                                edge_rec *e = &out[count];
                                e->key = key;
                                e->sender = i;
                                memcpy(e->s, S, sizeof S);
                                memcpy(e->v, v, sizeof v);
                            } else if (count < cap) {
                                keys[count] = key;
                            }
                        }
                        ++count;
                    }
                }
            }
        }
    }
    return count;
}

static double dot3(const double *a, const double *b) {
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

static void cross3(const double *a, const double *b, double *out) {
    out[0] = a[1] * b[2] - a[2] * b[1];
    out[1] = a[2] * b[0] - a[0] * b[2];
    out[2] = a[0] * b[1] - a[1] * b[0];
}

static double norm3(const double *a) { return sqrt(dot3(a, a)); }

static void normalize3(double *a) {
    double n = norm3(a);
    for (int d = 0; d < 3; ++d) a[d] /= n;
}

/* Grows the arrays to hold n_nodes nodes and n_edges edges (1.5x geometric growth): row_ptr,
 * sender, and shift and vec unless senders_only. The recorded capacity of shift and vec only
 * changes once both have grown. */
static cgq_status reserve(cgq_neighbor_list *nl, int64_t n_nodes, int64_t n_edges, int senders_only) {
    if (!nl->row_ptr || n_nodes > nl->node_capacity) {
        int64_t cap = nl->row_ptr ? nl->node_capacity + nl->node_capacity / 2 : 0;
        if (cap < n_nodes) cap = n_nodes;
        int64_t *p = realloc(nl->row_ptr, (size_t)(cap + 1) * sizeof *p);
        if (!p)
            return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY,
                            "neighbor list: cannot allocate row pointers for %lld atoms",
                            (long long)n_nodes);
        nl->row_ptr = p;
        nl->node_capacity = cap;
    }
    const double gb = (double)n_edges * (senders_only ? 4.0 : 40.0) / 1e9;
    if (n_edges > nl->edge_capacity || (n_edges > 0 && !nl->sender)) {
        int64_t cap = nl->edge_capacity + nl->edge_capacity / 2;
        if (cap < n_edges) cap = n_edges;
        int32_t *s = realloc(nl->sender, (size_t)cap * sizeof *s);
        if (!s) goto oom;
        nl->sender = s;
        nl->edge_capacity = cap;
    }
    if (!senders_only && (n_edges > nl->geom_capacity || (n_edges > 0 && (!nl->shift || !nl->vec)))) {
        int64_t cap = nl->geom_capacity + nl->geom_capacity / 2;
        if (cap < n_edges) cap = n_edges;
        int32_t *sh = realloc(nl->shift, (size_t)cap * 3 * sizeof *sh);
        if (sh) nl->shift = sh;
        double *v = sh ? realloc(nl->vec, (size_t)cap * 3 * sizeof *v) : NULL;
        if (!v) goto oom;
        nl->vec = v;
        nl->geom_capacity = cap;
    }
    return CGQ_STATUS_OK;
oom:
    return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY,
                    "neighbor list: cannot allocate %lld edges (%.1f GB); reduce the system size or the "
                    "cutoff",
                    (long long)n_edges, gb);
}

/* Builds the effective cell (periodic rows as given, synthetic orthonormal rows elsewhere) and
 * checks that the periodic rows span a non-degenerate lattice. */
static cgq_status effective_cell(const double cell[9], const int periodic[3], double eff[9]) {
    static const char *names = "abc";
    int np = periodic[0] + periodic[1] + periodic[2];
    memset(eff, 0, 9 * sizeof *eff);
    for (int k = 0; k < 3; ++k) {
        if (!periodic[k]) continue;
        for (int d = 0; d < 3; ++d) {
            if (!isfinite(cell[3 * k + d]))
                return cgq_fail(CGQ_STATUS_BAD_INPUT,
                                "cell vector %c = (%g, %g, %g) is not finite but direction %c is "
                                "periodic; check the cell",
                                names[k], cell[3 * k], cell[3 * k + 1], cell[3 * k + 2], names[k]);
            eff[3 * k + d] = cell[3 * k + d];
        }
    }
    if (np == 0) {
        eff[0] = eff[4] = eff[8] = 1.0;
        return CGQ_STATUS_OK;
    }
    if (np == 2) {
        int k = !periodic[0] ? 0 : !periodic[1] ? 1 : 2;
        cross3(&eff[3 * ((k + 1) % 3)], &eff[3 * ((k + 2) % 3)], &eff[3 * k]);
        if (norm3(&eff[3 * k]) > 0) normalize3(&eff[3 * k]);
    } else if (np == 1) {
        int p = periodic[0] ? 0 : periodic[1] ? 1 : 2;
        const double *a = &eff[3 * p];
        if (norm3(a) > 0) {
            /* u = a x (axis least aligned with a), w = a x u: both orthogonal to a. */
            int ax = 0;
            for (int d = 1; d < 3; ++d)
                if (fabs(a[d]) < fabs(a[ax])) ax = d;
            double e[3] = {0, 0, 0};
            e[ax] = 1.0;
            double *u = &eff[3 * ((p + 1) % 3)], *w = &eff[3 * ((p + 2) % 3)];
            cross3(a, e, u);
            normalize3(u);
            cross3(a, u, w);
            normalize3(w);
        }
    }
    double bc[3];
    cross3(&eff[3], &eff[6], bc);
    double det = dot3(&eff[0], bc);
    if (!(fabs(det) >= 1e-12)) {
        char pstr[8] = {0};
        int n = 0;
        for (int k = 0; k < 3; ++k)
            if (periodic[k]) pstr[n++] = names[k];
        return cgq_fail(
            CGQ_STATUS_BAD_INPUT,
            "the periodic cell vectors (%s) are degenerate: a = (%g, %g, %g), b = (%g, %g, "
            "%g), c = (%g, %g, %g) span no %s (volume/area/length %.3g); give a proper "
            "cell or switch pbc off in that direction",
            pstr, cell[0], cell[1], cell[2], cell[3], cell[4], cell[5], cell[6], cell[7], cell[8],
            np == 3   ? "volume"
            : np == 2 ? "area"
                      : "length",
            fabs(det));
    }
    return CGQ_STATUS_OK;
}

static void invert3(const double *m, double *inv) {
    /* Rows of m are lattice vectors; x = f.m (row vector) so f = x.inv. */
    double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                 m[2] * (m[3] * m[7] - m[4] * m[6]);
    inv[0] = (m[4] * m[8] - m[5] * m[7]) / det;
    inv[1] = (m[2] * m[7] - m[1] * m[8]) / det;
    inv[2] = (m[1] * m[5] - m[2] * m[4]) / det;
    inv[3] = (m[5] * m[6] - m[3] * m[8]) / det;
    inv[4] = (m[0] * m[8] - m[2] * m[6]) / det;
    inv[5] = (m[2] * m[3] - m[0] * m[5]) / det;
    inv[6] = (m[3] * m[7] - m[4] * m[6]) / det;
    inv[7] = (m[1] * m[6] - m[0] * m[7]) / det;
    inv[8] = (m[0] * m[4] - m[1] * m[3]) / det;
}

/* The error for the first overlapping pair found; atoms are named by the caller's ids when it gave
 * them (e.g. LAMMPS tags), else by index. */
static cgq_status overlap_error(const cgq_neighbor_list *nl, const double *positions, const overlap_info *ov) {
    const double *pi = positions + 3 * (int64_t)ov->send, *pj = positions + 3 * (int64_t)ov->recv;
    const long long id_r = nl->ids ? (long long)nl->ids[ov->recv] : (long long)ov->recv;
    const long long id_s = nl->ids ? (long long)nl->ids[ov->send] : (long long)ov->send;
    if (ov->send == ov->recv)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "atom %lld is %.3g A from its own periodic image (shift %d %d %d), "
                        "closer than %g A; the cell is degenerate, check the cell",
                        id_r, ov->dist, ov->s[0], ov->s[1], ov->s[2], OVERLAP_DIST);
    return cgq_fail(CGQ_STATUS_BAD_INPUT,
                    "atoms %lld at (%g, %g, %g) and %lld at (%g, %g, %g) (taken with image "
                    "shift %d %d %d) overlap: they are %.3g A apart, closer than %g A; "
                    "remove duplicate atoms from the input structure",
                    id_r, pj[0], pj[1], pj[2], id_s, pi[0], pi[1], pi[2], ov->s[0], ov->s[1], ov->s[2],
                    ov->dist, OVERLAP_DIST);
}

/* Grows *p (elements of elem bytes, capacity *cap) to hold need, at least doubling; 0 when out of
 * memory (*p is kept). */
static int grow_to(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 1;
    const int64_t want = need > 2 * *cap ? need : 2 * *cap;
    void *q = realloc(*p, (size_t)want * elem);
    if (!q) return 0;
    *p = q;
    *cap = want;
    return 1;
}

/* One thread's rows of senders (senders_only), one after another, and its scratch for the row
 * being scanned and sorted. */
typedef struct row_arena {
    int32_t *send;
    int64_t n, cap;
    uint64_t *keys, *ktmp;
    int64_t kcap, tcap;
    int failed;
} row_arena;

/* The senders_only build after binning: one pass, each thread scanning receivers into its keys
 * (regrown and scanned again when a row is longer than any before on that thread), sorting them
 * and appending the senders to its arena; then row_ptr and the rows copied into place. */
static cgq_status build_senders_only(cgq_neighbor_list *nl, const search_ctx *c, int64_t n, int64_t n_receivers,
                                     const double *positions) {
    const int shift_bits = c->key_bits[0] + c->key_bits[1] + c->key_bits[2], nthreads = build_threads(n);
    cgq_status status = CGQ_STATUS_OK;
    row_arena *ar = calloc((size_t)nthreads, sizeof *ar);
    int32_t *row_thread = malloc((size_t)n * sizeof *row_thread);
    int64_t *row_off = malloc((size_t)n * sizeof *row_off), *row_ptr = nl->row_ptr;
    overlap_info ov_all;
    memset(&ov_all, 0, sizeof ov_all);
    if (!ar || !row_thread || !row_off) goto oom;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
#endif
    {
        const int tid = thread_id();
        row_arena *A = &ar[tid];
        overlap_info ov;
        memset(&ov, 0, sizeof ov);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 64)
#endif
        for (int64_t k = 0; k < n; ++k) {
            const int32_t id = c->sorted_id[k];
            row_ptr[id + 1] = 0;
            if (id >= n_receivers || A->failed) continue; /* a sender only: empty row */
            int64_t cnt = scan_receiver(c, k, NULL, A->keys, A->kcap, &ov);
            if (cnt > A->kcap) {
                if (!grow_to((void **)&A->keys, &A->kcap, cnt, sizeof *A->keys) ||
                    !grow_to((void **)&A->ktmp, &A->tcap, A->kcap, sizeof *A->ktmp)) {
                    A->failed = 1;
                    continue;
                }
                cnt = scan_receiver(c, k, NULL, A->keys, A->kcap, &ov);
            }
            if (!grow_to((void **)&A->send, &A->cap, A->n + cnt, sizeof *A->send)) {
                A->failed = 1;
                continue;
            }
            sort_keys(A->keys, A->ktmp, cnt);
            for (int64_t e = 0; e < cnt; ++e) A->send[A->n + e] = (int32_t)(A->keys[e] >> shift_bits);
            row_thread[id] = tid;
            row_off[id] = A->n;
            row_ptr[id + 1] = cnt;
            A->n += cnt;
        }
#ifdef _OPENMP
#pragma omp critical(cgq_neighbor_reduce)
#endif
        keep_first_overlap(&ov_all, &ov);
    }
    for (int t = 0; t < nthreads; ++t)
        if (ar[t].failed) goto oom;
    if (ov_all.found) {
        status = overlap_error(nl, positions, &ov_all);
        goto done;
    }
    row_ptr[0] = 0;
    for (int64_t j = 0; j < n; ++j) row_ptr[j + 1] += row_ptr[j];
    status = reserve(nl, n, row_ptr[n], 1);
    if (status != CGQ_STATUS_OK) goto done;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
    for (int64_t j = 0; j < n; ++j) {
        const int64_t cnt = row_ptr[j + 1] - row_ptr[j];
        if (cnt) memcpy(nl->sender + row_ptr[j], ar[row_thread[j]].send + row_off[j], (size_t)cnt * sizeof(int32_t));
    }
    nl->n_nodes = n;
    nl->n_edges = row_ptr[n];
    goto done;
oom:
    status = cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "neighbor list: out of memory building the candidate pairs of %lld atoms",
                      (long long)n);
done:
    if (ar)
        for (int t = 0; t < nthreads; ++t) free(ar[t].send), free(ar[t].keys), free(ar[t].ktmp);
    free(ar);
    free(row_thread);
    free(row_off);
    if (status != CGQ_STATUS_OK) nl->row_ptr[0] = 0;
    return status;
}

cgq_status cgq_neighbor_list_build(cgq_neighbor_list *nl, int64_t n_atoms, const double *positions,
                                   const double cell[9], const int32_t pbc[3], double cutoff) {
    return cgq_neighbor_list_build_receivers(nl, n_atoms, n_atoms, positions, cell, pbc, cutoff);
}

cgq_status cgq_neighbor_list_build_receivers(cgq_neighbor_list *nl, int64_t n_atoms, int64_t n_receivers,
                                             const double *positions, const double cell[9], const int32_t pbc[3],
                                             double cutoff) {
    static const char *names = "abc";
    if (!nl) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "neighbor list: nl is NULL");
    nl->n_nodes = 0;
    nl->n_edges = 0;
    if (nl->row_ptr) nl->row_ptr[0] = 0;
    if (n_atoms < 0 || n_atoms > INT32_MAX)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "neighbor list: n_atoms = %lld is out of range (0 .. %d)",
                        (long long)n_atoms, INT32_MAX);
    if (!(isfinite(cutoff) && cutoff > 0))
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "neighbor list: cutoff = %g must be a positive finite distance in A",
                        cutoff);
    if (n_receivers < 0 || n_receivers > n_atoms)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "neighbor list: n_receivers = %lld is out of range (0 .. %lld)",
                        (long long)n_receivers, (long long)n_atoms);
    if (n_atoms > 0 && !positions)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "neighbor list: positions is NULL");
    int periodic[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) periodic[k] = pbc && pbc[k] != 0;
    if ((periodic[0] || periodic[1] || periodic[2]) && !cell)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "neighbor list: cell is NULL but pbc is (%d, %d, %d); pass the cell",
                        pbc[0], pbc[1], pbc[2]);

    CGQ_TRY(reserve(nl, n_atoms, 0, 1));
    nl->row_ptr[0] = 0;
    if (n_atoms == 0) return CGQ_STATUS_OK;
    const int64_t n = n_atoms;

    for (int64_t i = 0; i < n; ++i) {
        const double *p = positions + 3 * i;
        if (!isfinite(p[0]) || !isfinite(p[1]) || !isfinite(p[2]))
            return cgq_fail(CGQ_STATUS_BAD_INPUT,
                            "atom %lld has a non-finite position (%g, %g, %g); check the input "
                            "structure",
                            (long long)i, p[0], p[1], p[2]);
    }

    search_ctx c;
    memset(&c, 0, sizeof c);
    for (int k = 0; k < 3; ++k) c.periodic[k] = periodic[k];
    CGQ_TRY(effective_cell(cell, periodic, c.eff));
    for (int k = 0; k < 3; ++k)
        for (int d = 0; d < 3; ++d) c.cellz[3 * k + d] = periodic[k] ? cell[3 * k + d] : 0.0;
    double inv[9];
    invert3(c.eff, inv);

    /* Perpendicular width of the effective cell along k: d_k = |V| / |e_(k+1) x e_(k+2)|. */
    double width[3];
    {
        double bc[3];
        cross3(&c.eff[3], &c.eff[6], bc);
        double vol = fabs(dot3(&c.eff[0], bc));
        for (int k = 0; k < 3; ++k) {
            double cr[3];
            cross3(&c.eff[3 * ((k + 1) % 3)], &c.eff[3 * ((k + 2) % 3)], cr);
            width[k] = vol / norm3(cr);
        }
    }

    cgq_status status = CGQ_STATUS_OK;
    double *frac = NULL, *xw = NULL, *xo = NULL;
    int32_t *wrap_orig = NULL, *wrap = NULL, *sorted_id = NULL;
    int64_t *atom_bin = NULL, *bin_start = NULL;
    void *scratch = NULL;

    frac = malloc((size_t)n * 3 * sizeof *frac);
    wrap_orig = malloc((size_t)n * 3 * sizeof *wrap_orig);
    if (!frac || !wrap_orig) goto oom;

    /* Fractional coordinates; wrap into [0,1) along periodic directions. */
    double lo[3] = {DBL_MAX, DBL_MAX, DBL_MAX}, hi[3] = {-DBL_MAX, -DBL_MAX, -DBL_MAX};
    double max_abs = 0, max_wrap = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double *p = positions + 3 * i;
        for (int d = 0; d < 3; ++d) max_abs = fmax(max_abs, fabs(p[d]));
        for (int k = 0; k < 3; ++k) {
            double f = p[0] * inv[k] + p[1] * inv[3 + k] + p[2] * inv[6 + k];
            double w = 0;
            if (periodic[k]) {
                w = floor(f);
                f -= w;
                if (f >= 1.0) { /* f slightly below an integer rounds up */
                    f = 0.0;
                    w += 1.0;
                }
                if (fabs(w) > MAX_WRAP) {
                    status = cgq_fail(CGQ_STATUS_BAD_INPUT,
                                      "atom %lld at (%g, %g, %g) is %.3g cell lengths outside the "
                                      "cell along %c; wrap the positions into the cell first",
                                      (long long)i, p[0], p[1], p[2], w, names[k]);
                    goto fail;
                }
                max_wrap = fmax(max_wrap, fabs(w));
            }
            frac[3 * i + k] = f;
            wrap_orig[3 * i + k] = (int32_t)w;
            lo[k] = fmin(lo[k], f);
            hi[k] = fmax(hi[k], f);
        }
    }

    /* Search radius: at least the overlap distance, enlarged slightly so that rounding in the
     * wrapped positions and fractional coordinates can never hide an edge of the exact test. */
    const double rs = fmax(cutoff, 2 * OVERLAP_DIST);
    double cell_len = 0;
    for (int k = 0; k < 3; ++k)
        if (periodic[k]) cell_len += norm3(&c.eff[3 * k]);
    double r_pre = rs * (1 + 1e-9) + 1e-12 * (max_abs + cell_len * (max_wrap + 2));
    double r_bin = r_pre * (1 + 1e-6);
    c.r2_pre = r_pre * r_pre;
    c.r2_cut = cutoff * cutoff;

    /* Bins: BIN_DIVISIONS per search radius (thinner bins scan a smaller volume around each
     * receiver); bounded in number so sparse / spread-out systems stay O(N) in memory. */
    double extent[3];
    const double max_bins = 2.0 * (double)n + 64;
    for (int k = 0; k < 3; ++k) {
        extent[k] = periodic[k] ? 1.0 : hi[k] - lo[k]; /* in fractional units */
        double nbk = floor(extent[k] * width[k] * BIN_DIVISIONS / r_bin);
        if (!(nbk >= 1)) nbk = 1;
        c.nb[k] = (int64_t)fmin(nbk, max_bins);
    }
    while ((double)c.nb[0] * (double)c.nb[1] * (double)c.nb[2] > max_bins) {
        int kmax = 0;
        for (int k = 1; k < 3; ++k)
            if (c.nb[k] > c.nb[kmax]) kmax = k;
        c.nb[kmax] = (c.nb[kmax] + 1) / 2;
    }
    for (int k = 0; k < 3; ++k) {
        /* m bins of fractional width extent/nb must cover r_bin/width (the largest fractional
         * separation of two atoms closer than r_bin). */
        double mk = ceil(r_bin * (double)c.nb[k] / (extent[k] * width[k]));
        if (!periodic[k]) {
            /* Offsets beyond the last bin are empty (also covers extent == 0). */
            c.m[k] = (int64_t)fmin(mk >= 1 ? mk : 1, (double)(c.nb[k] - 1));
            continue;
        }
        if (!(mk <= MAX_IMAGES_PER_DIR)) {
            status = cgq_fail(CGQ_STATUS_BAD_INPUT,
                              "the cell is only %.3g A thick along %c, which would need %.3g "
                              "periodic images for cutoff %g A; check the cell",
                              width[k], names[k], mk, cutoff);
            goto fail;
        }
        c.m[k] = mk < 1 ? 1 : (int64_t)mk;
    }
    const int64_t nbins = c.nb[0] * c.nb[1] * c.nb[2];
    /* Shifts s of the virtual bins b-m .. b+m take at most floor(2m/nb) + 2 values. */
    for (int k = 0; k < 3; ++k)
        c.key_bits[k] = periodic[k] ? bits_for((uint64_t)(2 * c.m[k] / c.nb[k] + 2)) : 0;

    atom_bin = malloc((size_t)n * sizeof *atom_bin);
    bin_start = calloc((size_t)nbins + 1, sizeof *bin_start);
    sorted_id = malloc((size_t)n * sizeof *sorted_id);
    xw = malloc((size_t)n * 3 * sizeof *xw);
    xo = malloc((size_t)n * 3 * sizeof *xo);
    wrap = malloc((size_t)n * 3 * sizeof *wrap);
    if (!atom_bin || !bin_start || !sorted_id || !xw || !xo || !wrap) goto oom;

    for (int64_t i = 0; i < n; ++i) {
        int64_t bk[3];
        for (int k = 0; k < 3; ++k) {
            double f = frac[3 * i + k];
            double t = periodic[k] ? f : (extent[k] > 0 ? (f - lo[k]) / extent[k] : 0.0);
            int64_t b = (int64_t)(t * (double)c.nb[k]);
            bk[k] = b < 0 ? 0 : b >= c.nb[k] ? c.nb[k] - 1 : b;
        }
        atom_bin[i] = (bk[0] * c.nb[1] + bk[1]) * c.nb[2] + bk[2];
        bin_start[atom_bin[i] + 1]++;
    }
    for (int64_t b = 0; b < nbins; ++b) bin_start[b + 1] += bin_start[b];
    /* Counting sort (stable: ascending atom index within each bin). */
    {
        int64_t *cursor = malloc((size_t)nbins * sizeof *cursor);
        if (!cursor) goto oom;
        memcpy(cursor, bin_start, (size_t)nbins * sizeof *cursor);
        for (int64_t i = 0; i < n; ++i) {
            int64_t q = cursor[atom_bin[i]]++;
            sorted_id[q] = (int32_t)i;
            for (int k = 0; k < 3; ++k) {
                wrap[3 * q + k] = wrap_orig[3 * i + k];
                /* Wrapped Cartesian position x - w.cell (only periodic rows have w != 0). */
                const double *p = positions + 3 * i;
                double t = (double)wrap_orig[3 * i] * c.eff[k] +
                           (double)wrap_orig[3 * i + 1] * c.eff[3 + k] +
                           (double)wrap_orig[3 * i + 2] * c.eff[6 + k];
                xw[k * n + q] = p[k] - t;
                xo[3 * q + k] = p[k];
            }
        }
        free(cursor);
        /* From now on atom_bin is indexed in bin order, next to the other per-atom data. */
        for (int64_t b = 0; b < nbins; ++b)
            for (int64_t q = bin_start[b]; q < bin_start[b + 1]; ++q) atom_bin[q] = b;
    }
    free(frac);
    frac = NULL;
    free(wrap_orig);
    wrap_orig = NULL;
    c.bin_start = bin_start;
    c.atom_bin = atom_bin;
    c.sorted_id = sorted_id;
    c.xw = xw;
    c.n = n;
    c.x = xo;
    c.wrap = wrap;

    if (nl->senders_only && bits_for((uint64_t)n) + c.key_bits[0] + c.key_bits[1] + c.key_bits[2] <= 64) {
        status = build_senders_only(nl, &c, n, n_receivers, positions);
        if (status != CGQ_STATUS_OK) goto fail;
        goto done;
    }

    /* Pass 1: count edges per receiver (into row_ptr[j+1]) and look for overlaps. */
    int64_t *row_ptr = nl->row_ptr;
    overlap_info ov_all;
    memset(&ov_all, 0, sizeof ov_all);
    int64_t max_row = 0;
#ifdef _OPENMP
#pragma omp parallel if (n >= 512)
#endif
    {
        overlap_info ov;
        memset(&ov, 0, sizeof ov);
        int64_t my_max = 0;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 64)
#endif
        for (int64_t k = 0; k < n; ++k) {
            if (c.sorted_id[k] >= n_receivers) { /* a sender only: empty row */
                row_ptr[c.sorted_id[k] + 1] = 0;
                continue;
            }
            int64_t cnt = scan_receiver(&c, k, NULL, NULL, 0, &ov);
            row_ptr[c.sorted_id[k] + 1] = cnt;
            if (cnt > my_max) my_max = cnt;
        }
#ifdef _OPENMP
#pragma omp critical(cgq_neighbor_reduce)
#endif
        {
            if (my_max > max_row) max_row = my_max;
            keep_first_overlap(&ov_all, &ov);
        }
    }
    if (ov_all.found) {
        status = overlap_error(nl, positions, &ov_all);
        goto fail;
    }
    row_ptr[0] = 0;
    for (int64_t j = 0; j < n; ++j) row_ptr[j + 1] += row_ptr[j];
    const int64_t n_edges = row_ptr[n];

    status = reserve(nl, n, n_edges, 0);
    if (status != CGQ_STATUS_OK) {
        nl->row_ptr[0] = 0;
        goto fail;
    }

    /* Pass 2: fill each row through a per-thread scratch, sort it, copy it out. Fast path: sort
     * 64-bit keys (sender, bin shift, position in the row); the struct sort is the fallback for
     * rows or systems too large for the packing. */
    const int64_t row_cap = max_row > 0 ? max_row : 1;
    const int packed_bits = bits_for((uint64_t)n) + c.key_bits[0] + c.key_bits[1] + c.key_bits[2];
    const int pos_bits = bits_for((uint64_t)row_cap);
    const int use_keys = packed_bits + pos_bits <= 64;
    const int nthreads = build_threads(n);
    const size_t per_thread = (size_t)row_cap * (2 * sizeof(edge_rec) + 2 * sizeof(uint64_t));
    scratch = malloc((size_t)nthreads * per_thread);
    if (!scratch) goto oom;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
#endif
    {
        edge_rec *buf = (edge_rec *)((char *)scratch + (size_t)thread_id() * per_thread);
        edge_rec *tmp = buf + row_cap;
        uint64_t *keys = (uint64_t *)(tmp + row_cap);
        uint64_t *ktmp = keys + row_cap;
        overlap_info ov;
        memset(&ov, 0, sizeof ov);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 64)
#endif
        for (int64_t k = 0; k < n; ++k) {
            if (c.sorted_id[k] >= n_receivers) continue;
            int64_t cnt = scan_receiver(&c, k, buf, NULL, 0, &ov);
            int64_t base = nl->row_ptr[c.sorted_id[k]];
            if (use_keys) {
                for (int64_t e = 0; e < cnt; ++e) keys[e] = buf[e].key << pos_bits | (uint64_t)e;
                sort_keys(keys, ktmp, cnt);
            } else {
                sort_row(buf, tmp, cnt);
            }
            for (int64_t e = 0; e < cnt; ++e) {
                const edge_rec *r =
                    use_keys ? &buf[keys[e] & (((uint64_t)1 << pos_bits) - 1)] : &buf[e];
                nl->sender[base + e] = r->sender;
                memcpy(&nl->shift[3 * (base + e)], r->s, sizeof r->s);
                memcpy(&nl->vec[3 * (base + e)], r->v, sizeof r->v);
            }
        }
    }
    nl->n_nodes = n;
    nl->n_edges = n_edges;
    status = CGQ_STATUS_OK;
    goto done;

oom:
    status = cgq_fail(CGQ_STATUS_OUT_OF_MEMORY,
                      "neighbor list: out of memory building the cell list for %lld atoms",
                      (long long)n);
fail:
    nl->n_nodes = 0;
    nl->n_edges = 0;
    if (nl->row_ptr) nl->row_ptr[0] = 0;
done:
    free(frac);
    free(wrap_orig);
    free(atom_bin);
    free(bin_start);
    free(sorted_id);
    free(xw);
    free(xo);
    free(wrap);
    free(scratch);
    return status;
}

void cgq_neighbor_list_free(cgq_neighbor_list *nl) {
    if (!nl) return;
    free(nl->row_ptr);
    free(nl->sender);
    free(nl->shift);
    free(nl->vec);
    memset(nl, 0, sizeof *nl);
}
