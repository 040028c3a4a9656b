/*
 * tests/unit/test_collapse.c — tools/collapse.c on a profile written with
 * flamme_pw_* to a temp file and read back: folded lines root first, names
 * demangled (or raw), weights of identical lines summed, truncated/broken
 * markers, thread root labels, unknown frames as [module] or module+0xoff,
 * folded-unsafe characters replaced, and the collapse verb's exit codes.
 */
#include "tests/unit/check.h"
#include "common/profile.h"
#include "tools/cmds.h"
#include "tools/collapse.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char prof_path[64];

/* Frames: 0 main, 1 camlM.entry, 2 camlM.work_12, 3 camlStdlib__List.map_279,
 * 4 second address in camlM.work, 5 unknown in libfoo.so, 6 name with ';'
 * and a newline. Stacks are leaf first. */
static void write_profile(void)
{
    strcpy(prof_path, "/tmp/flamme_test_collapse_XXXXXX");
    int fd = mkstemp(prof_path);
    CHECK(fd >= 0);
    struct flamme_header h = { .pid = 42, .hz = 999, .start_monotonic_ns = 1000 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    if (!w)
        return;
    CHECK(flamme_pw_thread(w, 100, FLAMME_THREAD_MAIN, 0, 1000, "prog") == 0);
    CHECK(flamme_pw_thread(w, 101, FLAMME_THREAD_DOMAIN, 1, 1000, "") == 0);
    CHECK(flamme_pw_thread(w, 102, FLAMME_THREAD_SYSTHREAD, 1, 1000, "") == 0);
    flamme_pw_frame(w, 0, 0x1000, 0x1000, "main", "/bin/prog");
    flamme_pw_frame(w, 1, 0x2000, 0x2000, "camlM.entry", "/bin/prog");
    flamme_pw_frame(w, 2, 0x3000, 0x3000, "camlM.work_12", "/bin/prog");
    flamme_pw_frame(w, 3, 0x4000, 0x4000, "camlStdlib__List.map_279", "/bin/prog");
    flamme_pw_frame(w, 4, 0x3010, 0x3010, "camlM.work_12", "/bin/prog");
    flamme_pw_frame(w, 5, 0x7f00, 0x1f00, "", "/usr/lib/libfoo.so");
    flamme_pw_frame(w, 6, 0x5000, 0x5000, "a;b\nc", "/bin/prog");
    const uint32_t s0[] = { 3, 2, 1, 0 }; /* main;M (init);M.work;Stdlib.List.map */
    const uint32_t s1[] = { 4, 1, 0 };    /* main;M (init);M.work (other address) */
    const uint32_t s2[] = { 2, 1, 0 };    /* same text as s1 */
    const uint32_t s3[] = { 3, 2 };       /* truncated: root end lost */
    const uint32_t s4[] = { 5, 2 };       /* broken, leaf in libfoo */
    const uint32_t s5[] = { 6, 0 };
    flamme_pw_stack(w, 0, 4, s0);
    flamme_pw_stack(w, 1, 3, s1);
    flamme_pw_stack(w, 2, 3, s2);
    flamme_pw_stack(w, 3, 2, s3);
    flamme_pw_stack(w, 4, 2, s4);
    flamme_pw_stack(w, 5, 2, s5);
    flamme_pw_sample(w, 0, 100, 1, 0, 0, 2000);
    flamme_pw_sample(w, 0, 100, 2, 0, 0, 3000);
    flamme_pw_sample(w, 0, 101, 1, 1, 0, 3000);
    flamme_pw_sample(w, 1, 100, 1, 0, 0, 4000);
    flamme_pw_sample(w, 2, 100, 4, 0, 0, 5000);
    flamme_pw_sample(w, 3, 102, 1, 1, FLAMME_SAMPLE_TRUNCATED, 6000);
    flamme_pw_sample(w, 4, 103, 1, 0, FLAMME_SAMPLE_BROKEN, 7000);
    flamme_pw_sample(w, 5, 100, 1, 0, 0, 8000);
    CHECK(flamme_pw_close(w, 8, 0, 9000, 3) == 0);
}

struct lines {
    char text[16][256];
    int n;
};

static void collect(void *ctx, const char *stack, uint64_t count)
{
    struct lines *l = ctx;
    if (l->n < 16)
        snprintf(l->text[l->n++], sizeof l->text[0], "%s %llu", stack, (unsigned long long)count);
}

static struct lines collapse_with(int threads, int raw, int addresses)
{
    struct lines l = { .n = 0 };
    struct flamme_profile p;
    char err[256];
    int rc = flamme_profile_load(prof_path, &p, err, sizeof err);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "  %s\n", err);
        return l;
    }
    struct flamme_collapse_opts o = { .threads = threads, .raw_names = raw, .addresses = addresses };
    CHECK(flamme_collapse_profile(&p, &o, collect, &l) == 0);
    flamme_profile_free(&p);
    return l;
}

