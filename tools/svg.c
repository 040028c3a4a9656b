/*
 * tools/svg.c — `flamme svg`: folded stacks or flamme profiles in, an
 * interactive flame graph SVG out. Options follow flamegraph.pl's spelling
 * and meaning. Owns option parsing and input dispatch; the parsing rules are
 * in tools/folded.c, layout and SVG in tools/flamegraph.c.
 * Called by tools/main.c; single thread.
 */
#include "tools/cmds.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/profile.h"
#include "tools/collapse.h"
#include "tools/flamegraph.h"
#include "tools/folded.h"

static void usage(FILE *o)
{
    fputs("usage: flamme svg [options] [INPUT...] [-o OUT.svg]\n"
          "Renders folded stacks (\"root;...;leaf COUNT\", as flamegraph.pl reads them) or flamme\n"
          "profile files as an interactive SVG flame graph. Several inputs are merged; no\n"
          "INPUT or \"-\" reads folded text from stdin.\n"
          "  -o, --output FILE   write the SVG to FILE (default: stdout)\n"
          "  --title TEXT        title (default \"Flame Graph\", \"Icicle Graph\", \"Flame Chart\")\n"
          "  --subtitle TEXT     second title line\n"
          "  --width NUM         image width in pixels (1200)\n"
          "  --height NUM        height of each frame in pixels (16)\n"
          "  --minwidth NUM[%]   frames narrower than NUM px (or NUM % of the total) are merged\n"
          "                      into one grey \"\xe2\x80\xa6\" frame per parent (0.1)\n"
          "  --fonttype FONT     font family (Verdana)\n"
          "  --fontsize NUM      font size (12)\n"
          "  --fontwidth NUM     average glyph width / font size, for label fitting (0.59)\n"
          "  --countname TEXT    unit of the counts in tooltips (samples)\n"
          "  --nametype TEXT     prefix of the details line (Function:)\n"
          "  --colors PALETTE    hot (default), mem, io, red, green, blue, aqua, yellow, purple,\n"
          "                      orange, ocaml (OCaml code / stdlib / runtime / GC / C / kernel)\n"
          "  --hash              colours from a name hash weighting the first characters\n"
          "  --cp[=FILE]         consistent palette: read and update FILE (./palette.map)\n"
          "  --reverse           reverse each stack (merge at the leaves)\n"
          "  --inverted          icicle graph (root at the top)\n"
          "  --flamechart        keep the input order (x is time) instead of sorting\n"
          "  --negate            swap the differential colours (red/blue)\n"
          "  --notes TEXT        text kept in an XML comment\n"
          "  --threads           profile input: one root frame per thread/domain, with a\n"
          "                      thread selector above the graph\n"
          "  -h, --help          this help\n"
          "A line \"stack COUNT1 COUNT2\" is differential: widths from COUNT2, colour from\n"
          "COUNT2-COUNT1 (red: more, blue: less). In the SVG: click a frame to zoom, Ctrl-F or\n"
          "F3 to search (regexp), Ctrl-I to toggle case, Escape to reset the zoom.\n",
          o);
}

enum { O_TITLE = 256, O_SUBTITLE, O_WIDTH, O_HEIGHT, O_MINWIDTH, O_FONTTYPE, O_FONTSIZE,
       O_FONTWIDTH, O_COUNTNAME, O_NAMETYPE, O_COLORS, O_HASH, O_CP, O_REVERSE, O_INVERTED,
       O_FLAMECHART, O_NEGATE, O_NOTES, O_THREADS };

