/*
 * tests/unit/test_profile.c — the profile file format (common/profile.c):
 * what the writer writes the reader gives back; damaged, truncated, hostile
 * and newer files are handled as doc/format.md says. Some files are built by
 * hand here (own little-endian encoder + zlib) so the tests check the spec,
 * not only that the writer and reader agree with each other.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/profile.h"
#include "tests/unit/check.h"

static char dir[256];
static char path[512];

static struct flamme_header test_header(void)
{
    return (struct flamme_header){ .pid = 4242, .hz = 999, .start_realtime_ns = 1700000000123456789ull,
                                   .start_monotonic_ns = 5555555555ull, .flags = 0 };
}

static flamme_pw *open_writer(const char *p)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    struct flamme_header h = test_header();
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    return w;
}

static size_t file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (size_t)st.st_size : 0;
}

static uint8_t *slurp(const char *p, size_t *len)
{
    *len = file_size(p);
    uint8_t *b = malloc(*len + 1);
    FILE *f = fopen(p, "rb");
    CHECK(f && fread(b, 1, *len, f) == *len);
    if (f)
        fclose(f);
    return b;
}

static void spit(const char *p, const void *b, size_t len)
{
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(b, 1, len, f) == len);
    if (f)
        fclose(f);
}

/* ------------------------------------------------ hand-made encoder (spec) */

struct buf {
    uint8_t *b;
    size_t len, cap;
};

static void b_bytes(struct buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->b = realloc(b->b, b->cap);
    }
    memcpy(b->b + b->len, p, n);
    b->len += n;
}

static void b_u8(struct buf *b, uint8_t v) { b_bytes(b, &v, 1); }

static void b_u16(struct buf *b, uint16_t v)
{
    uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
    b_bytes(b, x, 2);
}

static void b_u32(struct buf *b, uint32_t v)
{
    uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    b_bytes(b, x, 4);
}

static void b_u64(struct buf *b, uint64_t v)
{
    b_u32(b, (uint32_t)v);
    b_u32(b, (uint32_t)(v >> 32));
}

static void b_str(struct buf *b, const char *s)
{
    b_u32(b, (uint32_t)strlen(s));
    b_bytes(b, s, strlen(s));
}

/* Header as in doc/format.md, with chosen version and header size. */
static void b_header(struct buf *b, uint16_t major, uint16_t minor, uint32_t hsize)
{
    b_bytes(b, "FLAMMEPF", 8);
    b_u16(b, major);
    b_u16(b, minor);
    b_u32(b, hsize);
    b_u32(b, 77);           /* pid */
    b_u32(b, 100);          /* hz */
    b_u64(b, 1);            /* realtime */
    b_u64(b, 2);            /* monotonic */
    b_u32(b, 0);            /* flags */
    while (b->len < hsize)
        b_u8(b, 0);
}

/* Appends a chunk holding raw as payload (valid zlib stream and crc). */
static void b_chunk(struct buf *b, const struct buf *raw)
{
    uLongf zl = compressBound(raw->len);
    uint8_t *z = malloc(zl);
    CHECK(compress2(z, &zl, raw->b, raw->len, 6) == Z_OK);
    b_u32(b, 0x434d4c46u);
    b_u32(b, (uint32_t)raw->len);
    b_u32(b, (uint32_t)zl);
    b_u32(b, (uint32_t)crc32(0, raw->b, (uInt)raw->len));
    b_bytes(b, z, zl);
    free(z);
}

/* Record header; the body follows with b_* calls. */
static void b_rec(struct buf *b, uint8_t type, uint32_t body_len)
{
    b_u8(b, type);
    b_u32(b, body_len);
}

static void b_frame(struct buf *b, uint32_t id, const char *fn)
{
    b_rec(b, FLAMME_REC_FRAME, (uint32_t)(4 + 8 + 8 + 4 + strlen(fn) + 4 + 3));
    b_u32(b, id);
    b_u64(b, 0x1000 + id);
    b_u64(b, 0x10 + id);
    b_str(b, fn);
    b_str(b, "mod");
}

static void b_stack1(struct buf *b, uint32_t id, uint32_t frame)
{
    b_rec(b, FLAMME_REC_STACK, 12);
    b_u32(b, id);
    b_u32(b, 1);
    b_u32(b, frame);
}

static void b_sample(struct buf *b, uint32_t stack, uint32_t tid, uint64_t t, uint32_t extra)
{
    b_rec(b, FLAMME_REC_SAMPLE, 28 + extra);
    b_u32(b, stack);
    b_u32(b, tid);
    b_u32(b, 1);
    b_u32(b, 0);
    b_u32(b, 0);
    b_u64(b, t);
    for (uint32_t i = 0; i < extra; i++) /* since 1.3 the first 4 are the thread serial: 0 */
        b_u8(b, i < 4 ? 0 : 0xee);
}

