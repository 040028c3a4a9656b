/*
 * tools/fg_layout.c — where each frame of a flame graph goes.
 *
 * Owns: ordering the stacks (by frame names, or input order for a flame
 * chart; --reverse), merging them into a tree, folding frames narrower than
 * the minimum width into one grey "…" frame per parent, and placing frames.
 * Called by: flamme_fg_render (tools/flamegraph.c); single thread.
 * How: stacks are sorted frame by frame, then walked once while a path of
 * "open" frames is kept. A frame is closed when the next stack leaves it;
 * only then is its width known, and a frame narrower than minwidth is folded
 * into its parent's "…" accumulator instead of being stored. So memory and
 * output are bounded by the frames drawn, and the cost is linear in the
 * number of input frames; the full merged tree is never built.
 */
#include "tools/fg_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ ordering */

static int cmp_stacks(const void *a, const void *b, void *ctx)
{
    const struct flamme_folded *f = ctx;
    const struct flamme_folded_stack *x = a, *y = b;
    const uint32_t *p = f->ids + x->off, *q = f->ids + y->off;
    uint32_t n = x->n < y->n ? x->n : y->n;
    for (uint32_t i = 0; i < n; i++)
        if (p[i] != q[i])
            return p[i] < q[i] ? -1 : 1;
    return (x->n > y->n) - (x->n < y->n);
}

static int cmp_names(const void *a, const void *b, void *ctx)
{
    const struct flamme_folded *f = ctx;
    return strcmp(flamme_folded_name(f, *(const uint32_t *)a), flamme_folded_name(f, *(const uint32_t *)b));
}

/* Rewrites frame ids as ranks of their names so that sorting ids sorts names.
 * Returns rank -> original id (caller frees), or NULL on allocation failure. */
static uint32_t *rank_names(struct flamme_folded *f)
{
    uint32_t *order = malloc(((size_t)f->nnames + 1) * sizeof *order);
    uint32_t *rank = malloc(((size_t)f->nnames + 1) * sizeof *rank);
    if (!order || !rank) {
        free(order);
        free(rank);
        return NULL;
    }
    for (uint32_t i = 0; i < f->nnames; i++)
        order[i] = i;
    qsort_r(order, f->nnames, sizeof *order, cmp_names, f);
    for (uint32_t i = 0; i < f->nnames; i++)
        rank[order[i]] = i;
    for (size_t k = 0; k < f->nids; k++)
        f->ids[k] = rank[f->ids[k]];
    free(rank);
    return order;
}

/* -------------------------------------------------------------- layout */

struct open_node {
    uint32_t name;
    uint32_t head, tail;      /* kept children, in x order */
    double total, self, delta, sub_delta;
    double el_total, el_delta;
    size_t el_frames;
};

struct builder {
    struct fg_node *nodes; size_t n, cap;
    struct open_node *path; size_t depth, path_cap; /* path[0] is the root */
    double thr;
    int oom;
};

static uint32_t emit(struct builder *b, const struct fg_node *nd)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        struct fg_node *q = realloc(b->nodes, nc * sizeof *q);
        if (!q) {
            b->oom = 1;
            return FG_NO_NODE;
        }
        b->nodes = q;
        b->cap = nc;
    }
    b->nodes[b->n] = *nd;
    return (uint32_t)b->n++;
}

static void append_child(struct builder *b, struct open_node *p, uint32_t c)
{
    if (c == FG_NO_NODE)
        return;
    b->nodes[c].next = FG_NO_NODE;
    if (p->head == FG_NO_NODE)
        p->head = c;
    else
        b->nodes[p->tail].next = c;
    p->tail = c;
}

/* Emits the "…" child of o (at depth d+1) if anything was elided under it,
 * then o itself. Returns o's node index (FG_NO_NODE on allocation failure). */
static uint32_t emit_kept(struct builder *b, struct open_node *o, uint32_t d)
{
    if (o->el_frames > 0) {
        struct fg_node e = {FG_NAME_ELIDED, d + 1, FG_NO_NODE, FG_NO_NODE, o->el_total, o->el_total,
                         o->el_delta, 0, o->el_frames, 0};
        append_child(b, o, emit(b, &e));
    }
    struct fg_node nd = {o->name, d, o->head, FG_NO_NODE, o->total, o->self, o->delta, 0, 0, 0};
    return emit(b, &nd);
}

/* Closes the deepest open frame and hands its width to its parent. */
static void close_top(struct builder *b)
{
    uint32_t d = (uint32_t)b->depth;
    struct open_node *o = &b->path[d], *p = &b->path[d - 1];
    if (o->total < b->thr) {
        p->el_total += o->total;
        p->el_delta += o->sub_delta;
        p->el_frames += 1 + o->el_frames;
    } else {
        append_child(b, p, emit_kept(b, o, d));
    }
    p->total += o->total;
    p->sub_delta += o->sub_delta;
    b->depth--;
}

