/*
 * tests/unit/test_gc.c — GC insight on a synthetic profile written with
 * flamme_pw_* and read back: GC records round-trip (and an unknown kind is
 * kept as read); `--fold-gc` turns the GC part of a stack into one "[GC]" or
 * "[GC stw wait]" frame beneath the frame that triggered it and leaves other
 * stacks alone; the report's GC section shows per-domain flag / stack shares
 * and duration percentiles computed from the records.
 */
#include "tests/unit/check.h"
#include "common/profile.h"
#include "tools/collapse.h"
#include "tools/gc_frames.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char prof_path[64];

/* Frames (function names as the writer stores them). */
static const char *const fnames[] = {
    "main",                        /* 0 */
    "camlM.entry",                 /* 1 */
    "camlM.work_12",               /* 2 */
    "caml_call_gc",                /* 3 */
    "caml_alloc_small_dispatch",   /* 4 */
    "caml_empty_minor_heap_promote",/* 5 */
    "oldify_one",                  /* 6 */
    "caml_try_run_on_all_domains_with_spin_work", /* 7 */
    "caml_plat_spin_wait",         /* 8 */
    "caml_do_opportunistic_major_slice", /* 9 */
    "pool_sweep.constprop.0",      /* 10 */
    "caml_c_call",                 /* 11 */
    "caml_gc_log",                 /* 12 */
};
#define NFRAMES (sizeof fnames / sizeof fnames[0])

/* Stacks, leaf first. */
static const uint32_t st_plain[] = { 2, 1, 0 };          /* main;M (init);M.work */
static const uint32_t st_minor[] = { 6, 5, 4, 3, 2, 1, 0 }; /* ...M.work;caml_call_gc;...;oldify_one */
static const uint32_t st_wait[] = { 8, 12, 7, 4, 3, 2, 1, 0 }; /* spinning in the STW request */
static const uint32_t st_spinwork[] = { 10, 9, 7, 4, 3, 2, 1, 0 }; /* major work while spinning */
static const uint32_t st_cgc[] = { 6, 5, 11, 2, 1, 0 };  /* through caml_c_call */

/* GC records: domain 0 has minor durations 1..100 µs, domain 1 one major
 * slice; one record of an unknown kind 7. */