static const struct option longopts[] = {
    {"title", required_argument, 0, O_TITLE},
    {"subtitle", required_argument, 0, O_SUBTITLE},
    {"width", required_argument, 0, O_WIDTH},
    {"height", required_argument, 0, O_HEIGHT},
    {"minwidth", required_argument, 0, O_MINWIDTH},
    {"fonttype", required_argument, 0, O_FONTTYPE},
    {"fontsize", required_argument, 0, O_FONTSIZE},
    {"fontwidth", required_argument, 0, O_FONTWIDTH},
    {"countname", required_argument, 0, O_COUNTNAME},
    {"nametype", required_argument, 0, O_NAMETYPE},
    {"colors", required_argument, 0, O_COLORS},
    {"hash", no_argument, 0, O_HASH},
    {"cp", optional_argument, 0, O_CP},
    {"reverse", no_argument, 0, O_REVERSE},
    {"inverted", no_argument, 0, O_INVERTED},
    {"flamechart", no_argument, 0, O_FLAMECHART},
    {"negate", no_argument, 0, O_NEGATE},
    {"notes", required_argument, 0, O_NOTES},
    {"threads", no_argument, 0, O_THREADS},
    {"output", required_argument, 0, 'o'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* Parses a positive number (or a percentage when pct is non-NULL). 0 / -1. */
static int parse_num(const char *opt, const char *s, double *out, int *pct, int integer)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (pct) {
        *pct = *end == '%';
        if (*pct)
            end++;
    }
    if (end == s || *end || errno || !(v >= 0) || v > 1e9 || (integer && (v < 1 || v != (int)v))) {
        fprintf(stderr, "flamme svg: --%s: not a valid %s: %s\n", opt,
                integer ? "positive integer" : "number", s);
        return -1;
    }
    *out = v;
    return 0;
}

static void collect(void *ctx, const char *stack, uint64_t count)
{
    struct flamme_folded *f = ctx;
    flamme_folded_add(f, stack, strlen(stack), (double)count);
}

/* Reads one input (profile or folded text) into f. 0, or 1 (I/O) / 2 (bad input). */
static int read_input(struct flamme_folded *f, const char *path, int threads)
{
    int is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "<stdin>" : path;
    int fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "flamme svg: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    unsigned char head[16];
    /* pread fails on a pipe (folded text then); a profile redirected from a
     * file into stdin is loaded through /proc. */
    ssize_t hn = pread(fd, head, sizeof head, 0);
    if (hn > 0 && flamme_is_profile(head, (size_t)hn)) {
        if (is_stdin)
            path = "/proc/self/fd/0";
        else
            close(fd);
        struct flamme_profile p;
        char err[512];
        if (flamme_profile_load(path, &p, err, sizeof err) != 0) {
            fprintf(stderr, "flamme svg: %s\n", err);
            return 2;
        }
        if (p.truncated)
            fprintf(stderr, "flamme svg: %s: warning: profile is truncated; using what was read\n", path);
        struct flamme_collapse_opts co = {.threads = threads};
        int r = flamme_collapse_profile(&p, &co, collect, f);
        flamme_profile_free(&p);
        if (r != 0 || f->oom) {
            fprintf(stderr, "flamme svg: %s: out of memory\n", path);
            return 1;
        }
        return 0;
    }
    int r = flamme_folded_read_fd(f, fd, name);
    if (!is_stdin)
        close(fd);
    return r == 0 ? 0 : 1;
}

int flamme_cmd_svg(int argc, char **argv)
{
    struct flamme_fg_opts o;
    flamme_fg_defaults(&o);
    const char *out_path = NULL;
    double v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case O_TITLE: o.title = optarg; break;
        case O_SUBTITLE: o.subtitle = optarg; break;
        case O_WIDTH:
            if (parse_num("width", optarg, &v, NULL, 1)) return 2;
            o.width = (int)v;
            break;
        case O_HEIGHT:
            if (parse_num("height", optarg, &v, NULL, 1)) return 2;
            o.height = (int)v;
            break;
        case O_MINWIDTH:
            if (parse_num("minwidth", optarg, &o.minwidth, &o.minwidth_pct, 0)) return 2;
            break;
        case O_FONTTYPE: o.fonttype = optarg; break;
        case O_FONTSIZE:
            if (parse_num("fontsize", optarg, &o.fontsize, NULL, 0) || o.fontsize <= 0) return 2;
            break;
        case O_FONTWIDTH:
            if (parse_num("fontwidth", optarg, &o.fontwidth, NULL, 0) || o.fontwidth <= 0) return 2;
            break;
        case O_COUNTNAME: o.countname = optarg; break;
        case O_NAMETYPE: o.nametype = optarg; break;
        case O_COLORS:
            if (!flamme_fg_palette_ok(optarg)) {
                fprintf(stderr, "flamme svg: --colors: unknown palette: %s (see --help)\n", optarg);
                return 2;
            }
            o.colors = optarg;
            break;
        case O_HASH: o.hash = 1; break;
        case O_CP: o.cp_file = optarg ? optarg : "palette.map"; break;
        case O_REVERSE: o.reverse = 1; break;
        case O_INVERTED: o.inverted = 1; break;
        case O_FLAMECHART: o.flamechart = 1; break;
        case O_NEGATE: o.negate = 1; break;
        case O_NOTES: o.notes = optarg; break;
        case O_THREADS: o.threads = 1; break;
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "flamme svg: bad option (see flamme svg --help)\n");
            return 2;
        }
    }
    struct flamme_folded f;
    flamme_folded_init(&f);
    int rc = 0;
    if (optind >= argc)
        rc = read_input(&f, "-", o.threads);
    for (int i = optind; i < argc && rc == 0; i++)
        rc = read_input(&f, argv[i], o.threads);
    if (rc != 0) {
        flamme_folded_free(&f);
        return rc;
    }
    if (f.bad_lines)
        fprintf(stderr, "flamme svg: ignored %zu lines with invalid format\n", f.bad_lines);
    FILE *out = stdout;
    if (out_path && strcmp(out_path, "-") != 0) {
        out = fopen(out_path, "w");
        if (!out) {
            fprintf(stderr, "flamme svg: cannot write %s: %s\n", out_path, strerror(errno));
            flamme_folded_free(&f);
            return 1;
        }
    }
    static char obuf[1 << 20];
    setvbuf(out, obuf, _IOFBF, sizeof obuf);
    rc = flamme_fg_render(&f, &o, out, NULL);
    if (rc == 2)
        fprintf(stderr, "flamme svg: no valid input\n");
    if (out != stdout && fclose(out) != 0 && rc == 0) {
        fprintf(stderr, "flamme svg: write error on %s\n", out_path);
        rc = 1;
    } else if (out == stdout && fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "flamme svg: write error on stdout\n");
        rc = 1;
    }
    flamme_folded_free(&f);
    return rc;
}