static void b_varint(struct buf *b, uint64_t v)
{
    while (v >= 0x80) {
        b_u8(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    b_u8(b, (uint8_t)v);
}

/* ------------------------------------------------------------------ tests */

TEST(round_trip_every_record)
{
    snprintf(path, sizeof path, "%s/rt.flamme", dir);
    size_t longn = 100000;
    char *longs = malloc(longn + 1);
    for (size_t i = 0; i < longn; i++)
        longs[i] = (char)('a' + i % 26);
    longs[longn] = 0;
    const char *utf8 = "caml\xc3\xa9t\xc3\xa9_\xe2\x82\xac_\xf0\x9f\x94\xa5";
    flamme_pw *w = open_writer(path);
    CHECK(flamme_pw_info(w, "cmd", "./prog arg;with;semis") == 0);
    CHECK(flamme_pw_info(w, "", "") == 0);
    CHECK(flamme_pw_info(w, "long", longs) == 0);
    CHECK(flamme_pw_info(w, "cmd", "second") == 0);
    CHECK(flamme_pw_thread(w, 100, FLAMME_THREAD_MAIN, 0, 1000, "main") == 0);
    CHECK(flamme_pw_thread(w, 200, FLAMME_THREAD_SYSTHREAD, 1, 2000, "") == 0);
    CHECK(flamme_pw_frame(w, 0, 0xdeadbeef00ull, 0x1234, "Foo.bar;baz", "/bin/prog") == 0);
    CHECK(flamme_pw_frame(w, 1, UINT64_MAX, 0, "", "") == 0);
    CHECK(flamme_pw_frame(w, 2, 0, UINT64_MAX, utf8, longs) == 0);
    uint32_t fr[3] = { 2, 1, 0 };
    CHECK(flamme_pw_stack(w, 0, 3, fr) == 0);
    CHECK(flamme_pw_stack(w, 1, 0, NULL) == 0);
    CHECK(flamme_pw_pending(w) > 0);
    /* The three FRAME records, headers and strings: what the writer leaves
     * out of its budget's charge for compressing the chunk. */
    size_t named = 3 * (5 + 4 + 8 + 8 + 8) + strlen("Foo.bar;baz") + strlen("/bin/prog") +
                   strlen(utf8) + longn;
    CHECK(flamme_pw_pending_named(w) == named);
    CHECK(flamme_pw_frame_line(w, 0, 12, "prog.ml") == 0);
    CHECK(flamme_pw_pending_named(w) == named + 5 + 12 + strlen("prog.ml"));
    CHECK(flamme_pw_pending(w) > flamme_pw_pending_named(w));
    CHECK(flamme_pw_flush(w) == 0);
    CHECK(flamme_pw_pending(w) == 0);
    CHECK(flamme_pw_pending_named(w) == 0);
    CHECK(flamme_pw_sample(w, 0, 100, 3, 0, FLAMME_SAMPLE_TRUNCATED, 5000) == 0);
    CHECK(flamme_pw_sample(w, 1, 300, 1, -1, FLAMME_SAMPLE_BROKEN | FLAMME_SAMPLE_NO_OCAML, 7000) == 0);
    CHECK(flamme_pw_sample(w, 0, 200, UINT32_MAX, INT32_MIN, 0, 6000) == 0);
    CHECK(flamme_pw_lost(w, 100, 5) == 0);
    CHECK(flamme_pw_lost(w, 100, 7) == 0);
    CHECK(flamme_pw_lost(w, 400, 1) == 0);
    CHECK(flamme_pw_thread(w, 100, FLAMME_THREAD_MAIN, 0, 8000, "main-renamed") == 0);
    CHECK(flamme_pw_thread_end(w, 200, 9000) == 0);
    CHECK(flamme_pw_gc(w, 100, 0, FLAMME_GC_MINOR, 5500, 123) == 0);
    CHECK(flamme_pw_gc(w, 200, -1, 77, UINT64_MAX, 0) == 0);
    CHECK(flamme_pw_close(w, 3, 13, 10000, 3) == 0);

    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.hdr.major == FLAMME_VERSION_MAJOR && p.hdr.minor == FLAMME_VERSION_MINOR);
    CHECK(p.hdr.pid == 4242 && p.hdr.hz == 999);
    CHECK(p.hdr.start_realtime_ns == 1700000000123456789ull);
    CHECK(p.hdr.start_monotonic_ns == 5555555555ull);
    CHECK(p.complete == 1 && p.truncated == 0);
    CHECK(p.end_ns == 10000);
    CHECK(p.lost == 13);

    CHECK(p.ninfo == 4);
    CHECK_STR(flamme_profile_info(&p, "cmd"), "second"); /* the last one wins */
    CHECK_STR(flamme_profile_info(&p, ""), "");
    CHECK_STR(flamme_profile_info(&p, "long"), longs);
    CHECK(flamme_profile_info(&p, "nope") == NULL);

    CHECK(p.nframes == 3);
    if (p.nframes == 3) {
        CHECK(p.frames[0].addr == 0xdeadbeef00ull && p.frames[0].offset == 0x1234);
        CHECK_STR(p.frames[0].function, "Foo.bar;baz");
        CHECK_STR(p.frames[0].module, "/bin/prog");
        CHECK(p.frames[1].addr == UINT64_MAX);
        CHECK_STR(p.frames[1].function, "");
        CHECK_STR(p.frames[1].module, "");
        CHECK(p.frames[2].offset == UINT64_MAX);
        CHECK_STR(p.frames[2].function, utf8);
        CHECK_STR(p.frames[2].module, longs);
    }
    CHECK(p.nstacks == 2);
    if (p.nstacks == 2) {
        CHECK(p.stacks[0].n == 3 && p.stacks[0].frames[0] == 2 && p.stacks[0].frames[2] == 0);
        CHECK(p.stacks[1].n == 0);
    }
    CHECK(p.nsamples == 3);
    if (p.nsamples == 3) {
        struct flamme_sample *s = p.samples;
        CHECK(s[0].stack_id == 0 && s[0].tid == 100 && s[0].weight == 3 && s[0].domain == 0);
        CHECK(s[0].flags == FLAMME_SAMPLE_TRUNCATED && s[0].time_ns == 5000);
        CHECK(s[1].stack_id == 1 && s[1].tid == 300 && s[1].domain == -1);
        CHECK(s[1].flags == (FLAMME_SAMPLE_BROKEN | FLAMME_SAMPLE_NO_OCAML));
        CHECK(s[2].weight == UINT32_MAX && s[2].domain == INT32_MIN && s[2].time_ns == 6000);
    }
    CHECK(p.nthreads == 4); /* 100, 200, 300 (samples only), 400 (LOST only) */
    const struct flamme_thread *t = flamme_profile_thread(&p, 100);
    CHECK(t && t->kind == FLAMME_THREAD_MAIN && t->start_ns == 1000 && t->lost == 12);
    if (t)
        CHECK_STR(t->name, "main-renamed");
    t = flamme_profile_thread(&p, 200);
    CHECK(t && t->kind == FLAMME_THREAD_SYSTHREAD && t->domain == 1 && t->end_ns == 9000);
    if (t)
        CHECK_STR(t->name, "");
    t = flamme_profile_thread(&p, 300);
    CHECK(t && t->kind == FLAMME_THREAD_UNKNOWN && t->end_ns == 0 && t->lost == 0);
    if (t)
        CHECK_STR(t->name, "");
    t = flamme_profile_thread(&p, 400);
    CHECK(t && t->lost == 1);
    CHECK(flamme_profile_thread(&p, 101) == NULL);
    CHECK(p.ngc == 2);
    if (p.ngc == 2) {
        CHECK(p.gc[0].tid == 100 && p.gc[0].domain == 0 && p.gc[0].kind == FLAMME_GC_MINOR);
        CHECK(p.gc[0].start_ns == 5500 && p.gc[0].duration_ns == 123);
        CHECK(p.gc[1].domain == -1 && p.gc[1].kind == 77 && p.gc[1].start_ns == UINT64_MAX);
    }
    flamme_profile_free(&p);
    free(longs);
}

/* Walks the chunk headers of a file; returns the number of whole chunks and
 * stores each chunk's end offset in ends[] (up to max). */
static size_t chunk_ends(const uint8_t *b, size_t len, size_t *ends, size_t max)
{
    size_t off = FLAMME_HEADER_SIZE, n = 0;
    while (off + 16 <= len) {
        uint32_t zlen = (uint32_t)b[off + 8] | (uint32_t)b[off + 9] << 8 |
                        (uint32_t)b[off + 10] << 16 | (uint32_t)b[off + 11] << 24;
        if (off + 16 + zlen > len)
            break;
        off += 16 + zlen;
        if (n < max)
            ends[n] = off;
        n++;
    }
    return n;
}

TEST(many_chunks_and_auto_flush)
{
    snprintf(path, sizeof path, "%s/many.flamme", dir);
    flamme_pw *w = open_writer(path);
    uint32_t f = 0;
    CHECK(flamme_pw_frame(w, 0, 1, 1, "f", "m") == 0);
    CHECK(flamme_pw_stack(w, 0, 1, &f) == 0);
    /* 200 explicit chunks of 1000 samples, then 400000 samples with no flush
     * at all: more than one chunk's worth, the writer must split by itself. */
    for (uint32_t i = 0; i < 200000; i++) {
        CHECK(flamme_pw_sample(w, 0, 1 + i % 3, 1, 0, 0, i) == 0);
        if (i % 1000 == 999)
            CHECK(flamme_pw_flush(w) == 0);
    }
    /* ~5 bytes each (a thread change every time): past 4 MiB unflushed */
    for (uint32_t i = 200000; i < 1200000; i++)
        flamme_pw_sample(w, 0, 1 + i % 3, 1, 0, 0, i);
    CHECK(flamme_pw_close(w, 1200000, 0, 0, 3) == 0);
    size_t len;
    uint8_t *b = slurp(path, &len);
    CHECK(chunk_ends(b, len, NULL, 0) >= 202); /* 200 + the writer's own + the last */
    free(b);

    struct flamme_profile p;
    char err[512];
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.nsamples == 1200000 && p.complete && !p.truncated);
    int order_ok = 1;
    for (size_t i = 0; i < p.nsamples; i++)
        order_ok &= p.samples[i].time_ns == i;
    CHECK(order_ok);
    CHECK(p.nthreads == 3);
    flamme_profile_free(&p);
}

