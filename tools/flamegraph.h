/*
 * tools/flamegraph.h — flame graph layout and the interactive SVG writer.
 *
 * Owns: the renderer's interface: options, merging parsed folded stacks into
 * a tree (sorted by frame names, or in input order for a flame chart),
 * pruning frames narrower than minwidth into one grey "…" frame per parent,
 * colours (flamegraph.pl palettes plus "ocaml"), per-function attributes
 * (--nameattr), and the self-contained SVG with its embedded JavaScript
 * (zoom, search, tooltips, URL state, thread selector). flamegraph.c runs
 * the parts: fg_layout.c, fg_palette.c, fg_nameattr.c, fg_svg.c (they share
 * tools/fg_internal.h).
 * Called by: `flamme svg` (tools/svg.c) and unit tests; single thread.
 * Memory: the input stacks plus O(max depth + frames drawn); the full merged
 * tree is never built, so output and memory stay bounded by what is visible.
 */
#ifndef FLAMME_TOOLS_FLAMEGRAPH_H
#define FLAMME_TOOLS_FLAMEGRAPH_H
#include <stdio.h>
#include "tools/folded.h"

/* Per-function SVG attributes read from a --nameattr file (opaque). */
struct flamme_fg_nameattr;

struct flamme_fg_opts {
    const char *title;      /* NULL: "Flame Graph" / "Icicle Graph" / "Flame Chart" */
    const char *subtitle;   /* NULL: none */
    int width;              /* image width px (1200) */
    int height;             /* frame height px (16) */
    double minwidth;        /* px, or percent of the total when minwidth_pct */
    int minwidth_pct;
    const char *fonttype;   /* "Verdana" */
    double fontsize;        /* 12 */
    double fontwidth;       /* 0.59 */
    const char *countname;  /* "samples" */
    const char *nametype;   /* "Function:" */
    const char *colors;     /* palette name ("hot") */
    int hash;               /* colour by a name hash weighting the first characters */
    int random;             /* --random: a random colour per frame, not per name */
    const char *bgcolors;   /* NULL: follows the palette; yellow, blue, green, grey or #rrggbb */
    const char *cp_file;    /* consistent palette file (NULL: off) */
    int reverse, inverted, flamechart, negate;
    const char *notes;      /* NULL: none */
    const char *encoding;   /* NULL: none; else the encoding= of the XML declaration */
    double total;           /* --total: width of the graph in input counts (ignored if 0 or
                               less than the real sum, as flamegraph.pl) */
    double factor;          /* --factor: counts are multiplied by this for display (1) */
    const struct flamme_fg_nameattr *nameattr; /* NULL: none */
    int threads;            /* root frames are threads: draw a selector */
};

/* Fills o with flamegraph.pl's defaults. */
void flamme_fg_defaults(struct flamme_fg_opts *o);

/* Returns 1 if name is a known palette. */
int flamme_fg_palette_ok(const char *name);

/* Returns 1 if s is a --bgcolors value: yellow, blue, green, grey or #rrggbb. */
int flamme_fg_bgcolors_ok(const char *s);

/* Returns 1 if s is a valid XML encoding name ([A-Za-z][A-Za-z0-9._-]*). */
int flamme_fg_encoding_ok(const char *s);

/* Reads a --nameattr file as flamegraph.pl does: one function per line,
 * "NAME<TAB>key=value<TAB>key=value...". Keys used: href (the frame becomes an
 * <a> link, which zooms only on Ctrl-click), target (default _top), title
 * (replaces the tooltip), id, class, g_extra and a_extra (extra attributes
 * `name="value" ...` for the frame element / the link; values are text).
 * Other keys are ignored. Returns NULL after printing "FILE:LINE: why" on
 * stderr for an unreadable or malformed file. */
struct flamme_fg_nameattr *flamme_fg_nameattr_load(const char *path);
void flamme_fg_nameattr_free(struct flamme_fg_nameattr *na);

/* Statistics of one render, for tests and messages. */
struct flamme_fg_stats {
    size_t drawn;          /* frames written (including "…" frames) */
    size_t elided_frames;  /* merged-tree frames folded into "…" frames */
    double elided_samples; /* samples under those frames (top-most only) */
    uint32_t max_depth;
};

/* Lays out f (reordering/reversing its stack records in place) and writes
 * the SVG to out. An empty input writes an SVG saying so and returns 2.
 * Returns 0, 1 on a write error or allocation failure (message printed), 2
 * for no valid input. */
int flamme_fg_render(struct flamme_folded *f, const struct flamme_fg_opts *o, FILE *out,
                     struct flamme_fg_stats *st);

#endif
