/*
 * tools/fg_svg.c — the interactive SVG document of a flame graph.
 *
 * Owns: the XML text of a laid-out tree: declaration, style, title and
 * controls, thread selector, one <g> (or <a>, with --nameattr) per frame with
 * its tooltip and fitted label, and the viewer's JavaScript (tools/
 * flamegraph.js, embedded at build time by mk/render.mk).
 * Called by: flamme_fg_render (tools/flamegraph.c); single thread.
 * Every name reaches the SVG through put_esc() (XML-escaped, UTF-8 checked);
 * the JavaScript reads names from the DOM and never contains input text.
 */
#include "tools/fg_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FRAMEPAD 1.0

/* ------------------------------------------------------------ XML text */

/* Writes s[0..len) XML-escaped, replacing invalid UTF-8 and control bytes
 * with U+FFFD; stops after maxcp code points. */
static void put_esc(FILE *o, const char *s, size_t len, size_t maxcp)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + len;
    size_t cp = 0;
    while (p < e && cp < maxcp) {
        unsigned c = *p;
        cp++;
        if (c < 0x80) {
            switch (c) {
            case '&': fputs("&amp;", o); break;
            case '<': fputs("&lt;", o); break;
            case '>': fputs("&gt;", o); break;
            case '"': fputs("&quot;", o); break;
            case '\'': fputs("&#39;", o); break;
            default:
                if (c < 0x20 || c == 0x7f)
                    fputs("\xef\xbf\xbd", o);
                else
                    putc((int)c, o);
            }
            p++;
            continue;
        }
        int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        if (c >= 0xf5)
            n = 0;
        int ok = n > 0 && e - p >= n;
        for (int k = 1; ok && k < n; k++)
            ok = (p[k] & 0xc0) == 0x80;
        if (ok && n == 3) { /* no overlongs, no surrogates */
            unsigned v = (c & 0x0f) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
            ok = v >= 0x800 && (v < 0xd800 || v > 0xdfff) && v != 0xfffe && v != 0xffff;
        } else if (ok && n == 4) {
            unsigned v = (c & 0x07) << 18 | (p[1] & 0x3fu) << 12;
            ok = v >= 0x10000 && v <= 0x10ffff;
        }
        if (ok) {
            fwrite(p, 1, (size_t)n, o);
            p += n;
        } else {
            fputs("\xef\xbf\xbd", o);
            p++;
        }
    }
}

static void put_escz(FILE *o, const char *s)
{
    put_esc(o, s, strlen(s), SIZE_MAX);
}

static size_t utf8_len(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

/* Display length: the annotation suffixes _[k] _[i] _[j] _[w] are dropped. */
static size_t display_len(const char *s, size_t len)
{
    if (len >= 4 && s[len - 4] == '_' && s[len - 3] == '[' && s[len - 1] == ']' &&
        strchr("kijw", s[len - 2]))
        return len - 4;
    return len;
}

/* Formats v with thousands separators ("1,234,567" or "12.50"). */
static const char *fmt_count(double v, char *buf, size_t len)
{
    char tmp[64];
    if (v == floor(v) && fabs(v) < 1e18)
        snprintf(tmp, sizeof tmp, "%.0f", v);
    else
        snprintf(tmp, sizeof tmp, "%.2f", v);
    char *dot = strchr(tmp, '.');
    size_t ilen = dot ? (size_t)(dot - tmp) : strlen(tmp), j = 0, lead = tmp[0] == '-';
    for (size_t i = 0; i < ilen && j + 2 < len; i++) {
        if (i > lead && (ilen - i) % 3 == 0)
            buf[j++] = ',';
        buf[j++] = tmp[i];
    }
    snprintf(buf + j, len - j, "%s", dot ? dot : "");
    return buf;
}

/* ------------------------------------------------------------ the SVG */

/* The viewer's JavaScript, tools/flamegraph.js turned into a C string by
 * mk/render.mk in $(BUILD)/gen (on the include path of this file only). It
 * must not contain "]]>" (it goes into a CDATA section). */
static const char fg_script[] =
#include "flamegraph_js.inc"
    ;

static void put_num(FILE *o, double v)
{
    if (v == floor(v) && fabs(v) < 1e15)
        fprintf(o, "%.0f", v);
    else
        fprintf(o, "%.17g", v);
}

/* Keeps only characters that cannot end a CSS declaration or an XML text. */
static void put_font(FILE *o, const char *s)
{
    for (; *s; s++)
        if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
            strchr(" ,-_", *s))
            putc(*s, o);
}