TEST(folded_default)
{
    struct lines l = collapse_with(0, 0, 0);
    CHECK(l.n == 5);
    CHECK_STR(l.text[0], "[broken];M.work;[libfoo.so] 1");
    CHECK_STR(l.text[1], "[truncated];M.work;Stdlib.List.map 1");
    CHECK_STR(l.text[2], "main;M (init);M.work 5");                /* two stacks, same text */
    CHECK_STR(l.text[3], "main;M (init);M.work;Stdlib.List.map 4"); /* 1 + 2 + 1 */
    CHECK_STR(l.text[4], "main;a:b c 1");
}

TEST(folded_threads)
{
    struct lines l = collapse_with(1, 0, 0);
    CHECK(l.n == 6);
    CHECK_STR(l.text[0], "domain 1;main;M (init);M.work;Stdlib.List.map 1");
    CHECK_STR(l.text[1], "main;main;M (init);M.work 5");
    CHECK_STR(l.text[2], "main;main;M (init);M.work;Stdlib.List.map 3");
    CHECK_STR(l.text[3], "main;main;a:b c 1");
    CHECK_STR(l.text[4], "thread 102 (domain 1);[truncated];M.work;Stdlib.List.map 1");
    CHECK_STR(l.text[5], "thread 103;[broken];M.work;[libfoo.so] 1"); /* no THREAD record */
}

TEST(folded_raw_and_addresses)
{
    struct lines l = collapse_with(0, 1, 1);
    CHECK(l.n == 5);
    CHECK_STR(l.text[0], "[broken];camlM.work_12;libfoo.so+0x1f00 1");
    CHECK_STR(l.text[2], "main;a:b c 1"); /* 'a' sorts before 'c' now */
    CHECK_STR(l.text[3], "main;camlM.entry;camlM.work_12 5");
    CHECK_STR(l.text[4], "main;camlM.entry;camlM.work_12;camlStdlib__List.map_279 4");
}

/* Wall mode: a sample taken in a system call ends in a [blocked] leaf, the
 * same stack on CPU does not; CPU time the kernel spent for it (cpu mode)
 * ends in a [kernel] leaf. */
TEST(blocked_leaf)
{
    char path[64] = "/tmp/flamme_test_blocked_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    struct flamme_header h = { .pid = 7, .hz = 99, .start_monotonic_ns = 1 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    if (!w)
        return;
    flamme_pw_frame(w, 0, 0x1000, 0x1000, "main", "/bin/prog");
    flamme_pw_frame(w, 1, 0x2000, 0x2000, "read", "/lib/libc.so.6");
    const uint32_t st[] = { 1, 0 };
    flamme_pw_stack(w, 0, 2, st);
    flamme_pw_sample(w, 0, 7, 3, 0, FLAMME_SAMPLE_SYSCALL, 10);
    flamme_pw_sample(w, 0, 7, 1, 0, 0, 20);
    flamme_pw_sample(w, 0, 7, 2, 0, FLAMME_SAMPLE_KERNEL, 25);
    CHECK(flamme_pw_close(w, 3, 0, 30, 1) == 0);
    struct flamme_profile p;
    char err[256];
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    struct lines l = { .n = 0 };
    struct flamme_collapse_opts o = { .threads = 0 };
    CHECK(flamme_collapse_profile(&p, &o, collect, &l) == 0);
    CHECK(l.n == 3);
    CHECK_STR(l.text[0], "main;read 1");
    CHECK_STR(l.text[1], "main;read;[blocked] 3");
    CHECK_STR(l.text[2], "main;read;[kernel] 2");
    flamme_profile_free(&p);
    unlink(path);
}