static void write_profile(void)
{
    strcpy(prof_path, "/tmp/flamme_test_gc_XXXXXX");
    int fd = mkstemp(prof_path);
    CHECK(fd >= 0);
    struct flamme_header h = { .pid = 42, .hz = 1000, .start_monotonic_ns = 1000 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    if (!w)
        return;
    CHECK(flamme_pw_thread(w, 100, FLAMME_THREAD_MAIN, 0, 1000, "prog") == 0);
    CHECK(flamme_pw_thread(w, 101, FLAMME_THREAD_DOMAIN, 1, 1000, "") == 0);
    for (uint32_t i = 0; i < NFRAMES; i++)
        CHECK(flamme_pw_frame(w, i, 0x1000 + i * 16, 0x1000 + i * 16, fnames[i], "/bin/prog") == 0);
    CHECK(flamme_pw_stack(w, 0, 3, st_plain) == 0);
    CHECK(flamme_pw_stack(w, 1, 7, st_minor) == 0);
    CHECK(flamme_pw_stack(w, 2, 8, st_wait) == 0);
    CHECK(flamme_pw_stack(w, 3, 8, st_spinwork) == 0);
    CHECK(flamme_pw_stack(w, 4, 6, st_cgc) == 0);
    /* domain 0: 6 plain, 3 minor (flagged), 1 wait; domain 1: 2 plain,
     * 1 spin-work (flagged major), 1 through caml_c_call (flagged minor). */
    CHECK(flamme_pw_sample(w, 0, 100, 6, 0, 0, 2000) == 0);
    CHECK(flamme_pw_sample(w, 1, 100, 3, 0, FLAMME_SAMPLE_GC_MINOR, 2100) == 0);
    CHECK(flamme_pw_sample(w, 2, 100, 1, 0, 0, 2200) == 0);
    CHECK(flamme_pw_sample(w, 0, 101, 2, 1, 0, 2300) == 0);
    CHECK(flamme_pw_sample(w, 3, 101, 1, 1, FLAMME_SAMPLE_GC_MAJOR, 2400) == 0);
    CHECK(flamme_pw_sample(w, 4, 101, 1, 1, FLAMME_SAMPLE_GC_MINOR, 2500) == 0);
    for (uint64_t i = 1; i <= 100; i++)
        CHECK(flamme_pw_gc(w, 100, 0, FLAMME_GC_MINOR, 10000 * i, (101 - i) * 1000) == 0);
    CHECK(flamme_pw_gc(w, 101, 1, FLAMME_GC_MAJOR_SLICE, 5000, 2500000) == 0);
    CHECK(flamme_pw_gc(w, 101, -1, 7, (uint64_t)1 << 60, UINT64_MAX) == 0);
    CHECK(flamme_pw_close(w, 14, 0, 3000000, 2) == 0);
}

TEST(gc_records_round_trip)
{
    struct flamme_profile p;
    char err[256];
    CHECK(flamme_profile_load(prof_path, &p, err, sizeof err) == 0);
    CHECK(p.hdr.major == FLAMME_VERSION_MAJOR && p.hdr.minor == FLAMME_VERSION_MINOR);
    CHECK(p.ngc == 102);
    if (p.ngc == 102) {
        CHECK(p.gc[0].tid == 100 && p.gc[0].domain == 0 && p.gc[0].kind == FLAMME_GC_MINOR);
        CHECK(p.gc[0].start_ns == 10000 && p.gc[0].duration_ns == 100000);
        CHECK(p.gc[100].tid == 101 && p.gc[100].domain == 1 &&
              p.gc[100].kind == FLAMME_GC_MAJOR_SLICE && p.gc[100].duration_ns == 2500000);
        CHECK(p.gc[101].domain == -1 && p.gc[101].kind == 7 &&
              p.gc[101].start_ns == (uint64_t)1 << 60 && p.gc[101].duration_ns == UINT64_MAX);
    }
    /* The other records are unaffected by GC records between them. */
    CHECK(p.nsamples == 6 && p.nframes == NFRAMES && p.complete);
    flamme_profile_free(&p);
}

struct lines {
    char text[16][320];
    int n;
};

static void collect(void *ctx, const char *stack, uint64_t count)
{
    struct lines *l = ctx;
    if (l->n < 16)
        snprintf(l->text[l->n++], sizeof l->text[0], "%s %llu", stack, (unsigned long long)count);
}

TEST(fold_gc)
{
    struct flamme_profile p;
    char err[256];
    CHECK(flamme_profile_load(prof_path, &p, err, sizeof err) == 0);
    struct lines l = { .n = 0 };
    struct flamme_collapse_opts o = { .fold_gc = 1 };
    CHECK(flamme_collapse_profile(&p, &o, collect, &l) == 0);
    CHECK(l.n == 4);
    /* minor work + major work while spinning fold to the same line */
    CHECK_STR(l.text[0], "main;M (init);M.work 8");
    CHECK_STR(l.text[1], "main;M (init);M.work;[GC stw wait] 1");
    CHECK_STR(l.text[2], "main;M (init);M.work;[GC] 4");
    CHECK_STR(l.text[3], "main;M (init);M.work;caml_c_call;[GC] 1");
    /* without the option the GC frames are all there */
    struct lines l2 = { .n = 0 };
    struct flamme_collapse_opts o2 = { 0 };
    CHECK(flamme_collapse_profile(&p, &o2, collect, &l2) == 0);
    CHECK(l2.n == 5);
    CHECK_STR(l2.text[2], "main;M (init);M.work;caml_call_gc;caml_alloc_small_dispatch;"
                          "caml_empty_minor_heap_promote;oldify_one 3");
    flamme_profile_free(&p);
}

TEST(classify)
{
    struct flamme_profile p;
    char err[256];
    CHECK(flamme_profile_load(prof_path, &p, err, sizeof err) == 0);
    uint32_t root = 99;
    CHECK(flamme_gc_classify(&p, &p.stacks[0], &root) == FLAMME_GCC_NONE);
    CHECK(flamme_gc_classify(&p, &p.stacks[1], &root) == FLAMME_GCC_GC && root == 3);
    /* leaf-most decisive frame: the STW spin (caml_plat_* and logging are
     * decided by their caller) */
    CHECK(flamme_gc_classify(&p, &p.stacks[2], &root) == FLAMME_GCC_STW && root == 4);
    /* pool_sweep.constprop.0: the suffix is ignored, GC work wins */
    CHECK(flamme_gc_classify(&p, &p.stacks[3], &root) == FLAMME_GCC_GC && root == 4);
    CHECK(flamme_gc_classify(&p, &p.stacks[4], &root) == FLAMME_GCC_GC && root == 1);
    flamme_profile_free(&p);
}

/* The report section as text. */
static char *report_text(void)
{
    struct flamme_profile p;
    char err[256];
    CHECK(flamme_profile_load(prof_path, &p, err, sizeof err) == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (f) {
        CHECK(flamme_gc_report(&p, f) == 0);
        fclose(f);
    }
    flamme_profile_free(&p);
    return buf;
}

/* The whitespace-separated fields of the first line starting (after
 * indentation) with the given words; returns the count. */
static int row(const char *text, const char *start, char fields[12][32])
{
    const char *s = text;
    while (s && *s) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)n, s);
        const char *t = line + strspn(line, " ");
        if (strncmp(t, start, strlen(start)) == 0) {
            int k = 0;
            for (char *tok = strtok(line, " "); tok && k < 12; tok = strtok(NULL, " "))
                snprintf(fields[k++], 32, "%s", tok);
            return k;
        }
        s = e ? e + 1 : NULL;
    }
    return 0;
}

