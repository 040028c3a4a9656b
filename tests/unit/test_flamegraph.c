/*
 * tests/unit/test_flamegraph.c — flame graph layout (tools/flamegraph.c, tools/fg_*.c) and
 * `flamme svg` on a real profile file (with and without --threads).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "common/profile.h"
#include "tools/cmds.h"
#include "tools/collapse.h"
#include "tools/flamegraph.h"
#include "tools/folded.h"

static char *slurp(const char *path)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return NULL;
    fseek(in, 0, SEEK_END);
    long n = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, in) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(in);
    return b;
}

/* Renders folded text with opts into a string (caller frees). */
static char *render_text(const char *text, const struct flamme_fg_opts *o, struct flamme_fg_stats *st,
                         int *rc)
{
    struct flamme_folded f;
    flamme_folded_init(&f);
    const char *p = text, *why;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        flamme_folded_parse_line(&f, p, len, &why);
        p += len + (nl != NULL);
    }
    char *buf = NULL;
    size_t blen = 0;
    FILE *out = open_memstream(&buf, &blen);
    *rc = flamme_fg_render(&f, o, out, st);
    fclose(out);
    flamme_folded_free(&f);
    return buf;
}

TEST(minwidth_elision_adds_up)
{
    struct flamme_fg_opts o;
    flamme_fg_defaults(&o);
    o.minwidth = 2;
    char *text = malloc(300 * 32 + 64);
    size_t n = (size_t)sprintf(text, "main;big 1000\n");
    for (int i = 0; i < 300; i++)
        n += (size_t)sprintf(text + n, "main;tiny%d;deeper 1\n", i);
    struct flamme_fg_stats st;
    int rc;
    char *svg = render_text(text, &o, &st, &rc);
    CHECK(rc == 0);
    CHECK(st.elided_frames == 600);   /* tinyN and its child, 300 times */
    CHECK(st.elided_samples == 300);
    CHECK(st.drawn == 4);             /* all, main, big, … */
    CHECK(svg && strstr(svg, "600 frames narrower than 2 px") != NULL);
    free(svg);
    o.minwidth = 0;
    svg = render_text(text, &o, &st, &rc);
    CHECK(st.elided_frames == 0 && st.drawn == 3 + 600);
    free(svg);
    free(text);
}

TEST(empty_input_writes_error_svg)
{
    struct flamme_fg_opts o;
    flamme_fg_defaults(&o);
    int rc;
    char *svg = render_text("", &o, NULL, &rc);
    CHECK(rc == 2);
    CHECK(svg && strstr(svg, "No valid input") != NULL);
    free(svg);
}

/* Writes a two-thread profile: main 30 samples, domain 1 70 samples. */
static int write_profile(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    struct flamme_header h = {.major = FLAMME_VERSION_MAJOR, .minor = FLAMME_VERSION_MINOR,
                              .pid = 42, .hz = 99};
    flamme_pw *w = fd >= 0 ? flamme_pw_open(fd, &h) : NULL;
    if (!w)
        return -1;
    flamme_pw_thread(w, 100, FLAMME_THREAD_MAIN, 0, 1, "main");
    flamme_pw_thread(w, 101, FLAMME_THREAD_DOMAIN, 1, 1, "");
    flamme_pw_frame(w, 0, 0x1000, 0x10, "caml_main", "prog");
    flamme_pw_frame(w, 1, 0x2000, 0x20, "work_loop", "prog");
    flamme_pw_frame(w, 2, 0x3000, 0x30, "caml_call_gc", "prog");
    uint32_t s0[] = {1, 0}, s1[] = {2, 1, 0};
    flamme_pw_stack(w, 0, 2, s0);
    flamme_pw_stack(w, 1, 3, s1);
    for (int i = 0; i < 30; i++)
        flamme_pw_sample(w, 0, 100, 1, 0, 0, 10 + (uint64_t)i);
    for (int i = 0; i < 70; i++)
        flamme_pw_sample(w, 1, 101, 1, 1, 0, 10 + (uint64_t)i);
    return flamme_pw_close(w, 100, 0, 1000, 2);
}

TEST(profile_input_and_threads)
{
    char dir[] = "/tmp/flamme-fg-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char prof[128], out[128];
    snprintf(prof, sizeof prof, "%s/p.flamme", dir);
    snprintf(out, sizeof out, "%s/p.svg", dir);
    CHECK(write_profile(prof) == 0);

    char *argv1[] = {"svg", prof, "-o", out, NULL};
    CHECK(flamme_cmd_svg(4, argv1) == 0);
    char *svg = slurp(out);
    CHECK(svg && strstr(svg, "<title>all\n100 samples, 100.00%") != NULL);
    CHECK(svg && strstr(svg, "<title>caml_call_gc\n70 samples, 70.00%") != NULL);
    CHECK(svg && strstr(svg, "id=\"threads\"") == NULL);
    free(svg);

    struct flamme_profile p;
    char err[256], label[64], want[128];
    CHECK(flamme_profile_load(prof, &p, err, sizeof err) == 0);
    const struct flamme_thread *dom = flamme_profile_thread(&p, 101);
    CHECK(dom != NULL);
    snprintf(want, sizeof want, "<title>%s\n70 samples, 70.00%%",
             dom ? flamme_thread_label(dom, label, sizeof label) : "?");
    char *argv2[] = {"svg", "--threads", prof, "-o", out, NULL};
    CHECK(flamme_cmd_svg(5, argv2) == 0);
    svg = slurp(out);
    CHECK(svg && strstr(svg, want) != NULL);                  /* one root frame per thread */
    CHECK(svg && strstr(svg, "id=\"threads\"") != NULL);      /* with a selector */
    snprintf(want, sizeof want, ">%s</text>", label);
    CHECK(svg && strstr(svg, want) != NULL);
    free(svg);
    flamme_profile_free(&p);
    unlink(prof);
    unlink(out);
    rmdir(dir);
}

int main(void)
{
    RUN(minwidth_elision_adds_up);
    RUN(empty_input_writes_error_svg);
    RUN(profile_input_and_threads);
    return CHECK_DONE();
}