TEST(thread_labels)
{
    static const struct {
        uint8_t kind;
        const char *label;
    } cases[] = {
        { FLAMME_THREAD_MAIN, "main" },
        { FLAMME_THREAD_DOMAIN, "domain 2" },
        { FLAMME_THREAD_SYSTHREAD, "thread 7 (domain 2)" },
        { FLAMME_THREAD_C, "thread 7" },
        { FLAMME_THREAD_BACKUP, "backup (domain 2)" },
        { FLAMME_THREAD_TICK, "tick" },
        { FLAMME_THREAD_UNKNOWN, "thread 7" },
    };
    char b[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct flamme_thread t = { .tid = 7, .domain = 2, .kind = cases[i].kind };
        CHECK_STR(flamme_thread_label(&t, b, sizeof b), cases[i].label);
    }
}

/* Runs the verb with stdout to a file; returns its exit code and the output. */
static int run_verb(int (*verb)(int, char **), char **argv, int argc, char *out, size_t outlen)
{
    char tmp[] = "/tmp/flamme_test_collapse_out_XXXXXX";
    int fd = mkstemp(tmp);
    fflush(stdout);
    int saved = dup(1), saved_err = dup(2);
    dup2(fd, 1);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    int rc = verb(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    dup2(saved_err, 2);
    close(saved);
    close(saved_err);
    close(devnull);
    ssize_t n = pread(fd, out, outlen - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(tmp);
    return rc;
}

TEST(verb)
{
    char out[4096];
    char *ok[] = { "collapse", prof_path, "--threads" };
    CHECK(run_verb(flamme_cmd_collapse, ok, 3, out, sizeof out) == 0);
    CHECK(strstr(out, "main;main;M (init);M.work 5\n") != NULL);
    CHECK(strstr(out, "domain 1;main;M (init);M.work;Stdlib.List.map 1\n") != NULL);

    char bad[] = "/tmp/flamme_test_collapse_bad_XXXXXX";
    int fd = mkstemp(bad);
    CHECK(write(fd, "not a profile at all\n", 21) == 21);
    close(fd);
    char *notprof[] = { "collapse", bad };
    CHECK(run_verb(flamme_cmd_collapse, notprof, 2, out, sizeof out) == 2);
    CHECK_STR(out, "");
    unlink(bad);
    char *missing[] = { "collapse", "/nonexistent/flamme.prof" };
    CHECK(run_verb(flamme_cmd_collapse, missing, 2, out, sizeof out) == 2);
    char *badopt[] = { "collapse", prof_path, "--bogus" };
    CHECK(run_verb(flamme_cmd_collapse, badopt, 3, out, sizeof out) == 2);
}

/* Weights: 12 in all; 10 under main, 1 truncated, 1 broken. M.work is on
 * every stack but the one with the odd name (total 11); it is the leaf of
 * s1/s2 (self 5), Stdlib.List.map of s0/s3 (self 5). */
TEST(report)
{
    char out[8192];
    char *argv[] = { "report", prof_path };
    CHECK(run_verb(flamme_cmd_report, argv, 2, out, sizeof out) == 0);
    CHECK(strstr(out, "pid 42, 999 Hz") != NULL);
    CHECK(strstr(out, "complete stacks: 83.3%") != NULL);
    CHECK(strstr(out, "truncated: 8.3%  broken: 8.3%") != NULL);
    CHECK(strstr(out, "weight 12;") != NULL);
    const char *self = strstr(out, "by self time:");
    const char *total = strstr(out, "by total time:");
    CHECK(self && total);
    if (!self || !total)
        return;
    /* Top of the total table: M.work, 11 of 12 (91.7%), counted once per stack. */
    CHECK(strstr(total, "   91.7%         11  M.work\n") != NULL);
    const char *thr = strstr(out, "threads (");
    CHECK(thr && strstr(thr, "main") && strstr(thr, "thread 103"));
    char *bad[] = { "report", "/nonexistent/flamme.prof" };
    CHECK(run_verb(flamme_cmd_report, bad, 2, out, sizeof out) == 2);
}

int main(void)
{
    write_profile();
    RUN(folded_default);
    RUN(folded_threads);
    RUN(folded_raw_and_addresses);
    RUN(blocked_leaf);
    RUN(thread_labels);
    RUN(verb);
    RUN(report);
    unlink(prof_path);
    return CHECK_DONE();
}