/* Checks that the row starting with `start` has exactly the given fields
 * (NULL: any value). */
static void expect_row(const char *t, const char *start, int n, const char *const *want)
{
    char f[12][32];
    CHECK(row(t, start, f) == n);
    for (int i = 0; i < n && i < 12; i++)
        if (want[i])
            CHECK_STR(f[i], want[i]);
}

TEST(report_section)
{
    char *t = report_text();
    CHECK(t != NULL);
    if (!t)
        return;
    /* domain 0: weight 10; minor flag 3, stack GC 3, stw 1 */
    expect_row(t, "0  ", 6, (const char *const[]){ "0", "10", "30.0%", "0.0%", "30.0%", "10.0%" });
    /* domain 1: weight 4; minor 1, major 1, stack GC 2 */
    expect_row(t, "1  ", 6, (const char *const[]){ "1", "4", "25.0%", "25.0%", "50.0%", "0.0%" });
    /* minor durations 1..100 µs: total 5.05 ms, p50 50, p90 90, p99 99, max 100 */
    expect_row(t, "0        minor", 8,
               (const char *const[]){ "0", "minor", "100", "5.0", "50.0", "90.0", "99.0", "100.0" });
    expect_row(t, "1        major slice", 9,
               (const char *const[]){ "1", "major", "slice", "1", "2.5", NULL, NULL, NULL, "2500.0" });
    /* the unknown kind is not shown as minor or major */
    char f[12][32];
    CHECK(row(t, "none", f) == 0);
    free(t);
}

int main(void)
{
    write_profile();
    RUN(gc_records_round_trip);
    RUN(fold_gc);
    RUN(classify);
    RUN(report_section);
    unlink(prof_path);
    return CHECK_DONE();
}