/* XML comment body: "--" may not appear in a comment. */
static void put_comment(FILE *o, const char *s)
{
    for (const char *p = s; *p;) {
        if (*p == '-') {
            fputs(p[1] == '-' || p[1] == 0 ? "- " : "-", o);
            p++;
            continue;
        }
        size_t n = strcspn(p, "-"); /* whole runs, so multi-byte characters stay whole */
        put_esc(o, p, n, SIZE_MAX);
        p += n;
    }
}

int flamme_fg_encoding_ok(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        return 0;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* The XML declaration; --encoding only names an encoding (as flamegraph.pl,
 * the bytes are UTF-8 whatever it says). A name that is not a valid XML
 * EncName never gets here (svg.c checks flamme_fg_encoding_ok). */
static void put_xml_decl(FILE *o, const struct flamme_fg_opts *op)
{
    fputs("<?xml version=\"1.0\"", o);
    if (op->encoding && flamme_fg_encoding_ok(op->encoding))
        fprintf(o, " encoding=\"%s\"", op->encoding);
    fputs(" standalone=\"no\"?>\n", o);
}

void flamme_fg_svg_error(FILE *o, const struct flamme_fg_opts *op, const char *msg)
{
    put_xml_decl(o, op);
    fprintf(o, "<svg version=\"1.1\" width=\"%d\" height=\"60\" xmlns=\"http://www.w3.org/2000/svg\">\n"
               "<text x=\"%d\" y=\"30\" font-family=\"", op->width, op->width / 2);
    put_font(o, op->fonttype);
    fprintf(o, "\" font-size=\"%g\" text-anchor=\"middle\">", op->fontsize);
    put_escz(o, msg);
    fputs("</text>\n</svg>\n", o);
}

/* What drawing the frames needs besides the output. */
struct svg_ctx {
    const struct flamme_folded *f;
    const struct flamme_fg_opts *op;
    const struct fg_tree *t;
    struct fg_colors *col;
    const struct fg_na_entry *const *na_of; /* per name id, NULL: no --nameattr line */
};

static void node_name(const struct svg_ctx *c, const struct fg_node *nd, const char **s, size_t *len)
{
    if (nd->name == FG_NAME_ROOT) {
        *s = "all";
        *len = 3;
    } else if (nd->name == FG_NAME_ELIDED) {
        *s = "\xe2\x80\xa6";
        *len = 3;
    } else {
        uint32_t id = flamme_fg_real_id(c->t, nd->name);
        *s = flamme_folded_name(c->f, id);
        *len = display_len(*s, c->f->name_len[id]);
    }
}

static void put_attr(FILE *o, const char *k, const char *v)
{
    fprintf(o, " %s=\"", k);
    put_escz(o, v);
    putc('"', o);
}

/* The --nameattr attributes of a frame element, in flamegraph.pl's order
 * (link attributes first when the frame is a link). */
static void write_na_attrs(FILE *o, const struct fg_na_entry *na, int link)
{
    if (link) {
        put_attr(o, "xlink:href", na->href);
        put_attr(o, "target", na->target && na->target[0] ? na->target : "_top");
        for (size_t i = na->ngx; i < na->nextra; i++)
            put_attr(o, na->extra[i].key, na->extra[i].val);
    }
    if (na->id)
        put_attr(o, "id", na->id);
    if (na->cls)
        put_attr(o, "class", na->cls);
    for (size_t i = 0; i < na->ngx; i++)
        put_attr(o, na->extra[i].key, na->extra[i].val);
}

static void write_frame(struct svg_ctx *c, FILE *o, const struct fg_node *nd, double total, double scale,
                        double imageheight, double ypad1, double ypad2)
{
    const struct flamme_fg_opts *op = c->op;
    double x = FG_XPAD + nd->start * scale, w = nd->total * scale;
    double y = op->inverted ? ypad1 + nd->depth * (double)op->height
                            : imageheight - ypad2 - (nd->depth + 1) * (double)op->height;
    const char *name;
    size_t nlen;
    char b1[64], b2[64];
    node_name(c, nd, &name, &nlen);
    struct fg_rgb col = flamme_fg_node_color(c->col, nd);
    const struct fg_na_entry *na = NULL;
    if (c->na_of && nd->name != FG_NAME_ROOT && nd->name != FG_NAME_ELIDED)
        na = c->na_of[flamme_fg_real_id(c->t, nd->name)];
    /* as flamegraph.pl: a frame with an href is an <a> carrying the <g>'s attributes */
    const char *tag = na && na->href && na->href[0] ? "a" : "g";
    fprintf(o, "<%s", tag);
    if (na)
        write_na_attrs(o, na, *tag == 'a');
    fputs(" s=\"", o);
    put_num(o, nd->start);
    fputs("\" n=\"", o);
    put_num(o, nd->total);
    fputs("\" m=\"", o);
    put_num(o, nd->self);
    fprintf(o, "\" d=\"%u\"%s", nd->depth, nd->name == FG_NAME_ELIDED ? " class=\"el\"" : "");
    if (na && na->title) { /* the viewer takes the name from fn when the title is replaced */
        fputs(" fn=\"", o);
        put_esc(o, name, nlen, SIZE_MAX);
        fputs("\"><title>", o);
        put_escz(o, na->title);
        goto title_done;
    }
    fputs("><title>", o);
    put_esc(o, name, nlen, SIZE_MAX);
    fprintf(o, "\n%s ", fmt_count(nd->total, b1, sizeof b1));
    put_escz(o, op->countname);
    fprintf(o, ", %.2f%%", total > 0 ? 100.0 * nd->total / total : 0.0);
    if (nd->name == FG_NAME_ELIDED)
        fprintf(o, "\n%zu frames narrower than the minimum width merged here", nd->elided);
    else
        fprintf(o, "\nself: %s, %.2f%%", fmt_count(nd->self, b2, sizeof b2),
                total > 0 ? 100.0 * nd->self / total : 0.0);
    if (c->f->differential && nd->name != FG_NAME_ELIDED)
        fprintf(o, "\ndelta: %s%s (%+.2f%%)", nd->delta > 0 ? "+" : "",
                fmt_count(nd->delta, b1, sizeof b1), total > 0 ? 100.0 * nd->delta / total : 0.0);
title_done:
    fprintf(o, "</title><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"rgb(%d,%d,%d)\""
               " rx=\"2\" ry=\"2\"/><text x=\"%.2f\" y=\"%.1f\">",
            x, y, w, op->height - FRAMEPAD, col.r, col.g, col.b, x + 3,
            y + op->height / 2.0 + op->fontsize / 3.0);
    double cw = op->fontsize * op->fontwidth;
    size_t fit = w > 3 ? (size_t)((w - 3) / cw) : 0;
    size_t cps = utf8_len(name, nlen);
    if (fit >= 3 || (cps <= fit && cps > 0)) {
        if (cps <= fit) {
            put_esc(o, name, nlen, SIZE_MAX);
        } else {
            put_esc(o, name, nlen, fit - 2);
            fputs("..", o);
        }
    }
    fprintf(o, "</text></%s>\n", tag);
}

void flamme_fg_svg_write(FILE *o, const struct flamme_folded *f, const struct flamme_fg_opts *op,
                         const struct fg_tree *t, struct fg_colors *col, const struct fg_na_entry *const *na_of,
                         double total, const struct flamme_fg_stats *st)
{
    struct svg_ctx c = {.f = f, .op = op, .t = t, .col = col, .na_of = na_of};
    double drawable = op->width - 2 * FG_XPAD;
    if (drawable < 1)
        drawable = 1;
    const char *title = op->title ? op->title
                        : op->flamechart ? "Flame Chart"
                        : op->inverted ? "Icicle Graph" : "Flame Graph";
    double fs = op->fontsize;
    double ypad1 = fs * 3 + (op->subtitle ? fs * 1.5 : 0) + fs * 1.5 + (op->threads ? fs * 1.8 : 0);
    double ypad2 = fs * 2 + 10;
    double imageheight = (st->max_depth + 1) * (double)op->height + ypad1 + ypad2;
    double scale = drawable / total;
    const char *bg2, *bg1 = flamme_fg_bg_colors(op->colors, op->bgcolors, &bg2);
    char b1[64], b2[64];

    put_xml_decl(o, op);
    fputs("<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" "
          "\"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n", o);
    fprintf(o, "<svg version=\"1.1\" id=\"flamme\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" "
               "data-total=\"", op->width, imageheight, op->width, imageheight);
    put_num(o, total);
    fprintf(o, "\" data-xpad=\"%g\" data-w=\"%.4f\" data-fs=\"%g\" data-fw=\"%g\" data-countname=\"",
            FG_XPAD, drawable, op->fontsize, op->fontwidth);
    put_escz(o, op->countname);
    fputs("\" data-nametype=\"", o);
    put_escz(o, op->nametype);
    fputs("\">\n<!-- Flame graph by flamme svg.", o);
    if (op->notes) {
        fputs(" NOTES: ", o);
        put_comment(o, op->notes);
    }
    fputs(" -->\n", o);
    fprintf(o, "<!-- %zu frames drawn; %zu frames narrower than the minimum width merged into "
               "\xe2\x80\xa6 frames (%s of the total) -->\n",
            st->drawn, st->elided_frames, fmt_count(st->elided_samples, b1, sizeof b1));
    fprintf(o, "<defs><linearGradient id=\"background\" y1=\"0\" y2=\"1\" x1=\"0\" x2=\"0\">"
               "<stop stop-color=\"%s\" offset=\"5%%\"/><stop stop-color=\"%s\" offset=\"95%%\"/>"
               "</linearGradient></defs>\n<style type=\"text/css\">\ntext { font-family:",
            bg1, bg2);
    put_font(o, op->fonttype);
    fprintf(o, "; font-size:%gpx; fill:rgb(0,0,0); }\n"
               "#frames > *:hover > rect { stroke:black; stroke-width:0.5; cursor:pointer; }\n"
               "#frames > * { cursor:pointer; }\n"
               "#title { text-anchor:middle; font-size:%gpx; }\n"
               "#subtitle { text-anchor:middle; fill:rgb(80,80,80); }\n"
               "#search, #ignorecase, #unzoom, .sel { cursor:pointer; fill:rgb(20,20,160); }\n"
               "#search, #matched, #elided { text-anchor:end; }\n"
               "#elided { fill:rgb(100,100,100); }\n"
               ".sel.on { font-weight:bold; }\n"
               ".hide { display:none; }\n"
               ".parent { opacity:0.5; }\n</style>\n",
            fs, fs + 5);
    fprintf(o, "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"url(#background)\"/>\n");
    fprintf(o, "<text id=\"title\" x=\"%.2f\" y=\"%.1f\">", op->width / 2.0, fs * 2);
    put_escz(o, title);
    fputs("</text>\n", o);
    double yline = fs * 2;
    if (op->subtitle) {
        yline += fs * 1.5;
        fprintf(o, "<text id=\"subtitle\" x=\"%.2f\" y=\"%.1f\">", op->width / 2.0, yline);
        put_escz(o, op->subtitle);
        fputs("</text>\n", o);
    }
    yline += fs * 1.5;
    fprintf(o, "<text id=\"unzoom\" class=\"hide\" x=\"%.2f\" y=\"%.1f\">Reset Zoom</text>\n", FG_XPAD, yline);
    fprintf(o, "<text id=\"search\" x=\"%.2f\" y=\"%.1f\">Search</text>\n", op->width - FG_XPAD - 30, yline);
    fprintf(o, "<text id=\"ignorecase\" x=\"%.2f\" y=\"%.1f\">ic</text>\n", op->width - FG_XPAD - 16, yline);
    fprintf(o, "<text id=\"elided\" x=\"%.2f\" y=\"%.1f\">", op->width - FG_XPAD - 120, yline);
    if (st->elided_frames) {
        fprintf(o, "%zu frames narrower than %g%s elided into \xe2\x80\xa6 (%s ", st->elided_frames,
                op->minwidth, op->minwidth_pct ? "%" : " px", fmt_count(st->elided_samples, b2, sizeof b2));
        put_escz(o, op->countname);
        fprintf(o, ", %.2f%%)", 100.0 * st->elided_samples / total);
    }
    fputs("</text>\n", o);
    if (op->threads) {
        yline += fs * 1.8;
        double x = FG_XPAD;
        fprintf(o, "<g id=\"threads\"><text class=\"sel on\" x=\"%.2f\" y=\"%.1f\">all</text>", x, yline);
        x += 4 * fs * op->fontwidth + fs;
        for (uint32_t ch = t->nodes[t->root].first_child; ch != FG_NO_NODE; ch = t->nodes[ch].next) {
            const struct fg_node *nd = &t->nodes[ch];
            if (nd->name == FG_NAME_ELIDED || x > op->width - 50)
                continue;
            const char *name;
            size_t nlen;
            node_name(&c, nd, &name, &nlen);
            size_t cps = utf8_len(name, nlen);
            if (cps > 40)
                cps = 40;
            fputs("<text class=\"sel\" s=\"", o);
            put_num(o, nd->start);
            fprintf(o, "\" x=\"%.2f\" y=\"%.1f\">", x, yline);
            put_esc(o, name, nlen, 40);
            fputs("</text>", o);
            x += (double)(cps + 2) * fs * op->fontwidth + fs;
        }
        fputs("</g>\n", o);
    }
    fprintf(o, "<text id=\"details\" x=\"%.2f\" y=\"%.1f\"> </text>\n", FG_XPAD, imageheight - fs / 2 - 4);
    fprintf(o, "<text id=\"matched\" x=\"%.2f\" y=\"%.1f\"> </text>\n", op->width - FG_XPAD,
            imageheight - fs / 2 - 4);
    fputs("<g id=\"frames\">\n", o);
    for (size_t i = t->n; i-- > 0;)
        write_frame(&c, o, &t->nodes[i], total, scale, imageheight, ypad1, ypad2);
    fputs("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n", o);
    fputs(fg_script, o);
    fputs("]]></script>\n</svg>\n", o);
}