TEST(truncated_at_every_offset)
{
    char full[600];
    snprintf(full, sizeof full, "%s/full.flamme", dir);
    snprintf(path, sizeof path, "%s/cut.flamme", dir);
    flamme_pw *w = open_writer(full);
    uint32_t fr[2] = { 0, 1 };
    /* Chunk 1: definitions; chunks 2..4: 3 samples each; last chunk: END. */
    CHECK(flamme_pw_thread(w, 9, FLAMME_THREAD_MAIN, 0, 1, "main") == 0);
    CHECK(flamme_pw_frame(w, 0, 10, 1, "leaf", "m") == 0);
    CHECK(flamme_pw_frame(w, 1, 20, 2, "root", "m") == 0);
    CHECK(flamme_pw_stack(w, 0, 2, fr) == 0);
    CHECK(flamme_pw_flush(w) == 0);
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < 3; i++)
            CHECK(flamme_pw_sample(w, 0, 9, 1, 0, 0, (uint64_t)(100 + c * 10 + i)) == 0);
        CHECK(flamme_pw_flush(w) == 0);
    }
    CHECK(flamme_pw_close(w, 9, 0, 500, 1) == 0);
    size_t len, ends[16];
    uint8_t *b = slurp(full, &len);
    size_t nch = chunk_ends(b, len, ends, 16);
    CHECK(nch == 5 && ends[nch - 1] == len);

    int bad_rc = 0, bad_trunc = 0, bad_samples = 0, bad_complete = 0, bad_msg = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        spit(path, b, cut);
        struct flamme_profile p;
        char err[512] = "";
        int rc = flamme_profile_load(path, &p, err, sizeof err);
        if (cut < FLAMME_HEADER_SIZE) {
            bad_rc += rc != -1;
            bad_msg += strncmp(err, path, strlen(path)) != 0; /* "FILE: ..." */
            if (cut < 8)
                bad_msg += strstr(err, "not a flamme profile") == NULL;
            continue;
        }
        bad_rc += rc != 0;
        if (rc != 0)
            continue;
        size_t whole = 0; /* complete chunks inside the cut */
        int at_boundary = cut == FLAMME_HEADER_SIZE;
        for (size_t k = 0; k < nch; k++) {
            if (ends[k] <= cut)
                whole = k + 1;
            at_boundary |= ends[k] == cut;
        }
        bad_trunc += p.truncated != !at_boundary;
        size_t want = whole >= 2 ? 3 * (whole - 1 < 3 ? whole - 1 : 3) : 0;
        bad_samples += p.nsamples != want;
        bad_samples += p.nframes != (whole >= 1 ? 2u : 0u);
        bad_complete += p.complete != (cut == len);
        flamme_profile_free(&p);
    }
    CHECK(bad_rc == 0);
    CHECK(bad_msg == 0);
    CHECK(bad_trunc == 0);
    CHECK(bad_samples == 0);
    CHECK(bad_complete == 0);
    free(b);
}

TEST(corrupted_chunks_stop_decoding)
{
    char full[600];
    snprintf(full, sizeof full, "%s/full2.flamme", dir);
    snprintf(path, sizeof path, "%s/bad.flamme", dir);
    flamme_pw *w = open_writer(full);
    uint32_t f0 = 0;
    CHECK(flamme_pw_frame(w, 0, 10, 1, "leaf", "m") == 0);
    CHECK(flamme_pw_stack(w, 0, 1, &f0) == 0);
    CHECK(flamme_pw_sample(w, 0, 1, 1, 0, 0, 1) == 0);
    CHECK(flamme_pw_flush(w) == 0);
    CHECK(flamme_pw_sample(w, 0, 1, 1, 0, 0, 2) == 0);
    CHECK(flamme_pw_flush(w) == 0);
    CHECK(flamme_pw_close(w, 2, 0, 3, 1) == 0);
    size_t len, ends[8];
    uint8_t *b = slurp(full, &len);
    CHECK(chunk_ends(b, len, ends, 8) == 3);

    /* Bad crc of chunk 2: chunk 1 survives, nothing after. */
    b[ends[0] + 12] ^= 0x01;
    spit(path, b, len);
    struct flamme_profile p;
    char err[512];
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated == 1 && p.nsamples == 1 && p.complete == 0);
    flamme_profile_free(&p);
    b[ends[0] + 12] ^= 0x01;

    /* A damaged byte inside chunk 2's zlib stream. */
    b[ends[1] - 3] ^= 0x40;
    spit(path, b, len);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated == 1 && p.nsamples == 1);
    flamme_profile_free(&p);
    b[ends[1] - 3] ^= 0x40;

    /* Bad chunk magic. */
    b[ends[0]] = 'X';
    spit(path, b, len);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated == 1 && p.nsamples == 1);
    flamme_profile_free(&p);
    b[ends[0]] = 'F';

    /* Garbage appended after a complete profile. */
    uint8_t *b2 = malloc(len + 5);
    memcpy(b2, b, len);
    memcpy(b2 + len, "junk!", 5);
    spit(path, b2, len + 5);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated == 1 && p.complete == 1 && p.nsamples == 2);
    flamme_profile_free(&p);

    /* Restored: intact again (the test edits above are what broke it). */
    spit(path, b, len);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated == 0 && p.complete == 1 && p.nsamples == 2);
    flamme_profile_free(&p);
    free(b);
    free(b2);
}

TEST(newer_major_rejected)
{
    snprintf(path, sizeof path, "%s/v2.flamme", dir);
    struct buf b = { 0 }, raw = { 0 };
    b_header(&b, FLAMME_VERSION_MAJOR + 1, 3, 64);
    b_frame(&raw, 0, "f");
    b_chunk(&b, &raw);
    spit(path, b.b, b.len);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == -1);
    char want[700];
    snprintf(want, sizeof want, "%s: profile format %d.x is newer than this flamme (%d.x); upgrade flamme",
             path, FLAMME_VERSION_MAJOR + 1, FLAMME_VERSION_MAJOR);
    CHECK_STR(err, want);
    free(b.b);
    free(raw.b);
}

TEST(newer_minor_accepted)
{
    /* A 1.5 file: larger header, an unknown record type, an extra trailing
     * field on SAMPLE. All of it must be skipped, the rest read. */
    snprintf(path, sizeof path, "%s/v15.flamme", dir);
    struct buf b = { 0 }, raw = { 0 };
    b_header(&b, 1, 5, 96);
    b_rec(&raw, 200, 6);
    b_bytes(&raw, "future", 6);
    b_frame(&raw, 0, "f");
    b_rec(&raw, 201, 0);
    b_stack1(&raw, 0, 0);
    b_sample(&raw, 0, 5, 42, 8);
    /* The thread's first THREAD record comes after its sample; its time
     * (not the sample's) is the start, and the extra field is skipped. */
    b_rec(&raw, FLAMME_REC_THREAD, 4 + 1 + 4 + 8 + 4 + 4 + 3);
    b_u32(&raw, 5);
    b_u8(&raw, FLAMME_THREAD_DOMAIN);
    b_u32(&raw, 2);
    b_u64(&raw, 30);
    b_str(&raw, "late");
    b_bytes(&raw, "new", 3);
    b_chunk(&b, &raw);
    spit(path, b.b, b.len);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.hdr.major == 1 && p.hdr.minor == 5 && p.hdr.pid == 77);
    CHECK(p.nframes == 1 && p.nstacks == 1 && p.nsamples == 1 && !p.truncated);
    if (p.nsamples == 1)
        CHECK(p.samples[0].time_ns == 42 && p.samples[0].tid == 5);
    CHECK(p.end_ns == 42 && !p.complete); /* no END: time of the last sample */
    const struct flamme_thread *t = flamme_profile_thread(&p, 5);
    CHECK(p.nthreads == 1 && t && t->start_ns == 30 && t->kind == FLAMME_THREAD_DOMAIN);
    CHECK(t && t->domain == 2);
    if (t)
        CHECK_STR(t->name, "late");
    flamme_profile_free(&p);
    free(b.b);
    free(raw.b);
}

