/*
 * tests/unit/test_export.c — tools/export.c through its verb on a profile
 * written with flamme_pw_*: speedscope JSON text (schema, escaped names,
 * root-first frame indices, nanosecond weights), the pprof file gunzipped
 * and walked as protobuf (string_table[0] == "", sample count total, every
 * referenced location defined), folded text equal to flamme_collapse_profile,
 * and exit status 2 on bad input. tests/export/run.py checks the same
 * outputs more deeply with Python's json module and a recorded program.
 */
#include "tests/unit/check.h"
#include "common/profile.h"
#include "tools/cmds.h"
#include "tools/collapse.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

int flamme_cmd_export(int argc, char **argv); /* until tools/cmds.h declares it */

static char prof_path[64];
static char out_path[64];

/* Frames: 0 main, 1 camlM.work_12, 2 camlStdlib__List.map_279, 3 a hostile
 * name (quote, backslash, newline, invalid byte). hz 1000: 1 ms per sample. */
static void write_profile(void)
{
    strcpy(prof_path, "/tmp/flamme_test_export_XXXXXX");
    int fd = mkstemp(prof_path);
    CHECK(fd >= 0);
    struct flamme_header h = { .pid = 7, .hz = 1000, .start_realtime_ns = 5000000000ull,
                               .start_monotonic_ns = 1000 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    if (!w)
        return;
    flamme_pw_thread(w, 100, FLAMME_THREAD_MAIN, 0, 1000, "prog");
    flamme_pw_thread(w, 101, FLAMME_THREAD_DOMAIN, 1, 1000, "");
    flamme_pw_frame(w, 0, 0x1000, 0x1000, "main", "/bin/prog");
    flamme_pw_frame(w, 1, 0x2000, 0x2000, "camlM.work_12", "/bin/prog");
    flamme_pw_frame(w, 2, 0x3000, 0x3000, "camlStdlib__List.map_279", "/bin/prog");
    flamme_pw_frame(w, 3, 0x4000, 0x4000, "q\"b\\c\nd\xff", "/bin/prog");
    const uint32_t s0[] = { 2, 1, 0 }, s1[] = { 1, 0 }, s2[] = { 3, 0 };
    flamme_pw_stack(w, 0, 3, s0);
    flamme_pw_stack(w, 1, 2, s1);
    flamme_pw_stack(w, 2, 2, s2);
    flamme_pw_sample(w, 0, 100, 2, 0, 0, 3000);
    flamme_pw_sample(w, 1, 101, 1, 1, 0, 4000);
    flamme_pw_sample(w, 2, 100, 3, 0, 0, 5000);
    CHECK(flamme_pw_close(w, 3, 0, 9000, 2) == 0);
}

/* Runs `flamme export prof_path --format fmt -o out_path [extra]`; returns its status. */
static int export_to(const char *fmt, const char *extra)
{
    if (out_path[0])
        unlink(out_path);
    strcpy(out_path, "/tmp/flamme_test_export_out_XXXXXX");
    int fd = mkstemp(out_path);
    if (fd >= 0)
        close(fd);
    char *argv[] = { "export", prof_path, "--format", (char *)fmt, "-o", out_path, (char *)extra, NULL };
    return flamme_cmd_export(extra ? 7 : 6, argv);
}

/* Whole file (gunzipped when it is gzip) as a NUL-terminated buffer; length in *n. */
static char *slurp(const char *path, size_t *n)
{
    gzFile g = gzopen(path, "rb");
    size_t cap = 1 << 16;
    char *b = malloc(cap);
    *n = 0;
    if (!g || !b) {
        if (g)
            gzclose(g);
        free(b);
        return NULL;
    }
    int r;
    while ((r = gzread(g, b + *n, (unsigned)(cap - *n - 1))) > 0) {
        *n += (size_t)r;
        if (cap - *n < 2) {
            cap *= 2;
            b = realloc(b, cap);
        }
    }
    gzclose(g);
    b[*n] = '\0';
    return b;
}

TEST(speedscope)
{
    CHECK(export_to("speedscope", NULL) == 0);
    size_t n;
    char *s = slurp(out_path, &n);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK(strncmp(s, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\"", 63) == 0);
    /* Frame indices follow frame ids (all distinct names); the hostile name escaped. */
    CHECK(strstr(s, "{\"name\":\"main\",\"file\":\"prog\"},{\"name\":\"M.work\",\"file\":\"prog\"},"
                    "{\"name\":\"Stdlib.List.map\",\"file\":\"prog\"},"
                    "{\"name\":\"q\\\"b\\\\c\\u000ad\\ufffd\",\"file\":\"prog\"}") != NULL);
    CHECK(strstr(s, "\"name\":\"all threads\",\"unit\":\"nanoseconds\",\"startValue\":2000,"
                    "\"endValue\":1004000,") != NULL);
    CHECK(strstr(s, "\"samples\":[[0,1,2],[0,1],[0,3]],\"weights\":[2000000,1000000,3000000]") != NULL);
    free(s);

    CHECK(export_to("speedscope", "--threads") == 0);
    s = slurp(out_path, &n);
    CHECK(s && strstr(s, "\"name\":\"main\",\"unit\"") && strstr(s, "\"name\":\"domain 1\",\"unit\""));
    free(s);
}

static uint64_t rd_varint(const unsigned char *b, size_t n, size_t *i)
{
    uint64_t v = 0;
    for (int sh = 0; *i < n && sh < 64; sh += 7) {
        unsigned char c = b[(*i)++];
        v |= (uint64_t)(c & 0x7f) << sh;
        if (c < 0x80)
            break;
    }
    return v;
}

/* Walks one message: calls back for each field. Returns 0, or -1 if malformed. */
struct field {
    unsigned num, wire;
    uint64_t v;
    const unsigned char *d;
    size_t len;
};
static int next_field(const unsigned char *b, size_t n, size_t *i, struct field *f)
{
    uint64_t key = rd_varint(b, n, i);
    f->num = (unsigned)(key >> 3);
    f->wire = (unsigned)(key & 7);
    if (f->wire == 0) {
        f->v = rd_varint(b, n, i);
        return 0;
    }
    if (f->wire != 2)
        return -1;
    f->len = rd_varint(b, n, i);
    if (f->len > n - *i)
        return -1;
    f->d = b + *i;
    *i += f->len;
    return 0;
}

TEST(pprof)
{
    CHECK(export_to("pprof", "--threads") == 0);
    size_t n;
    char *s = slurp(out_path, &n);
    CHECK(s != NULL && n > 0);
    if (!s)
        return;
    const unsigned char *b = (const unsigned char *)s;
    size_t i = 0, nsamples = 0, nstrings = 0, nlocs = 0, nrefs = 0;
    uint64_t total = 0, cpu = 0, loc_ids[64], refs[64];
    int first_empty = 0, bad = 0;
    struct field f, g;
    while (i < n && !bad) {
        if (next_field(b, n, &i, &f) != 0) {
            bad = 1;
            break;
        }
        if (f.num == 6 && nstrings++ == 0)
            first_empty = f.wire == 2 && f.len == 0;
        if (f.num == 4 && f.wire == 2) {
            size_t j = 0;
            while (j < f.len && next_field(f.d, f.len, &j, &g) == 0)
                if (g.num == 1 && g.wire == 0 && nlocs < 64)
                    loc_ids[nlocs++] = g.v;
        }
        if (f.num == 2 && f.wire == 2) {
            nsamples++;
            size_t j = 0;
            while (j < f.len && next_field(f.d, f.len, &j, &g) == 0) {
                size_t k = 0;
                if (g.num == 1 && g.wire == 2)
                    while (k < g.len && nrefs < 64)
                        refs[nrefs++] = rd_varint(g.d, g.len, &k);
                if (g.num == 2 && g.wire == 2) {
                    total += rd_varint(g.d, g.len, &k);
                    cpu += rd_varint(g.d, g.len, &k);
                }
            }
        }
    }
    CHECK(!bad);
    CHECK(first_empty);
    CHECK(nsamples == 3); /* three (stack, thread) pairs */
    CHECK(total == 6);
    CHECK(cpu == 6000000);
    CHECK(nrefs == 7);
    for (size_t r = 0; r < nrefs; r++) {
        int found = 0;
        for (size_t l = 0; l < nlocs; l++)
            found |= loc_ids[l] == refs[r];
        CHECK(found);
    }
    CHECK(memmem(s, n, "Stdlib.List.map", 15) != NULL);
    CHECK(memmem(s, n, "camlStdlib__List.map_279", 24) != NULL);
    CHECK(memmem(s, n, "domain 1", 8) != NULL);
    free(s);
}

static void append(void *ctx, const char *stack, uint64_t count)
{
    char *buf = ctx;
    size_t l = strlen(buf);
    snprintf(buf + l, 4096 - l, "%s %llu\n", stack, (unsigned long long)count);
}

TEST(folded)
{
    CHECK(export_to("folded", "--threads") == 0);
    size_t n;
    char *s = slurp(out_path, &n);
    struct flamme_profile p;
    char err[256], want[4096] = "";
    CHECK(flamme_profile_load(prof_path, &p, err, sizeof err) == 0);
    struct flamme_collapse_opts o = { .threads = 1 };
    CHECK(flamme_collapse_profile(&p, &o, append, want) == 0);
    flamme_profile_free(&p);
    CHECK(strstr(want, "domain 1;main;M.work 1\n") != NULL);
    CHECK_STR(s, want);
    free(s);
}

TEST(bad_input)
{
    char *a1[] = { "export", "/nonexistent/x.flm", "--format", "pprof", NULL };
    CHECK(flamme_cmd_export(4, a1) == 2);
    char *a2[] = { "export", prof_path, "--format", "svg", NULL };
    CHECK(flamme_cmd_export(4, a2) == 2);
    char *a3[] = { "export", prof_path, NULL };
    CHECK(flamme_cmd_export(2, a3) == 2);
    char *a4[] = { "export", prof_path, "--format", NULL };
    CHECK(flamme_cmd_export(3, a4) == 2);
    char junk[] = "/tmp/flamme_test_export_junk_XXXXXX";
    int fd = mkstemp(junk);
    CHECK(fd >= 0 && write(fd, "not a profile at all\n", 21) == 21);
    close(fd);
    char *a5[] = { "export", junk, "--format", "speedscope", NULL };
    CHECK(flamme_cmd_export(4, a5) == 2);
    unlink(junk);
}

int main(void)
{
    write_profile();
    RUN(speedscope);
    RUN(pprof);
    RUN(folded);
    RUN(bad_input);
    unlink(prof_path);
    unlink(out_path);
    return CHECK_DONE();
}
