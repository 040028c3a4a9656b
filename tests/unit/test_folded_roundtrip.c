/*
 * tests/unit/test_folded_roundtrip.c — every verb that reads folded text
 * reads it by one rule (tools/folded.c): what `flamme collapse` and
 * `flamme diff --folded` write is read back line for line, with its
 * counts, by `flamme svg`'s reader and by `flamme diff` itself, and a file
 * with malformed lines loses the same lines in both.
 */
#include "tests/unit/check.h"
#include "common/profile.h"
#include "tools/cmds.h"
#include "tools/folded.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[64];

static const char *path_of(const char *name)
{
    static char bufs[8][128];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Sends stderr to a file until capture_end, which copies what was written
 * to err (NUL-terminated). */
static int capture_begin(int *saved)
{
    int fd = open(path_of("stderr"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    fflush(stderr);
    *saved = dup(2);
    dup2(fd, 2);
    return fd;
}

static void capture_end(int fd, int saved, char *err, size_t errlen)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, err, errlen - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
}

/* Runs a verb with stderr captured in err. Returns its status. */
static int run_verb(int (*verb)(int, char **), char **argv, int argc, char *err, size_t errlen)
{
    int saved, fd = capture_begin(&saved);
    int rc = verb(argc, argv);
    capture_end(fd, saved, err, errlen);
    return rc;
}

/* Reads a folded file with svg's reader. */
static int read_folded(const char *path, struct flamme_folded *f)
{
    flamme_folded_init(f);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    int rc = flamme_folded_read_fd(f, fd, path);
    close(fd);
    return rc;
}

/* Stack i of f as ';'-joined text. */
static const char *stack_text(const struct flamme_folded *f, size_t i, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t k = 0; k < f->stacks[i].n && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", k ? ";" : "",
                              flamme_folded_name(f, f->ids[f->stacks[i].off + k]));
    return buf;
}

/* The stack named text in f: its index, or -1. */
static long find_stack(const struct flamme_folded *f, const char *text)
{
    char buf[1024];
    for (size_t i = 0; i < f->nstacks; i++)
        if (strcmp(stack_text(f, i, buf, sizeof buf), text) == 0)
            return (long)i;
    return -1;
}

/* A profile whose names need care in folded text: spaces, a ';', and a
 * leaf ending in " 12" that would read as a count column. */
static void write_profile(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    struct flamme_header h = { .pid = 7, .hz = 250, .start_monotonic_ns = 1 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    if (!w)
        return;
    CHECK(flamme_pw_thread(w, 100, FLAMME_THREAD_MAIN, 0, 1, "prog") == 0);
    flamme_pw_frame(w, 0, 0x1000, 0x1000, "main", "/bin/prog");
    flamme_pw_frame(w, 1, 0x2000, 0x2000, "a b;c", "/bin/prog");
    flamme_pw_frame(w, 2, 0x3000, 0x3000, "leaf 12", "/bin/prog");
    flamme_pw_frame(w, 3, 0x4000, 0x4000, "plain", "/bin/prog");
    const uint32_t s0[] = { 2, 1, 0 }, s1[] = { 3, 0 };
    flamme_pw_stack(w, 0, 3, s0);
    flamme_pw_stack(w, 1, 2, s1);
    flamme_pw_sample(w, 0, 100, 7, 0, 0, 2);
    flamme_pw_sample(w, 1, 100, 5, 0, 0, 3);
    CHECK(flamme_pw_close(w, 4, 0, 4, 2) == 0);
}

TEST(collapse_output_reads_back)
{
    const char *prof = path_of("p.flm"), *out = path_of("c.folded"), *d = path_of("cc.folded");
    write_profile(prof);
    char err[4096];
    char *argv[] = { "collapse", (char *)prof, "-o", (char *)out };
    CHECK(run_verb(flamme_cmd_collapse, argv, 4, err, sizeof err) == 0);
    struct flamme_folded f;
    CHECK(read_folded(out, &f) == 0);
    CHECK(f.bad_lines == 0 && f.nstacks == 2 && f.total == 12 && !f.differential);
    long a = find_stack(&f, "main;a b:c;leaf_12"), b = find_stack(&f, "main;plain");
    CHECK(a >= 0 && b >= 0);
    CHECK(a >= 0 && f.stacks[a].count == 7);
    CHECK(b >= 0 && f.stacks[b].count == 5);
    flamme_folded_free(&f);
    /* diff of the output with itself: every count on both sides. */
    char *dargv[] = { "diff", (char *)out, (char *)out, "--folded", "-o", (char *)d };
    CHECK(run_verb(flamme_cmd_diff, dargv, 6, err, sizeof err) == 0);
    CHECK_STR(err, "");
    CHECK(read_folded(d, &f) == 0);
    CHECK(f.bad_lines == 0 && f.nstacks == 2 && f.total == 12 && f.differential);
    a = find_stack(&f, "main;a b:c;leaf_12");
    CHECK(a >= 0 && f.stacks[a].before == 7 && f.stacks[a].count == 7);
    flamme_folded_free(&f);
}

TEST(diff_output_reads_back)
{
    const char *b = path_of("b.folded"), *a = path_of("a.folded"), *d = path_of("d.folded"),
               *d2 = path_of("d2.folded");
    write_file(b, "main;x y 3\nmain;big 123456789012345678901\nmain;dec 2.5\n");
    write_file(a, "main;x y 4\nmain;big 1\nmain;new 2\n");
    char err[4096];
    char *argv[] = { "diff", (char *)b, (char *)a, "--folded", "-o", (char *)d };
    CHECK(run_verb(flamme_cmd_diff, argv, 6, err, sizeof err) == 0);
    struct flamme_folded f;
    CHECK(read_folded(d, &f) == 0);
    CHECK(f.bad_lines == 0 && f.nstacks == 4 && f.differential && f.total == 7);
    long big = find_stack(&f, "main;big"), dec = find_stack(&f, "main;dec");
    CHECK(big >= 0 && f.stacks[big].before == 123456789012345678901.0 && f.stacks[big].count == 1);
    CHECK(dec >= 0 && f.stacks[dec].before == 2.5 && f.stacks[dec].count == 0);
    flamme_folded_free(&f);
    /* diff reads its own output: the "after" column counts. */
    char *again[] = { "diff", (char *)d, (char *)b, "--folded", "-o", (char *)d2 };
    CHECK(run_verb(flamme_cmd_diff, again, 6, err, sizeof err) == 0);
    CHECK_STR(err, "");
    CHECK(read_folded(d2, &f) == 0);
    CHECK(f.bad_lines == 0 && f.nstacks == 4);
    long xy = find_stack(&f, "main;x y"), nw = find_stack(&f, "main;new");
    CHECK(xy >= 0 && f.stacks[xy].before == 4 && f.stacks[xy].count == 3);
    CHECK(nw >= 0 && f.stacks[nw].before == 2 && f.stacks[nw].count == 0);
    flamme_folded_free(&f);
}

/* Malformed lines: svg's reader and diff skip the same ones, with the same
 * reasons, and keep the same stacks with the same counts. */
TEST(same_lines_skipped)
{
    const char *bad = path_of("bad.folded"), *other = path_of("other.folded"),
               *d = path_of("bd.folded");
    write_file(bad, "main;a 1\n\nno count\n; 3\n 5\nmain;x 1 2\nmain;a 2\n");
    write_file(other, "other 1\n");
    struct flamme_folded f;
    char err[4096];
    char svgerr[4096];
    int saved, fd = capture_begin(&saved);
    int rc = read_folded(bad, &f);
    capture_end(fd, saved, svgerr, sizeof svgerr);
    CHECK(rc == 0);
    CHECK(f.bad_lines == 3 && f.nstacks == 3 && f.total == 5);
    char *argv[] = { "diff", (char *)bad, (char *)other, "--folded", "-o", (char *)d };
    CHECK(run_verb(flamme_cmd_diff, argv, 6, err, sizeof err) == 0);
    /* The same warnings, verb aside. */
    static const char *const why[] = { ":3: skipped line: no sample count",
                                       ":4: skipped line: empty stack",
                                       ":5: skipped line: empty stack" };
    for (size_t i = 0; i < 3; i++)
        CHECK(strstr(svgerr, why[i]) && strstr(err, why[i]));
    struct flamme_folded g;
    CHECK(read_folded(d, &g) == 0);
    CHECK(g.bad_lines == 0 && g.nstacks == 3); /* diff sums main;a; other */
    long a = find_stack(&g, "main;a"), x = find_stack(&g, "main;x");
    CHECK(a >= 0 && g.stacks[a].before == 3);
    CHECK(x >= 0 && g.stacks[x].before == 2);
    CHECK(find_stack(&g, ";") < 0 && find_stack(&g, "") < 0);
    flamme_folded_free(&g);
    flamme_folded_free(&f);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/flamme-test-fold-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(collapse_output_reads_back);
    RUN(diff_output_reads_back);
    RUN(same_lines_skipped);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE();
}