TEST(garbage_rejected)
{
    snprintf(path, sizeof path, "%s/garbage", dir);
    struct flamme_profile p;
    char err[512] = "";
    const char *texts[] = { "", "hello", "main;foo;bar 12\n", "FLAMMEPX and more and more and more and "
                            "more and more bytes to make it longer than a header" };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        spit(path, texts[i], strlen(texts[i]));
        err[0] = 0;
        CHECK(flamme_profile_load(path, &p, err, sizeof err) == -1);
        char want[700];
        snprintf(want, sizeof want, "%s: not a flamme profile", path);
        CHECK_STR(err, want);
    }
    snprintf(path, sizeof path, "%s/does-not-exist", dir);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == -1);
    CHECK(strstr(err, "does-not-exist") != NULL);
    CHECK(flamme_is_profile("FLAMMEPF", 8) == 1);
    CHECK(flamme_is_profile("FLAMMEP", 7) == 0);
}

TEST(hostile_ids_and_lengths)
{
    snprintf(path, sizeof path, "%s/hostile.flamme", dir);
    struct buf b = { 0 }, raw = { 0 };
    b_header(&b, 1, 0, 64);
    b_sample(&raw, 0, 1, 1, 0);   /* stack 0 not defined yet: dropped */
    b_frame(&raw, 5, "gap");      /* frame 5 before 0..4: dropped */
    b_frame(&raw, 0, "f0");
    b_stack1(&raw, 0, 3);         /* frame 3 undefined: dropped */
    b_stack1(&raw, 0, 0);
    b_sample(&raw, 0, 1, 2, 0);   /* fine */
    b_sample(&raw, 7, 1, 3, 0);   /* stack 7 undefined: dropped */
    b_chunk(&b, &raw);
    raw.len = 0;
    /* Second chunk: a STACK claiming 2^30 frames in a 12-byte body. */
    b_rec(&raw, FLAMME_REC_STACK, 12);
    b_u32(&raw, 1);
    b_u32(&raw, 1u << 30);
    b_u32(&raw, 0);
    b_chunk(&b, &raw);
    raw.len = 0;
    b_sample(&raw, 0, 1, 4, 0);   /* never reached: decoding stopped */
    b_chunk(&b, &raw);
    spit(path, b.b, b.len);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.nframes == 1 && p.nstacks == 1 && p.nsamples == 1);
    if (p.nsamples == 1)
        CHECK(p.samples[0].time_ns == 2);
    CHECK(p.truncated == 1);
    flamme_profile_free(&p);

    /* A chunk header claiming a huge payload is refused, not allocated. */
    b.len = 0;
    b_header(&b, 1, 0, 64);
    b_u32(&b, 0x434d4c46u);
    b_u32(&b, 0xffffffffu);
    b_u32(&b, 4);
    b_u32(&b, 0);
    b_u32(&b, 0);
    spit(path, b.b, b.len);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated == 1 && p.nsamples == 0);
    flamme_profile_free(&p);
    free(b.b);
    free(raw.b);
}

/* Source positions: FRAME_LINE attaches (file, line) to a defined frame; all
 * other frames read as ("", 0); one for an undefined frame is ignored, a
 * short body stops decoding, and a FRAME redefinition clears the position. */
TEST(frame_line_round_trip)
{
    snprintf(path, sizeof path, "%s/lines.flamme", dir);
    flamme_pw *w = open_writer(path);
    CHECK(flamme_pw_frame(w, 0, 0x1000, 0x10, "Work.a", "/bin/prog") == 0);
    CHECK(flamme_pw_frame(w, 1, 0x2000, 0x20, "Work.b", "/bin/prog") == 0);
    CHECK(flamme_pw_frame(w, 2, 0x3000, 0x30, "memcpy", "/lib/libc.so.6") == 0);
    CHECK(flamme_pw_frame_line(w, 0, 42, "work.ml") == 0);
    CHECK(flamme_pw_frame_line(w, 1, UINT32_MAX, "stdlib/list.ml") == 0);
    CHECK(flamme_pw_frame_line(w, 1, 7, "stdlib/list.ml") == 0); /* the later one wins */
    CHECK(flamme_pw_close(w, 0, 0, 1, 0) == 0);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.hdr.minor == FLAMME_VERSION_MINOR && p.nframes == 3);
    if (p.nframes == 3) {
        CHECK_STR(p.frames[0].file, "work.ml");
        CHECK(p.frames[0].line == 42);
        CHECK_STR(p.frames[1].file, "stdlib/list.ml");
        CHECK(p.frames[1].line == 7);
        CHECK_STR(p.frames[2].file, "");
        CHECK(p.frames[2].line == 0);
    }
    flamme_profile_free(&p);

    /* Hand-built: a position before its frame, one for a frame id never
     * defined, a redefinition, then a body too short for its fields. */
    struct buf b = { 0 }, raw = { 0 };
    b_header(&b, 1, 2, 64);
    b_rec(&raw, FLAMME_REC_FRAME_LINE, 4 + 4 + 4 + 4);
    b_u32(&raw, 0);
    b_u32(&raw, 3);
    b_str(&raw, "a.ml");          /* frame 0 not defined yet: ignored */
    b_frame(&raw, 0, "f0");
    b_frame(&raw, 1, "f1");
    b_rec(&raw, FLAMME_REC_FRAME_LINE, 4 + 4 + 4 + 4);
    b_u32(&raw, 0);
    b_u32(&raw, 5);
    b_str(&raw, "b.ml");
    b_rec(&raw, FLAMME_REC_FRAME_LINE, 4 + 4 + 4 + 4);
    b_u32(&raw, 1);
    b_u32(&raw, 6);
    b_str(&raw, "c.ml");
    b_frame(&raw, 1, "f1bis");    /* redefinition: position cleared */
    b_chunk(&b, &raw);
    raw.len = 0;
    b_rec(&raw, FLAMME_REC_FRAME_LINE, 4 + 4 + 4 + 100);
    b_u32(&raw, 0);
    b_u32(&raw, 9);
    b_u32(&raw, 100);             /* a string longer than the body */
    b_u32(&raw, 0);
    b_chunk(&b, &raw);
    spit(path, b.b, b.len);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.nframes == 2 && p.truncated == 1);
    if (p.nframes == 2) {
        CHECK_STR(p.frames[0].file, "b.ml");
        CHECK(p.frames[0].line == 5);
        CHECK_STR(p.frames[1].function, "f1bis");
        CHECK_STR(p.frames[1].file, "");
        CHECK(p.frames[1].line == 0);
    }
    flamme_profile_free(&p);
    free(b.b);
    free(raw.b);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    return check_xorshift(&rng);
}

TEST(fuzzed_payloads_never_crash)
{
    /* Valid chunks (good zlib, good crc) around randomly damaged records:
     * this reaches the record decoder, which a damaged file would not. */
    snprintf(path, sizeof path, "%s/fuzz.flamme", dir);
    struct buf raw = { 0 }, b = { 0 };
    b_frame(&raw, 0, "f0");
    b_frame(&raw, 1, "f1");
    b_stack1(&raw, 0, 1);
    b_rec(&raw, FLAMME_REC_THREAD, 4 + 1 + 4 + 8 + 4 + 2);
    b_u32(&raw, 3);
    b_u8(&raw, 1);
    b_u32(&raw, 0);
    b_u64(&raw, 9);
    b_str(&raw, "th");
    b_sample(&raw, 0, 3, 5, 0);
    b_rec(&raw, FLAMME_REC_LOST, 12);
    b_u32(&raw, 3);
    b_u64(&raw, 2);
    b_rec(&raw, FLAMME_REC_INFO, 4 + 1 + 4 + 1);
    b_str(&raw, "k");
    b_str(&raw, "v");
    b_rec(&raw, FLAMME_REC_GC, 25);
    b_u32(&raw, 3);
    b_u32(&raw, 0);
    b_u8(&raw, 1);
    b_u64(&raw, 10);
    b_u64(&raw, 20);
    b_rec(&raw, FLAMME_REC_END, 28);
    for (int i = 0; i < 28; i++)
        b_u8(&raw, 0);
    int bad = 0;
    /* Dropped-id warnings would flood the output: silence stderr. */
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    uint8_t *orig = malloc(raw.len);
    memcpy(orig, raw.b, raw.len);
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(raw.b, orig, raw.len);
        int nflip = 1 + (int)(rnd() % 4);
        for (int k = 0; k < nflip; k++)
            raw.b[rnd() % raw.len] = (uint8_t)(rnd() % 4 == 0 ? 0xff : rnd());
        b.len = 0;
        b_header(&b, 1, 0, 64);
        b_chunk(&b, &raw);
        spit(path, b.b, b.len);
        struct flamme_profile p;
        char err[512];
        int rc = flamme_profile_load(path, &p, err, sizeof err);
        if (rc != 0) {
            bad++;
            continue;
        }
        for (size_t i = 0; i < p.nsamples; i++) /* every kept id is defined */
            bad += p.samples[i].stack_id >= p.nstacks;
        for (size_t i = 0; i < p.nstacks; i++)
            for (uint32_t k = 0; k < p.stacks[i].n; k++)
                bad += p.stacks[i].frames[k] >= p.nframes;
        flamme_profile_free(&p);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(devnull);
    CHECK(bad == 0);
    free(orig);
    free(raw.b);
    free(b.b);
}

