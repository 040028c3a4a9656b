/*
 * tools/flamegraph.c — the flame graph renderer's entry points (see
 * flamegraph.h): default options and flamme_fg_render, which runs the parts
 * in order.
 *
 * Owns: the checks and scaling done before layout (empty input, --total,
 * --factor), the statistics of a render, and the order of the parts:
 * fg_layout.c (where frames go), fg_palette.c (their colours, --cp),
 * fg_nameattr.c (--nameattr), fg_svg.c (the SVG text and viewer script).
 * Called by: `flamme svg` (tools/svg.c) and unit tests; single thread.
 */
#include "tools/fg_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void flamme_fg_defaults(struct flamme_fg_opts *o)
{
    memset(o, 0, sizeof *o);
    o->width = 1200;
    o->height = 16;
    o->minwidth = 0.1;
    o->fonttype = "Verdana";
    o->fontsize = 12;
    o->fontwidth = 0.59;
    o->countname = "samples";
    o->nametype = "Function:";
    o->colors = "hot";
    o->factor = 1;
}

int flamme_fg_render(struct flamme_folded *f, const struct flamme_fg_opts *op, FILE *o,
                     struct flamme_fg_stats *st)
{
    struct flamme_fg_stats dummy;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    if (f->nstacks == 0 || !(f->total > 0)) {
        flamme_fg_svg_error(o, op, "ERROR: No valid input provided");
        return 2;
    }
    double factor = op->factor > 0 ? op->factor : 1;
    if (op->total > 0 && op->total < f->total && op->total / f->total > 0.02)
        fprintf(stderr, "flamme svg: warning: --total %g is less than the actual total %g, so ignored\n",
                op->total, f->total);
    if (factor != 1) { /* widths are ratios, so only the counts shown change */
        for (size_t i = 0; i < f->nstacks; i++) {
            f->stacks[i].count *= factor;
            f->stacks[i].before *= factor;
        }
        f->total *= factor;
    }
    /* the graph's width in counts: the real sum, or a larger --total */
    double total = op->total * factor > f->total ? op->total * factor : f->total;
    double drawable = op->width - 2 * FG_XPAD;
    if (drawable < 1)
        drawable = 1;
    double thr = op->minwidth_pct ? op->minwidth / 100.0 * total : op->minwidth / drawable * total;
    struct fg_tree t;
    if (flamme_fg_layout(f, op, total, thr, &t) < 0)
        goto oom;

    double maxdelta = 0;
    for (size_t i = 0; i < t.n; i++) {
        const struct fg_node *nd = &t.nodes[i];
        if (nd->depth > st->max_depth)
            st->max_depth = nd->depth;
        if (nd->name == FG_NAME_ELIDED) {
            st->elided_frames += nd->elided;
            st->elided_samples += nd->total;
        } else if (fabs(nd->delta) > maxdelta) {
            maxdelta = fabs(nd->delta);
        }
    }
    st->drawn = t.n;

    struct fg_colors col;
    if (flamme_fg_colors_init(&col, f, op, &t, maxdelta) < 0) {
        flamme_fg_tree_free(&t);
        goto oom;
    }
    const struct fg_na_entry **na_of = NULL;
    if (op->nameattr && !(na_of = flamme_fg_nameattr_index(op->nameattr, f))) {
        flamme_fg_colors_finish(&col);
        flamme_fg_tree_free(&t);
        goto oom;
    }
    flamme_fg_svg_write(o, f, op, &t, &col, na_of, total, st);
    flamme_fg_colors_finish(&col);
    free(na_of);
    flamme_fg_tree_free(&t);
    if (fflush(o) != 0 || ferror(o)) {
        fprintf(stderr, "flamme svg: write error\n");
        return 1;
    }
    return 0;
oom:
    fprintf(stderr, "flamme svg: out of memory\n");
    return 1;
}
