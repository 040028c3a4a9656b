/*
 * tools/svg.c — `flamme svg`: folded stacks or flamme profiles in, an
 * interactive flame graph SVG out. Options follow flamegraph.pl's spelling
 * and meaning. Owns option parsing and input dispatch; the parsing rules are
 * in tools/folded.c, layout and SVG in tools/flamegraph.c. A profile piped
 * into stdin is recognised by its magic and spooled to an unlinked temp file.
 * Called by tools/main.c; single thread.
 */
#include "tools/cmds.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/outfile.h"
#include "common/profile.h"
#include "tools/alloc_view.h"
#include "tools/collapse.h"
#include "tools/flamegraph.h"
#include "tools/folded.h"

static void usage(FILE *o)
{
    fputs("usage: flamme svg [options] [INPUT...] [-o OUT.svg]\n"
          "Renders folded stacks (\"root;...;leaf COUNT\", as flamegraph.pl reads them) or flamme\n"
          "profile files as an interactive SVG flame graph. Several inputs are merged; no\n"
          "INPUT or \"-\" reads stdin (folded text or a profile).\n"
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
          "  --colors PALETTE    hot (default), mem, io, wakeup, chain, java, js, perl, red, green,\n"
          "                      blue, aqua, yellow, purple, orange, ocaml (OCaml code / stdlib /\n"
          "                      runtime / GC / C / kernel). java, js, perl and chain pick a colour\n"
          "                      by name and _[k] _[i] _[j] _[w] annotations, as flamegraph.pl\n"
          "  --bgcolors COLOR    background: yellow, blue, green or grey gradient, or a flat\n"
          "                      #rrggbb (default: follows the palette)\n"
          "  --hash              colours from a name hash weighting the first characters\n"
          "  --random            a random colour for every frame (default: a name keeps its\n"
          "                      colour, within and across graphs)\n"
          "  --cp[=FILE]         consistent palette: read and update FILE (./palette.map)\n"
          "  --reverse           reverse each stack (merge at the leaves)\n"
          "  --inverted          icicle graph (root at the top)\n"
          "  --flamechart        keep the input order (x is time) instead of sorting\n"
          "  --negate            swap the differential colours (red/blue)\n"
          "  --notes TEXT        text kept in an XML comment\n"
          "  --nameattr FILE     per-function SVG attributes: lines \"NAME<TAB>key=value<TAB>...\",\n"
          "                      keys href (frame becomes a link; Ctrl-click zooms), target, title\n"
          "                      (replaces the tooltip), id, class, g_extra, a_extra\n"
          "  --total NUM         total count the width stands for, to draw graphs at the same\n"
          "                      scale (ignored when less than the real total)\n"
          "  --factor NUM        multiply the counts shown by NUM (1)\n"
          "  --encoding ENC      encoding named in the XML declaration (the bytes stay UTF-8)\n"
          "  --threads           profile input: one root frame per thread/domain, with a\n"
          "                      thread selector above the graph\n"
          "  --alloc             profile input: sampled allocations (bytes allocated by each\n"
          "                      stack) instead of CPU samples; palette mem, counts in bytes\n"
          "  --live              profile input: the sampled blocks still alive when profiling\n"
          "                      stopped (recorded with --live)\n"
          "  --blocks            with --alloc or --live: count blocks instead of bytes\n"
          "  --lines             profile input: frames with a source position read\n"
          "                      \"function (file:line)\", one frame per source line\n"
          "  -h, --help          this help\n"
          "A line \"stack COUNT1 COUNT2\" is differential: widths from COUNT2, colour from\n"
          "COUNT2-COUNT1 (red: more, blue: less). Fewer than 100 samples in all prints a\n"
          "\"stack count is low\" warning (as flamegraph.pl, only with --countname samples).\n"
          "In the SVG: click a frame to zoom, Ctrl-F or F3 to search (regexp), Ctrl-I to\n"
          "toggle case, Escape to reset the zoom.\n",
          o);
}