TEST(write_error_is_sticky)
{
    signal(SIGPIPE, SIG_IGN);
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    struct flamme_header h = test_header();
    flamme_pw *w = flamme_pw_open(pfd[1], &h);
    CHECK(w != NULL);
    char hdr[FLAMME_HEADER_SIZE];
    CHECK(read(pfd[0], hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    CHECK(flamme_is_profile(hdr, sizeof hdr));
    close(pfd[0]); /* nobody reads any more: the next write fails (EPIPE) */
    CHECK(flamme_pw_info(w, "a", "b") == 0); /* buffered only */
    CHECK(flamme_pw_flush(w) == -1);
    CHECK(flamme_pw_info(w, "a", "b") == -1);
    CHECK(flamme_pw_flush(w) == -1);
    CHECK(flamme_pw_close(w, 0, 0, 0, 0) == -1);
}

/* Reads a pipe slowly, into a file, while the test's main thread writes. */
static void *slow_reader(void *arg)
{
    int *fds = arg;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    char buf[4096];
    for (;;) {
        ssize_t k = read(fds[0], buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (write(fds[1], buf, (size_t)k) != k)
            break;
        usleep(1000); /* the writer blocks on a full pipe, alarms hit it */
    }
    return NULL;
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) { alarms++; }

TEST(short_writes_and_eintr)
{
    /* Big chunks into a slowly drained pipe while SIGALRM (no SA_RESTART)
     * keeps interrupting: write() returns short counts and EINTR. */
    snprintf(path, sizeof path, "%s/pipe.flamme", dir);
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fds[2] = { pfd[0], out };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, slow_reader, fds) == 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { { 0, 500 }, { 0, 500 } };
    setitimer(ITIMER_REAL, &it, NULL);
    struct flamme_header h = test_header();
    flamme_pw *w = flamme_pw_open(pfd[1], &h);
    CHECK(w != NULL);
    uint32_t f = 0;
    char name[64];
    for (uint32_t i = 0; i < 10000; i++) { /* little-compressible names */
        snprintf(name, sizeof name, "fn_%llx", (unsigned long long)rnd());
        CHECK(flamme_pw_frame(w, i, i, i, name, "m") == 0);
    }
    CHECK(flamme_pw_stack(w, 0, 1, &f) == 0);
    for (uint32_t i = 0; i < 5000; i++)
        CHECK(flamme_pw_sample(w, 0, 1, 1, 0, 0, rnd()) == 0);
    CHECK(flamme_pw_close(w, 5000, 0, 1, 1) == 0);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    pthread_join(th, NULL);
    close(pfd[0]);
    close(out);
    CHECK(alarms > 0);
    struct flamme_profile p;
    char err[512];
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.complete && !p.truncated && p.nframes == 10000 && p.nsamples == 5000);
    flamme_profile_free(&p);
}

/* EXIT: how the run ended comes back as written; a profile without one
 * has exit_how 0 and no detail; a body too short for its fields stops
 * decoding (truncated). */
TEST(exit_round_trip)
{
    snprintf(path, sizeof path, "%s/exit.flamme", dir);
    flamme_pw *w = open_writer(path);
    CHECK(flamme_pw_exit(w, FLAMME_EXIT_SIGNAL, 11, 77, "killed by signal 11 (SIGSEGV)") == 0);
    CHECK(flamme_pw_close(w, 0, 0, 78, 0) == 0);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.complete && p.exit_how == FLAMME_EXIT_SIGNAL && p.exit_code == 11);
    CHECK(p.exit_detail && strcmp(p.exit_detail, "killed by signal 11 (SIGSEGV)") == 0);
    flamme_profile_free(&p);

    w = open_writer(path);
    CHECK(flamme_pw_close(w, 0, 0, 1, 0) == 0);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.complete && p.exit_how == 0 && p.exit_detail == NULL);
    flamme_profile_free(&p);

    struct buf b = { 0 }, raw = { 0 };
    b_header(&b, 1, 3, 64);
    b_rec(&raw, FLAMME_REC_EXIT, 3);
    b_u8(&raw, 1);
    b_u8(&raw, 0);
    b_u8(&raw, 0);
    b_chunk(&b, &raw);
    spit(path, b.b, b.len);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated == 1 && p.exit_how == 0);
    flamme_profile_free(&p);
    free(b.b);
    free(raw.b);
}

/* ALLOC and ALLOC_EVENT (1.7): every field comes back as written; events
 * are matched to their block by id wherever they are in the file (before
 * the ALLOC included); an event for an unknown id is kept aside as an
 * orphan (a block of an earlier segment); an ALLOC
 * naming an undefined stack is dropped; a body cut before its last field
 * stops decoding (truncated); the estimates follow doc/format.md. */
