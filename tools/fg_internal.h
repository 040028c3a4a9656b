/*
 * tools/fg_internal.h — what the parts of the flame graph renderer share; not
 * for other tools (they use tools/flamegraph.h).
 *
 * Owns: the laid-out tree (built by fg_layout.c, drawn by fg_svg.c), the
 * colour state of one render (fg_palette.c), the parsed --nameattr entries
 * (fg_nameattr.c), and the entry points of those files.
 * Called by: tools/flamegraph.c (flamme_fg_render ties them together) and the
 * fg_*.c files themselves; single thread.
 */
#ifndef FLAMME_TOOLS_FG_INTERNAL_H
#define FLAMME_TOOLS_FG_INTERNAL_H
#include <stdint.h>
#include <stdio.h>

#include "tools/flamegraph.h"
#include "tools/folded.h"

#define FG_NAME_ROOT   UINT32_MAX       /* the "all" frame */
#define FG_NAME_ELIDED (UINT32_MAX - 1) /* a "…" frame */
#define FG_NO_NODE     UINT32_MAX
#define FG_XPAD        10.0             /* px left and right of the frames */

/* ---------------------------------------------------------- fg_layout.c */

struct fg_node {
    uint32_t name, depth;     /* name: frame id (a rank if ranked), FG_NAME_ROOT or FG_NAME_ELIDED */
    uint32_t first_child, next;
    double total, self, delta, start;
    size_t elided;            /* for a "…" node: merged frames */
    int waker;                /* under a "--" frame (the waker part of a chain graph) */
};

/* The pruned, placed tree: parents come after their children in nodes[]. */
struct fg_tree {
    struct fg_node *nodes;
    size_t n;
    uint32_t root;
    uint32_t *rank_to_id;     /* NULL when ids were not ranked (flame chart) */
};

/* Orders f's stacks (reversing them for --reverse; sorting by names unless
 * --flamechart, which rewrites frame ids as name ranks), merges them into a
 * tree where frames under thr counts fold into one "…" per parent, widens
 * the root to total, and places every frame. Returns 0, or -1 on allocation
 * failure (t then holds nothing to free). */
int flamme_fg_layout(struct flamme_folded *f, const struct flamme_fg_opts *op, double total, double thr,
                     struct fg_tree *t);
void flamme_fg_tree_free(struct fg_tree *t);

/* The folded name id of a node's name (undoing the ranking). */
static inline uint32_t flamme_fg_real_id(const struct fg_tree *t, uint32_t id)
{
    return t->rank_to_id ? t->rank_to_id[id] : id;
}

/* --------------------------------------------------------- fg_palette.c */

struct fg_rgb { int r, g, b; };

/* Consistent palette (--cp): "name->rgb(r,g,b)" lines. */
struct fg_cpmap {
    struct fg_rgb *col;   /* per name id */
    char *set;            /* 1 if col[id] is fixed */
    char **extra;         /* lines for names not in this input, kept verbatim */
    size_t nextra;
};

/* The colour state of one render. */
struct fg_colors {
    const struct flamme_folded *f;
    const struct flamme_fg_opts *op;
    const struct fg_tree *t;
    struct fg_cpmap cp;
    struct fg_rgb *col; char *col_done; /* per-name cache */
    double maxdelta;                    /* largest |delta| of a drawn frame (differential) */
    uint64_t rng;                       /* --random */
};

/* Sets up c for colouring t's frames (reads op->cp_file). Returns 0, or -1
 * on allocation failure (nothing left to free). */
int flamme_fg_colors_init(struct fg_colors *c, const struct flamme_folded *f, const struct flamme_fg_opts *op,
                          const struct fg_tree *t, double maxdelta);
struct fg_rgb flamme_fg_node_color(struct fg_colors *c, const struct fg_node *nd);
/* Writes op->cp_file back (a message on failure) and frees c. */
void flamme_fg_colors_finish(struct fg_colors *c);
/* Background gradient: returns its first colour, *to the second. */
const char *flamme_fg_bg_colors(const char *pal, const char *bg, const char **to);

/* -------------------------------------------------------- fg_nameattr.c */

struct fg_na_attr { char *key, *val; };

struct fg_na_entry {
    char *name;
    char *href, *target, *title, *id, *cls;
    struct fg_na_attr *extra; size_t nextra, ngx; /* extra[0..ngx): g_extra, then a_extra */
};

struct flamme_fg_nameattr {
    struct fg_na_entry *e; size_t n;
};

/* Per name id of f, its --nameattr entry or NULL (caller frees the array).
 * Returns NULL on allocation failure. */
const struct fg_na_entry **flamme_fg_nameattr_index(const struct flamme_fg_nameattr *na,
                                                     const struct flamme_folded *f);

/* ------------------------------------------------------------- fg_svg.c */

/* The small SVG that says why there is no graph. */
void flamme_fg_svg_error(FILE *o, const struct flamme_fg_opts *op, const char *msg);

/* Writes the whole interactive SVG of t: header, controls, thread selector,
 * frames and the viewer's script. na_of: per name id (NULL: no --nameattr).
 * Write errors are left in o's error flag. */
void flamme_fg_svg_write(FILE *o, const struct flamme_folded *f, const struct flamme_fg_opts *op,
                         const struct fg_tree *t, struct fg_colors *col, const struct fg_na_entry *const *na_of,
                         double total, const struct flamme_fg_stats *st);

#endif