enum { O_TITLE = 256, O_SUBTITLE, O_WIDTH, O_HEIGHT, O_MINWIDTH, O_FONTTYPE, O_FONTSIZE,
       O_FONTWIDTH, O_COUNTNAME, O_NAMETYPE, O_COLORS, O_HASH, O_CP, O_REVERSE, O_INVERTED,
       O_FLAMECHART, O_NEGATE, O_NOTES, O_THREADS, O_BGCOLORS, O_RANDOM, O_NAMEATTR, O_TOTAL,
       O_FACTOR, O_ENCODING, O_LINES, O_ALLOC, O_LIVE, O_BLOCKS };

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
    {"lines", no_argument, 0, O_LINES},
    {"alloc", no_argument, 0, O_ALLOC},
    {"live", no_argument, 0, O_LIVE},
    {"blocks", no_argument, 0, O_BLOCKS},
    {"bgcolors", required_argument, 0, O_BGCOLORS},
    {"random", no_argument, 0, O_RANDOM},
    {"nameattr", required_argument, 0, O_NAMEATTR},
    {"total", required_argument, 0, O_TOTAL},
    {"factor", required_argument, 0, O_FACTOR},
    {"encoding", required_argument, 0, O_ENCODING},
    {"output", required_argument, 0, 'o'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* Parses a number in [0, max] (or a percentage when pct is non-NULL). 0 / -1. */
static int parse_num_max(const char *opt, const char *s, double *out, int *pct, int integer, double max)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (pct) {
        *pct = *end == '%';
        if (*pct)
            end++;
    }
    if (end == s || *end || errno || !(v >= 0) || v > max || (integer && (v < 1 || v != (int)v))) {
        fprintf(stderr, "flamme svg: --%s: not a valid %s: %s\n", opt,
                integer ? "positive integer" : "number", s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_num(const char *opt, const char *s, double *out, int *pct, int integer)
{
    return parse_num_max(opt, s, out, pct, integer, 1e9);
}

/* Which weight profile inputs give (--alloc, --live, --blocks). */
static struct flamme_view view;

static void collect(void *ctx, const char *stack, uint64_t count)
{
    struct flamme_folded *f = ctx;
    flamme_folded_add(f, stack, strlen(stack), (double)count);
}

/* Profile files of an allocation view, read together once every input is
 * seen (flamme_profile_load_many): a segment may have no allocations, and
 * a block may die in a later segment than the one that allocated it. */
static const char **alloc_paths;
static size_t nalloc_paths;

/* Collapses p (its view applied) into f; frees p. 0, 1 or 2 as load_profile. */
static int add_profile(struct flamme_folded *f, struct flamme_profile *p, const char *name,
                       const struct flamme_collapse_opts *co)
{
    char err[512];
    if (flamme_view_apply(p, &view, name, err, sizeof err) != 0) {
        fprintf(stderr, "flamme svg: %s\n", err);
        flamme_profile_free(p);
        return 2;
    }
    if (p->truncated)
        fprintf(stderr, "flamme svg: %s: warning: profile is truncated; using what was read\n", name);
    int r = flamme_collapse_profile(p, co, collect, f);
    flamme_profile_free(p);
    if (r != 0 || f->oom)
        return flamme_collapse_error("svg", name, f->oom ? -1 : r);
    return 0;
}

/* The deferred profiles of an allocation view, read as one into f. */
static int load_alloc_profiles(struct flamme_folded *f, const struct flamme_collapse_opts *co)
{
    if (!nalloc_paths)
        return 0;
    struct flamme_profile p;
    char err[512];
    if (flamme_profile_load_many(alloc_paths, nalloc_paths, &p, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "flamme svg: %s\n", err);
        return 2;
    }
    return add_profile(f, &p, alloc_paths[0], co);
}

/* Loads the profile at path (shown as name) into f. 0, 1 (I/O, memory) or 2 (bad input). */
static int load_profile(struct flamme_folded *f, const char *path, const char *name,
                        const struct flamme_collapse_opts *co)
{
    struct flamme_profile p;
    char err[512];
    if (flamme_profile_load(path, &p, err, sizeof err) != 0) {
        size_t pl = strlen(path);
        if (strncmp(err, path, pl) == 0) /* "/proc/self/fd/N: ..." reads better as the name */
            fprintf(stderr, "flamme svg: %s%s\n", name, err + pl);
        else
            fprintf(stderr, "flamme svg: %s\n", err);
        return 2;
    }
    return add_profile(f, &p, name, co);
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* stdin that cannot be re-read (a pipe): the first bytes tell a profile from
 * folded text. A profile is spooled to an unlinked temp file ($TMPDIR or
 * /tmp) and loaded from there; text goes to the folded parser, sniffed bytes
 * first. 0, 1 (I/O) or 2 (bad input). */
static int read_stdin_stream(struct flamme_folded *f, const struct flamme_collapse_opts *co)
{
    unsigned char head[8];
    size_t hn = 0;
    while (hn < sizeof head) {
        ssize_t r = read(0, head + hn, sizeof head - hn);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            fprintf(stderr, "flamme svg: <stdin>: read error: %s\n", strerror(errno));
            return 1;
        }
        if (r == 0)
            break;
        hn += (size_t)r;
    }
    if (!flamme_is_profile(head, hn))
        return flamme_folded_read_fd_head(f, 0, "<stdin>", head, hn) == 0 ? 0 : 1;
    const char *dir = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/flamme-svg-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        fprintf(stderr, "flamme svg: <stdin>: cannot create a temp file for the profile (%s): %s\n",
                tmpl, strerror(errno));
        return 1;
    }
    unlink(tmpl);
    int rc = write_all(fd, head, hn);
    static char buf[1 << 16];
    for (;;) {
        if (rc != 0)
            break;
        ssize_t r = read(0, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            fprintf(stderr, "flamme svg: <stdin>: read error: %s\n", strerror(errno));
            close(fd);
            return 1;
        }
        if (r == 0)
            break;
        rc = write_all(fd, buf, (size_t)r);
    }
    if (rc != 0) {
        fprintf(stderr, "flamme svg: <stdin>: cannot spool the profile to %s: %s\n", dir && *dir ? dir : "/tmp",
                strerror(errno));
        close(fd);
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    rc = load_profile(f, path, "<stdin>", co);
    close(fd);
    return rc;
}

/* Reads one input (profile or folded text) into f. 0, or 1 (I/O) / 2 (bad input). */
static int read_input(struct flamme_folded *f, const char *path, const struct flamme_collapse_opts *co)
{
    int is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "<stdin>" : path;
    int fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && !is_stdin && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        fd = -1;
        errno = EISDIR;
    }
    if (fd < 0) { /* bad input, as for every verb */
        fprintf(stderr, "flamme svg: %s: cannot open: %s\n", path, strerror(errno));
        return 2;
    }
    unsigned char head[16];
    /* pread fails on a pipe: sniff the stream then. A profile redirected from
     * a file into stdin is loaded through /proc. */
    ssize_t hn = pread(fd, head, sizeof head, 0);
    if (hn < 0 && is_stdin && errno == ESPIPE)
        return read_stdin_stream(f, co);
    if (hn > 0 && flamme_is_profile(head, (size_t)hn)) {
        if (!is_stdin)
            close(fd);
        if (view.alloc && !is_stdin) {
            alloc_paths[nalloc_paths++] = path;
            return 0;
        }
        return load_profile(f, is_stdin ? "/proc/self/fd/0" : path, name, co);
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
    struct flamme_fg_nameattr *nameattr = NULL;
    int lines = 0;
    int c, colors_set = 0, countname_set = 0;
    memset(&view, 0, sizeof view);
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case O_TITLE: o.title = optarg; break;
        case O_SUBTITLE: o.subtitle = optarg; break;
        case O_WIDTH:
            if (parse_num("width", optarg, &v, NULL, 1)) goto bad;
            o.width = (int)v;
            break;
        case O_HEIGHT:
            if (parse_num("height", optarg, &v, NULL, 1)) goto bad;
            o.height = (int)v;
            break;
        case O_MINWIDTH:
            if (parse_num("minwidth", optarg, &o.minwidth, &o.minwidth_pct, 0)) goto bad;
            break;
        case O_FONTTYPE: o.fonttype = optarg; break;
        case O_FONTSIZE:
            if (parse_num("fontsize", optarg, &o.fontsize, NULL, 0) || o.fontsize <= 0) goto bad;
            break;
        case O_FONTWIDTH:
            if (parse_num("fontwidth", optarg, &o.fontwidth, NULL, 0) || o.fontwidth <= 0) goto bad;
            break;
        case O_COUNTNAME: o.countname = optarg; countname_set = 1; break;
        case O_NAMETYPE: o.nametype = optarg; break;
        case O_COLORS:
            if (!flamme_fg_palette_ok(optarg)) {
                fprintf(stderr, "flamme svg: --colors: unknown palette: %s (see --help)\n", optarg);
                goto bad;
            }
            o.colors = optarg;
            colors_set = 1;
            break;
        case O_HASH: o.hash = 1; break;
        case O_CP: o.cp_file = optarg ? optarg : "palette.map"; break;
        case O_REVERSE: o.reverse = 1; break;
        case O_INVERTED: o.inverted = 1; break;
        case O_FLAMECHART: o.flamechart = 1; break;
        case O_NEGATE: o.negate = 1; break;
        case O_NOTES: o.notes = optarg; break;
        case O_THREADS: o.threads = 1; break;
        case O_LINES: lines = 1; break;
        case O_ALLOC: flamme_view_option(&view, "--alloc"); break;
        case O_LIVE: flamme_view_option(&view, "--live"); break;
        case O_BLOCKS: flamme_view_option(&view, "--blocks"); break;
        case O_BGCOLORS:
            if (!flamme_fg_bgcolors_ok(optarg)) {
                fprintf(stderr, "flamme svg: --bgcolors: unrecognized background: %s (yellow, blue, "
                                "green, grey or #rrggbb)\n", optarg);
                goto bad;
            }
            o.bgcolors = optarg;
            break;
        case O_RANDOM: o.random = 1; break;
        case O_NAMEATTR:
            flamme_fg_nameattr_free(nameattr);
            nameattr = flamme_fg_nameattr_load(optarg);
            if (!nameattr)
                goto bad;
            o.nameattr = nameattr;
            break;
        case O_TOTAL:
            if (parse_num_max("total", optarg, &o.total, NULL, 0, 1e18)) goto bad;
            break;
        case O_FACTOR:
            if (parse_num_max("factor", optarg, &o.factor, NULL, 0, 1e12)) goto bad;
            if (o.factor < 1e-12) { /* keeps scaled counts finite and non-zero */
                fprintf(stderr, "flamme svg: --factor: must be between 1e-12 and 1e12: %s\n", optarg);
                goto bad;
            }
            break;
        case O_ENCODING:
            if (!flamme_fg_encoding_ok(optarg)) {
                fprintf(stderr, "flamme svg: --encoding: not an encoding name: %s\n", optarg);
                goto bad;
            }
            o.encoding = optarg;
            break;
        case 'o': out_path = optarg; break;
        case 'h':
            usage(stdout);
            flamme_fg_nameattr_free(nameattr);
            return 0;
        default:
            fprintf(stderr, "flamme svg: bad option (see flamme svg --help)\n");
            goto bad;
        }
    }
    if (view.alloc) {
        if (!colors_set)
            o.colors = "mem";
        if (!countname_set)
            o.countname = flamme_view_unit(&view);
        if (!o.title)
            o.title = view.live ? "Live Heap Flame Graph" : "Allocation Flame Graph";
    }
    struct flamme_folded f;
    flamme_folded_init(&f);
    int rc = 0;
    struct flamme_collapse_opts co = {.threads = o.threads, .lines = lines};
    alloc_paths = calloc((size_t)argc + 1, sizeof *alloc_paths);
    if (!alloc_paths) {
        fprintf(stderr, "flamme svg: out of memory\n");
        rc = 1;
        goto done;
    }
    if (optind >= argc)
        rc = read_input(&f, "-", &co);
    for (int i = optind; i < argc && rc == 0; i++)
        rc = read_input(&f, argv[i], &co);
    if (rc == 0)
        rc = load_alloc_profiles(&f, &co);
    if (rc != 0)
        goto done;
    if (f.bad_lines)
        fprintf(stderr, "flamme svg: ignored %zu lines with invalid format\n", f.bad_lines);
    /* flamegraph.pl's hint that the input may be wrong; it only means sample counts */
    if (f.total > 0 && f.total < 100 && strcmp(o.countname, "samples") == 0)
        fprintf(stderr, "flamme svg: warning: stack count is low (%g). Did something go wrong?\n", f.total);
    FILE *out = stdout;
    char tmp[PATH_MAX + 8];
    if (out_path && strcmp(out_path, "-") != 0) {
        out = flamme_out_fopen(out_path, tmp, sizeof tmp);
        if (!out) {
            fprintf(stderr, "flamme svg: cannot write %s: %s\n", out_path, strerror(errno));
            rc = 1;
            goto done;
        }
    }
    static char obuf[1 << 20];
    setvbuf(out, obuf, _IOFBF, sizeof obuf);
    rc = flamme_fg_render(&f, &o, out, NULL);
    if (rc == 2) {
        fputs("flamme svg: ", stderr);
        if (optind >= argc)
            fputs("<stdin>", stderr);
        for (int i = optind; i < argc; i++)
            fprintf(stderr, "%s%s", i > optind ? ", " : "", strcmp(argv[i], "-") ? argv[i] : "<stdin>");
        fputs(": no valid input (no line \"stack COUNT\" with a count above 0)\n", stderr);
    }
    /* no valid input (2) still leaves the error SVG, as flamegraph.pl */
    if (out != stdout && flamme_out_fclose(out, tmp, out_path, rc != 1) != 0 && rc == 0) {
        fprintf(stderr, "flamme svg: write error on %s\n", out_path);
        rc = 1;
    } else if (out == stdout && fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "flamme svg: write error on stdout\n");
        rc = 1;
    }
done:
    free(alloc_paths);
    alloc_paths = NULL;
    nalloc_paths = 0;
    flamme_folded_free(&f);
    flamme_fg_nameattr_free(nameattr);
    return rc;
bad:
    flamme_fg_nameattr_free(nameattr);
    return 2;
}