TEST(alloc_round_trip)
{
    snprintf(path, sizeof path, "%s/alloc.flamme", dir);
    flamme_pw *w = open_writer(path);
    uint32_t f0 = 0;
    CHECK(flamme_pw_frame(w, 0, 0x1000, 0x10, "camlM.f_1", "/bin/x") == 0);
    CHECK(flamme_pw_stack(w, 0, 1, &f0) == 0);
    CHECK(flamme_pw_alloc_event(w, 7, FLAMME_ALLOC_PROMOTED, 150) == 0); /* before its ALLOC */
    struct flamme_alloc a = { .stack_id = 0, .tid = 42, .serial = 3, .flags = FLAMME_SAMPLE_TRUNCATED,
                              .domain = 1, .time_ns = 100, .id = 7, .n_samples = 2,
                              .size_words = 1023, .heap = FLAMME_ALLOC_MAJOR,
                              .source = FLAMME_ALLOC_MARSHAL, .rate = 1e-4 };
    CHECK(flamme_pw_alloc(w, &a) == 0);
    struct flamme_alloc b = a;
    b.id = UINT64_MAX;
    b.domain = -1;
    b.heap = FLAMME_ALLOC_MINOR;
    b.source = 9;
    b.rate = 0.5;
    b.size_words = 1;
    b.n_samples = 1;
    CHECK(flamme_pw_alloc(w, &b) == 0);
    b.stack_id = 5; /* undefined: dropped */
    CHECK(flamme_pw_alloc(w, &b) == 0);
    CHECK(flamme_pw_alloc_event(w, 7, FLAMME_ALLOC_DIED_MAJOR, 200) == 0);
    CHECK(flamme_pw_alloc_event(w, 8, FLAMME_ALLOC_DIED_MINOR, 300) == 0); /* unknown id */
    CHECK(flamme_pw_close(w, 0, 0, 400, 1) == 0);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.complete && !p.truncated && p.nallocs == 2 && p.nsamples == 0);
    CHECK(p.nalloc_orphans == 1 && p.alloc_orphans[0].id == 8 &&
          p.alloc_orphans[0].event == FLAMME_ALLOC_DIED_MINOR && p.alloc_orphans[0].time_ns == 300);
    if (p.nallocs == 2) {
        const struct flamme_alloc *x = &p.allocs[0], *y = &p.allocs[1];
        CHECK(x->stack_id == 0 && x->tid == 42 && x->serial == 3 && x->domain == 1);
        CHECK(x->flags == FLAMME_SAMPLE_TRUNCATED && x->time_ns == 100 && x->id == 7);
        CHECK(x->n_samples == 2 && x->size_words == 1023 && x->heap == FLAMME_ALLOC_MAJOR);
        CHECK(x->source == FLAMME_ALLOC_MARSHAL && x->rate == 1e-4);
        CHECK(x->promoted_ns == 150 && x->died_ns == 200);
        CHECK(y->id == UINT64_MAX && y->domain == -1 && y->source == 9 && y->rate == 0.5);
        CHECK(y->promoted_ns == 0 && y->died_ns == 0);
        CHECK(p.threads[x->thread].tid == 42 && p.threads[x->thread].serial == 3);
        /* 2 samples at 1e-4 per word: 160000 bytes, 2 / (1e-4 * 1024) blocks */
        CHECK(flamme_alloc_bytes(x) > 159999.9 && flamme_alloc_bytes(x) < 160000.1);
        CHECK(flamme_alloc_blocks(x) > 19.53 && flamme_alloc_blocks(x) < 19.54);
        CHECK(flamme_alloc_bytes(y) == 16.0 && flamme_alloc_blocks(y) == 1.0);
        struct flamme_alloc bad = *y;
        bad.rate = 0;
        CHECK(flamme_alloc_bytes(&bad) == 0 && flamme_alloc_blocks(&bad) == 0);
        bad.rate = 2;
        CHECK(flamme_alloc_bytes(&bad) == 0);
    }
    flamme_profile_free(&p);

    /* An ALLOC one byte short of its rate; an ALLOC_EVENT short of its time. */
    for (int kind = 0; kind < 2; kind++) {
        struct buf bb = { 0 }, raw = { 0 };
        b_header(&bb, 1, 7, 64);
        b_frame(&raw, 0, "f");
        b_stack1(&raw, 0, 0);
        if (kind == 0) {
            b_rec(&raw, FLAMME_REC_ALLOC, 57);
            for (int i = 0; i < 57; i++)
                b_u8(&raw, 0);
        } else {
            b_rec(&raw, FLAMME_REC_ALLOC_EVENT, 16);
            for (int i = 0; i < 16; i++)
                b_u8(&raw, 0);
        }
        b_chunk(&bb, &raw);
        spit(path, bb.b, bb.len);
        CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
        CHECK(p.truncated == 1 && p.nallocs == 0);
        flamme_profile_free(&p);
        free(bb.b);
        free(raw.b);
    }
}

/* A new profile at p for pid, started at start (test_header otherwise). */
static flamme_pw *pid_file(const char *p, uint32_t pid, uint64_t start)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    struct flamme_header h = test_header();
    h.pid = pid;
    h.start_monotonic_ns = start;
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    return w;
}

/* One allocation segment file: pid, start, its ALLOCs (frame names
 * given, one stack each) and ALLOC_EVENTs (id, event, time). */
static void alloc_segment(const char *p, uint32_t pid, uint64_t start, const char *const *fn,
                          const uint64_t *ids, int n, const uint64_t (*ev)[3], int nev)
{
    flamme_pw *w = pid_file(p, pid, start);
    for (int i = 0; i < n; i++) {
        uint32_t f = (uint32_t)i;
        CHECK(flamme_pw_frame(w, f, 0x1000 + 16 * f, 0x10, fn[i], "/bin/x") == 0);
        CHECK(flamme_pw_stack(w, f, 1, &f) == 0);
        struct flamme_alloc a = { .stack_id = f, .tid = 42, .serial = 1, .time_ns = start + 1,
                                  .id = ids[i], .n_samples = 1, .size_words = 1,
                                  .heap = FLAMME_ALLOC_MINOR, .rate = 0.5 };
        CHECK(flamme_pw_alloc(w, &a) == 0);
    }
    for (int k = 0; k < nev; k++)
        CHECK(flamme_pw_alloc_event(w, ev[k][0], (uint8_t)ev[k][1], ev[k][2]) == 0);
    CHECK(flamme_pw_close(w, 0, 0, start + 100, 1) == 0);
}

/* Several files read as one keep their allocations (stacks and threads
 * renumbered), and an ALLOC_EVENT in a later segment of the same pid
 * reaches its block from an earlier one (ids are unique in a process
 * only: another pid's event for the same id does not). */
TEST(merge_allocs_across_segments)
{
    char p1[600], p2[600], p3[600];
    snprintf(p1, sizeof p1, "%s/seg1.flm", dir);
    snprintf(p2, sizeof p2, "%s/seg2.flm", dir);
    snprintf(p3, sizeof p3, "%s/other.flm", dir);
    const char *f1[] = { "camlM.keep_1", "camlM.drop_2" };
    const uint64_t id1[] = { 7, 8 };
    alloc_segment(p1, 10, 1000, f1, id1, 2, NULL, 0);
    const char *f2[] = { "camlM.late_3" };
    const uint64_t id2[] = { 9 };
    const uint64_t ev2[][3] = { { 8, FLAMME_ALLOC_DIED_MINOR, 1500 }, { 9, FLAMME_ALLOC_PROMOTED, 1600 } };
    alloc_segment(p2, 10, 1200, f2, id2, 1, ev2, 2);
    const uint64_t ev3[][3] = { { 7, FLAMME_ALLOC_DIED_MAJOR, 1700 } }; /* pid 11: not pid 10's 7 */
    alloc_segment(p3, 11, 900, NULL, NULL, 0, ev3, 1);
    const char *paths[] = { p2, p3, p1 };
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load_many(paths, 3, &p, NULL, err, sizeof err) == 0);
    CHECK(p.nfiles == 3 && p.nallocs == 3 && p.nalloc_orphans == 1);
    int seen = 0;
    for (size_t i = 0; i < p.nallocs; i++) {
        const struct flamme_alloc *a = &p.allocs[i];
        CHECK(a->stack_id < p.nstacks && p.stacks[a->stack_id].n == 1);
        const char *fn = p.frames[p.stacks[a->stack_id].frames[0]].function;
        CHECK(p.threads[a->thread].tid == 42);
        if (a->id == 7) {
            seen |= 1;
            CHECK(!strcmp(fn, "camlM.keep_1") && a->died_ns == 0);
        }
        if (a->id == 8) {
            seen |= 2;
            CHECK(!strcmp(fn, "camlM.drop_2") && a->died_ns == 1500);
        }
        if (a->id == 9) {
            seen |= 4;
            CHECK(!strcmp(fn, "camlM.late_3") && a->promoted_ns == 1600 && !a->died_ns);
        }
    }
    CHECK(seen == 7);
    flamme_profile_free(&p);
}

/* A file of pid at start with the agent's cost INFO given (NULL: none). */
static void cost_file(const char *p, uint32_t pid, uint64_t start, const char *budget,
                      const char *writer, const char *proc)
{
    flamme_pw *w = pid_file(p, pid, start);
    CHECK(flamme_pw_info(w, "cmd", "x") == 0);
    if (budget)
        CHECK(flamme_pw_info(w, "budget", budget) == 0);
    if (writer)
        CHECK(flamme_pw_info(w, "writer_ns", writer) == 0);
    if (proc)
        CHECK(flamme_pw_info(w, "process_cpu_ns", proc) == 0);
    CHECK(flamme_pw_close(w, 0, 0, start + 100, 0) == 0);
}

/* The agent's costs of several processes read as one (the profiles of a
 * build) add up: each process's from its last file, whose figures count
 * from the start of its run (segments). A cost one process lacks is
 * given as none rather than another process's. */