static int open_frame(struct builder *b, uint32_t name)
{
    if (b->depth + 1 >= b->path_cap) {
        size_t nc = b->path_cap ? b->path_cap * 2 : 256;
        struct open_node *q = realloc(b->path, nc * sizeof *q);
        if (!q)
            return -1;
        b->path = q;
        b->path_cap = nc;
    }
    struct open_node *o = &b->path[++b->depth];
    memset(o, 0, sizeof *o);
    o->name = name;
    o->head = o->tail = FG_NO_NODE;
    return 0;
}

/* Builds the pruned tree; returns the root's index or FG_NO_NODE (oom). */
static uint32_t build(struct builder *b, const struct flamme_folded *f)
{
    if (open_frame(b, FG_NAME_ROOT) < 0) /* sizes the path; the root is path[0] */
        return FG_NO_NODE;
    b->path[0] = b->path[1];
    b->depth = 0;
    for (size_t i = 0; i < f->nstacks && !b->oom; i++) {
        const struct flamme_folded_stack *s = &f->stacks[i];
        const uint32_t *ids = f->ids + s->off;
        size_t cp = 0;
        while (cp < s->n && cp < b->depth && b->path[cp + 1].name == ids[cp])
            cp++;
        while (b->depth > cp)
            close_top(b);
        for (size_t k = cp; k < s->n; k++)
            if (open_frame(b, ids[k]) < 0)
                return FG_NO_NODE;
        struct open_node *leaf = &b->path[b->depth];
        leaf->self += s->count;
        leaf->total += s->count;
        if (s->has_before) {
            leaf->delta += s->count - s->before;
            leaf->sub_delta += s->count - s->before;
        }
    }
    while (b->depth > 0)
        close_top(b);
    uint32_t root = emit_kept(b, &b->path[0], 0);
    return b->oom ? FG_NO_NODE : root;
}

/* Assigns start offsets and the waker flag (a "--" frame or one of its
 * ancestors is "--"): parents come after their children in b->nodes, so
 * walking backwards visits each parent before its children. sep is the id
 * of the name "--" (UINT32_MAX: absent). */
static void place(struct builder *b, uint32_t sep)
{
    for (size_t i = b->n; i-- > 0;) {
        double pos = b->nodes[i].start;
        int waker = b->nodes[i].waker || (sep != UINT32_MAX && b->nodes[i].name == sep);
        for (uint32_t c = b->nodes[i].first_child; c != FG_NO_NODE; c = b->nodes[c].next) {
            b->nodes[c].start = pos;
            b->nodes[c].waker = waker;
            pos += b->nodes[c].total;
        }
    }
}

int flamme_fg_layout(struct flamme_folded *f, const struct flamme_fg_opts *op, double total, double thr,
                     struct fg_tree *t)
{
    memset(t, 0, sizeof *t);
    if (op->reverse)
        for (size_t i = 0; i < f->nstacks; i++) {
            uint32_t *p = f->ids + f->stacks[i].off;
            for (uint32_t a = 0, b = f->stacks[i].n; b > a + 1; a++, b--) {
                uint32_t x = p[a];
                p[a] = p[b - 1];
                p[b - 1] = x;
            }
        }
    uint32_t *order = NULL;
    if (!op->flamechart) {
        order = rank_names(f);
        if (!order)
            return -1;
        qsort_r(f->stacks, f->nstacks, sizeof *f->stacks, cmp_stacks, f);
    }
    struct builder b = {0};
    b.thr = thr;
    uint32_t root = build(&b, f);
    free(b.path);
    if (root == FG_NO_NODE) {
        free(b.nodes);
        free(order);
        return -1;
    }
    /* with a larger --total the root spans it all; the rest is its "self" */
    if (total > f->total) {
        b.nodes[root].self += total - b.nodes[root].total;
        b.nodes[root].total = total;
    }
    uint32_t sep = flamme_folded_lookup(f, "--", 2);
    if (sep != UINT32_MAX && order)
        for (uint32_t r = 0; r < f->nnames; r++)
            if (order[r] == sep) {
                sep = r;
                break;
            }
    place(&b, sep);
    t->nodes = b.nodes;
    t->n = b.n;
    t->root = root;
    t->rank_to_id = order;
    return 0;
}

void flamme_fg_tree_free(struct fg_tree *t)
{
    free(t->nodes);
    free(t->rank_to_id);
    memset(t, 0, sizeof *t);
}