TEST(merge_sums_the_agent_costs_of_processes)
{
    char a1[600], a2[600], b[600], c[600];
    snprintf(a1, sizeof a1, "%s/cost-a1.flm", dir);
    snprintf(a2, sizeof a2, "%s/cost-a2.flm", dir);
    snprintf(b, sizeof b, "%s/cost-b.flm", dir);
    snprintf(c, sizeof c, "%s/cost-c.flm", dir);
    /* pid 20's two segments: the second's figures include the first's. */
    cost_file(a1, 20, 1000, "2 64 1 3 0 100 5", "1000 0 300 400", "50000");
    cost_file(a2, 20, 2000, "2 64 2 6 1 250 9", "3000 10 300 400", "90000");
    cost_file(b, 21, 1500, "2 64 4 8 0 50", "500 0 200 300", "20000"); /* no <completed> */
    const char *paths[] = { a2, b, a1 };
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load_many(paths, 3, &p, NULL, err, sizeof err) == 0);
    CHECK(p.nfiles == 3 && p.npids == 2);
    const char *v = flamme_profile_info(&p, "budget");
    CHECK(v && !strcmp(v, "2 64 6 14 1 300 9"));
    v = flamme_profile_info(&p, "writer_ns");
    CHECK(v && !strcmp(v, "3500 10 500 700"));
    v = flamme_profile_info(&p, "process_cpu_ns");
    CHECK(v && !strcmp(v, "110000"));
    flamme_profile_free(&p);
    /* An older agent's file (no process_cpu_ns): no total of it. */
    cost_file(c, 22, 1600, "2 64 0 0 0 10", "100 0 0", NULL);
    const char *paths2[] = { a2, b, c };
    CHECK(flamme_profile_load_many(paths2, 3, &p, NULL, err, sizeof err) == 0);
    v = flamme_profile_info(&p, "process_cpu_ns");
    CHECK(v && !strcmp(v, ""));
    v = flamme_profile_info(&p, "writer_ns");
    CHECK(v && !strcmp(v, "3600 10 500 700"));
    flamme_profile_free(&p);
    /* One process's segments: its last file's figures, as written. */
    const char *paths3[] = { a2, a1 };
    CHECK(flamme_profile_load_many(paths3, 2, &p, NULL, err, sizeof err) == 0);
    v = flamme_profile_info(&p, "writer_ns");
    CHECK(v && !strcmp(v, "3000 10 300 400"));
    flamme_profile_free(&p);
}

/* 2.x: a stack that shares its callers with one already written costs only
 * its new frames, a sample of a known stack a few bytes, and every field
 * comes back as written (deltas backwards, extreme values, thread changes). */
TEST(compact_round_trip)
{
    snprintf(path, sizeof path, "%s/compact.flamme", dir);
    flamme_pw *w = open_writer(path);
    enum { DEPTH = 5000 };
    for (uint32_t f = 0; f < 10; f++)
        CHECK(flamme_pw_frame(w, f, 0x1000 + f, f, "fn", "mod") == 0);
    static uint32_t st[DEPTH + 1];
    for (uint32_t i = 0; i < DEPTH + 1; i++) /* leaf first: leaf 0, callers 3..9 */
        st[i] = i == 0 ? 0 : 3 + i % 7;
    CHECK(flamme_pw_stack(w, 0, DEPTH + 1, st) == 0);
    size_t before = flamme_pw_pending(w);
    st[0] = 1; /* same callers, another leaf: one new node */
    CHECK(flamme_pw_stack(w, 1, DEPTH + 1, st) == 0);
    CHECK(flamme_pw_pending(w) - before <= 4);
    before = flamme_pw_pending(w);
    CHECK(flamme_pw_stack(w, 2, DEPTH, st + 1) == 0); /* the callers alone: no node at all */
    CHECK(flamme_pw_pending(w) == before);
    CHECK(flamme_pw_stack(w, 3, 0, NULL) == 0); /* the empty stack: node 0 */
    CHECK(flamme_pw_flush(w) == 0);
    /* 1000 samples of one thread at 999 Hz: a handful of bytes each */
    before = flamme_pw_pending(w);
    uint64_t t = 5555555555ull;
    for (int i = 0; i < 1000; i++)
        CHECK(flamme_pw_sample_serial(w, (uint32_t)(i & 1), 77, 1, 1, 0, 0, t += 1001001) == 0);
    size_t per1000 = flamme_pw_pending(w) - before;
    CHECK(per1000 <= 7000); /* tag, 2-byte node, 3-byte time step */
    printf("  info: 1000 samples, 6001-frame stacks: %zu bytes before zlib\n", per1000);
    CHECK(flamme_pw_flush(w) == 0);
    /* every field, against the previous sample of the run */
    CHECK(flamme_pw_sample_serial(w, 1, 78, 9, 3, 2, FLAMME_SAMPLE_KERNEL, 100) == 0); /* back in time */
    CHECK(flamme_pw_sample_serial(w, 3, UINT32_MAX, UINT32_MAX, UINT32_MAX, INT32_MIN, UINT32_MAX,
                                  UINT64_MAX) == 0);
    CHECK(flamme_pw_sample_serial(w, 0, 0, 0, 0, INT32_MAX, 0, 0) == 0);
    CHECK(flamme_pw_sample_serial(w, 9, 1, 1, 1, 0, 0, 1) == 0); /* never defined: dropped */
    struct flamme_alloc a = { .stack_id = 1, .tid = 78, .serial = 9, .domain = 2, .time_ns = 50,
                              .id = 1, .n_samples = 1, .size_words = 2, .heap = FLAMME_ALLOC_MINOR,
                              .rate = 0.5 };
    CHECK(flamme_pw_alloc(w, &a) == 0);
    CHECK(flamme_pw_close(w, 1004, 0, 0, 4) == 0);

    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.complete && !p.truncated && p.hdr.major == 2);
    CHECK(p.nsamples == 1003 && p.nallocs == 1);
    CHECK(p.nstacks == 3); /* the stacks samples name; the callers alone are a prefix */
    if (p.nsamples == 1003 && p.nstacks == 3) {
        uint64_t tt = 5555555555ull;
        int ok = 1;
        for (int i = 0; i < 1000; i++) {
            const struct flamme_sample *x = &p.samples[i];
            const struct flamme_stack *k = &p.stacks[x->stack_id];
            ok &= x->tid == 77 && x->serial == 1 && x->weight == 1 && x->domain == 0 && x->flags == 0;
            ok &= x->time_ns == (tt += 1001001) && k->n == DEPTH + 1 && k->frames[0] == (uint32_t)(i & 1);
            for (uint32_t j = 1; j <= DEPTH; j++)
                ok &= k->frames[j] == 3 + j % 7;
        }
        CHECK(ok);
        const struct flamme_sample *x = &p.samples[1000];
        CHECK(x->tid == 78 && x->serial == 9 && x->weight == 3 && x->domain == 2);
        CHECK(x->flags == FLAMME_SAMPLE_KERNEL && x->time_ns == 100);
        CHECK(p.stacks[x->stack_id].frames[0] == 1);
        x = &p.samples[1001];
        CHECK(x->tid == UINT32_MAX && x->serial == UINT32_MAX && x->weight == UINT32_MAX);
        CHECK(x->domain == INT32_MIN && x->flags == UINT32_MAX && x->time_ns == UINT64_MAX);
        CHECK(p.stacks[x->stack_id].n == 0);
        x = &p.samples[1002];
        CHECK(x->tid == 0 && x->serial == 0 && x->weight == 0 && x->domain == INT32_MAX);
        CHECK(x->flags == 0 && x->time_ns == 0 && p.stacks[x->stack_id].frames[0] == 0);
        CHECK(p.allocs[0].stack_id == p.samples[1000].stack_id && p.allocs[0].time_ns == 50);
    }
    flamme_profile_free(&p);
}

/* Stacks that share root-most frames with the one written before them
 * (deeper, shallower, a prefix of it, the same, two recursions taking
 * turns) come back frame for frame: the writer reuses the shared part of
 * the last stack's path and must never reuse more of it. */
TEST(shared_prefix_round_trip)
{
    snprintf(path, sizeof path, "%s/prefix.flamme", dir);
    flamme_pw *w = open_writer(path);
    enum { NST = 400, MAXD = 700, NFR = 6 };
    for (uint32_t f = 0; f < NFR; f++)
        CHECK(flamme_pw_frame(w, f, 0x1000 + f, f, "fn", "mod") == 0);
    static uint32_t st[NST][MAXD];
    static uint32_t len[NST];
    uint64_t x = 12345;
    for (uint32_t k = 0; k < NST; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t d = (uint32_t)(x >> 33) % MAXD;
        /* Root first in the walk's order (leaf first) below: two families
         * of stacks (k even, k odd) whose root-most frames agree within a
         * family up to a random depth, then differ. */
        uint32_t keep = k >= 2 ? (uint32_t)(x >> 13) % (len[k - 2] + 1) : 0;
        for (uint32_t i = 0; i < d; i++) {
            uint32_t root_i = d - 1 - i; /* distance from the root */
            st[k][i] = root_i < keep && root_i < len[k - 2]
                           ? st[k - 2][len[k - 2] - 1 - root_i]
                           : (uint32_t)((x >> (i % 40)) + i) % NFR;
        }
        len[k] = d;
        CHECK(flamme_pw_stack(w, k, d, st[k]) == 0);
        CHECK(flamme_pw_sample(w, k, 1, 1, 0, 0, 1000 + k) == 0);
    }
    CHECK(flamme_pw_close(w, NST, 0, 0, 1) == 0);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.nsamples == NST);
    int bad = 0;
    for (uint32_t i = 0; i < p.nsamples && i < NST; i++) {
        const struct flamme_stack *k = &p.stacks[p.samples[i].stack_id];
        bad += k->n != len[i] || (len[i] && memcmp(k->frames, st[i], len[i] * sizeof st[i][0]) != 0);
    }
    CHECK(bad == 0);
    flamme_profile_free(&p);
}

/* 2.x records that break the rules: gaps, bad parents, undefined frames and
 * nodes are ignored (and counted); a reserved tag bit or an overlong varint
 * stops decoding there; 1.x STACK and SAMPLE in a 2.x file are skipped. */
TEST(compact_hostile_records)
{
    snprintf(path, sizeof path, "%s/compact-bad.flamme", dir);
    struct buf b = { 0 }, raw = { 0 }, body = { 0 };
    b_header(&b, 2, 0, 64);
    b_frame(&raw, 0, "root");
    b_frame(&raw, 1, "leaf");
    /* nodes 1 = [root], 2 = [leaf; root] */
    b_varint(&body, 1), b_varint(&body, 2);
    b_varint(&body, 1), b_varint(&body, 0);
    b_varint(&body, 1), b_varint(&body, 1);
    b_rec(&raw, FLAMME_REC_STACK_NODES, (uint32_t)body.len), b_bytes(&raw, body.b, body.len);
    body.len = 0; /* a gap: ignored */
    b_varint(&body, 7), b_varint(&body, 1), b_varint(&body, 1), b_varint(&body, 0);
    b_rec(&raw, FLAMME_REC_STACK_NODES, (uint32_t)body.len), b_bytes(&raw, body.b, body.len);
    body.len = 0; /* node 3 = [leaf; leaf; root], then up 0: ignored from there */
    b_varint(&body, 3), b_varint(&body, 3);
    b_varint(&body, 1), b_varint(&body, 1);
    b_varint(&body, 0), b_varint(&body, 0);
    b_varint(&body, 1), b_varint(&body, 0);
    b_rec(&raw, FLAMME_REC_STACK_NODES, (uint32_t)body.len), b_bytes(&raw, body.b, body.len);
    body.len = 0; /* node 4 naming frame 5 (undefined): ignored */
    b_varint(&body, 4), b_varint(&body, 1), b_varint(&body, 1), b_varint(&body, 5);
    b_rec(&raw, FLAMME_REC_STACK_NODES, (uint32_t)body.len), b_bytes(&raw, body.b, body.len);
    b_stack1(&raw, 0, 0);          /* 1.x records: skipped in 2.x */
    b_sample(&raw, 0, 5, 10, 4);
    body.len = 0; /* samples of nodes 3, 4 (undefined), 2 */
    b_u8(&body, 0x1), b_varint(&body, 5), b_varint(&body, 1), b_varint(&body, 3), b_varint(&body, 20);
    b_u8(&body, 0), b_varint(&body, 4), b_varint(&body, 2);
    b_u8(&body, 0), b_varint(&body, 2), b_varint(&body, 1); /* dt -1 */
    b_rec(&raw, FLAMME_REC_SAMPLES, (uint32_t)body.len), b_bytes(&raw, body.b, body.len);
    b_chunk(&b, &raw);
    raw.len = body.len = 0; /* second chunk: one good sample, then a reserved tag bit */
    b_u8(&body, 0), b_varint(&body, 1), b_varint(&body, 0);
    b_u8(&body, 0x10), b_varint(&body, 1), b_varint(&body, 0);
    b_rec(&raw, FLAMME_REC_SAMPLES, (uint32_t)body.len), b_bytes(&raw, body.b, body.len);
    b_chunk(&b, &raw);
    spit(path, b.b, b.len);
    struct flamme_profile p;
    char err[512] = "";
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated && p.nsamples == 3 && p.nstacks == 3);
    if (p.nsamples == 3 && p.nstacks == 3) {
        const struct flamme_stack *k = &p.stacks[p.samples[0].stack_id];
        CHECK(k->n == 3 && k->frames[0] == 1 && k->frames[1] == 1 && k->frames[2] == 0);
        CHECK(p.samples[0].tid == 5 && p.samples[0].serial == 1 && p.samples[0].time_ns == 2 + 10);
        k = &p.stacks[p.samples[1].stack_id];
        CHECK(k->n == 2 && k->frames[0] == 1 && k->frames[1] == 0 && p.samples[1].time_ns == 12);
        CHECK(p.samples[1].tid == 5 && p.stacks[p.samples[2].stack_id].n == 1);
        CHECK(p.samples[2].tid == 0 && p.samples[2].time_ns == 2);
    }
    flamme_profile_free(&p);
    /* an 11-byte varint: the record is malformed */
    b.len = raw.len = body.len = 0;
    b_header(&b, 2, 0, 64);
    b_u8(&body, 0);
    for (int i = 0; i < 10; i++)
        b_u8(&body, 0x80);
    b_u8(&body, 0), b_varint(&body, 0);
    b_rec(&raw, FLAMME_REC_SAMPLES, (uint32_t)body.len), b_bytes(&raw, body.b, body.len);
    b_chunk(&b, &raw);
    spit(path, b.b, b.len);
    CHECK(flamme_profile_load(path, &p, err, sizeof err) == 0);
    CHECK(p.truncated && p.nsamples == 0);
    flamme_profile_free(&p);
    free(b.b);
    free(raw.b);
    free(body.b);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/flamme-test-profile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(round_trip_every_record);
    RUN(merge_allocs_across_segments);
    RUN(merge_sums_the_agent_costs_of_processes);
    RUN(many_chunks_and_auto_flush);
    RUN(truncated_at_every_offset);
    RUN(corrupted_chunks_stop_decoding);
    RUN(newer_major_rejected);
    RUN(newer_minor_accepted);
    RUN(garbage_rejected);
    RUN(hostile_ids_and_lengths);
    RUN(frame_line_round_trip);
    RUN(exit_round_trip);
    RUN(alloc_round_trip);
    RUN(compact_round_trip);
    RUN(shared_prefix_round_trip);
    RUN(compact_hostile_records);
    RUN(fuzzed_payloads_never_crash);
    RUN(write_error_is_sticky);
    RUN(short_writes_and_eintr);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE();
}
