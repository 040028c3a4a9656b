/*
 * tests/unit/test_frametable.c — OCaml frame-table parsing
 * (runtime_hooks/frametable.c): the call sites read from an image for the
 * unwind rows (flamme_frametable_image_sites, flamme_frametable_is_table_
 * symbol), on hand-made tables of every descriptor shape, cut short and
 * with absurd counts (an image is untrusted input); and the in-memory index
 * the Memprof stubs use, which reads the same descriptors.
 * The module is compiled into this test (it is part of libflamme.so only).
 */
#include "check.h"

#include "runtime_hooks/frametable.c"

/* Little-endian table builder. */
struct tb {
    uint8_t b[512];
    size_t n;
};

static void put(struct tb *t, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        t->b[t->n++] = (uint8_t)(v >> (8 * i));
}

static void pad(struct tb *t, size_t a)
{
    while (t->n % a)
        t->b[t->n++] = 0xee;
}

#define BASE 0x10000u /* the table's link-time address */

/* Four descriptors: plain with one live slot; return to C; six allocations
 * with debug info (their lengths and offsets each change where the next
 * descriptor is); debug info alone with two live slots. */
static void make_table(struct tb *t, int64_t count)
{
    t->n = 0;
    put(t, (uint64_t)count, 8);
    put(t, 0x1000, 8), put(t, 24, 2), put(t, 1, 2), put(t, 8, 2), pad(t, 8);
    put(t, 0x2000, 8), put(t, 0xFFFF, 2), put(t, 0, 2), pad(t, 8);
    put(t, 0x3000, 8), put(t, 40 | 3, 2), put(t, 1, 2), put(t, 16, 2), put(t, 6, 1);
    for (int i = 0; i < 6; i++)
        put(t, 2 + i, 1);
    pad(t, 4);
    for (int i = 0; i < 6; i++)
        put(t, 0, 4);
    pad(t, 8);
    put(t, 0x4000, 8), put(t, 16 | 1, 2), put(t, 2, 2), put(t, 0, 2), put(t, 8, 2);
    pad(t, 4), put(t, 0, 4), pad(t, 8);
}

struct img {
    const struct tb *t;
    size_t limit; /* bytes readable from BASE */
    int reads;
};

static int img_read(void *p, uint64_t addr, void *dst, size_t len)
{
    struct img *m = p;
    m->reads++;
    if (addr < BASE || addr - BASE > m->limit || len > m->limit - (addr - BASE))
        return -1;
    memcpy(dst, m->t->b + (addr - BASE), len);
    return 0;
}

struct got {
    uint64_t ret[16];
    uint32_t size[16];
    int n, stop_at;
};

static int got_site(void *p, uint64_t ret, uint32_t size)
{
    struct got *g = p;
    if (g->n == g->stop_at)
        return -1;
    if (g->n < 16) {
        g->ret[g->n] = ret;
        g->size[g->n] = size;
    }
    g->n++;
    return 0;
}

TEST(every_descriptor_shape)
{
    struct tb t;
    make_table(&t, 4);
    struct img m = { &t, t.n, 0 };
    struct got g = { .stop_at = -1 };
    CHECK(flamme_frametable_image_sites(BASE, img_read, &m, got_site, &g) == 3);
    CHECK(g.n == 3);
    /* the return to C has no frame: skipped; the flags are not size */
    CHECK(g.ret[0] == 0x1000 && g.size[0] == 24);
    CHECK(g.ret[1] == 0x3000 && g.size[1] == 40);
    CHECK(g.ret[2] == 0x4000 && g.size[2] == 16);
}

TEST(cut_short_and_absurd_counts)
{
    struct tb t;
    make_table(&t, 4);
    size_t whole = t.n;
    /* Every cut: the sites before it, never a read outside. */
    for (size_t lim = 0; lim <= whole; lim++) {
        struct img m = { &t, lim, 0 };
        struct got g = { .stop_at = -1 };
        long n = flamme_frametable_image_sites(BASE, img_read, &m, got_site, &g);
        CHECK(n >= 0 && n <= 3 && n == g.n);
        if (lim == whole)
            CHECK(n == 3);
    }
    /* A count far beyond the image ends at its first unreadable descriptor. */
    make_table(&t, INT64_MAX);
    struct img m = { &t, t.n, 0 };
    struct got g = { .stop_at = -1 };
    CHECK(flamme_frametable_image_sites(BASE, img_read, &m, got_site, &g) == 3);
    CHECK(m.reads < 16);
    make_table(&t, -5);
    m.reads = 0;
    CHECK(flamme_frametable_image_sites(BASE, img_read, &m, got_site, &g) == 0);
}

TEST(a_stop_is_reported)
{
    struct tb t;
    make_table(&t, 4);
    struct img m = { &t, t.n, 0 };
    struct got g = { .stop_at = 1 };
    CHECK(flamme_frametable_image_sites(BASE, img_read, &m, got_site, &g) == -1);
}

TEST(table_symbol_names)
{
    CHECK(flamme_frametable_is_table_symbol("camlStdlib__List.frametable"));
    CHECK(flamme_frametable_is_table_symbol("caml_system.frametable"));
    CHECK(flamme_frametable_is_table_symbol("caml_startup.frametable"));
    CHECK(flamme_frametable_is_table_symbol("camlFoo__frametable"));
    CHECK(!flamme_frametable_is_table_symbol("caml_frametable")); /* the list of tables */
    CHECK(!flamme_frametable_is_table_symbol("camlFoo.frametable_x"));
    CHECK(!flamme_frametable_is_table_symbol("Foo.frametable"));
    CHECK(!flamme_frametable_is_table_symbol("caml.frametable"));
    CHECK(!flamme_frametable_is_table_symbol(""));
}

TEST(memory_index_reads_the_same_descriptors)
{
    static struct tb t; /* aligned like a table: 8 */
    static uint64_t words[64];
    make_table(&t, 4);
    memcpy(words, t.b, t.n);
    void *tables[] = { words, NULL };
    CHECK(flamme_frametable_index(tables) == 0);
    CHECK(flamme_frametable_is_ocaml_ret(0x1000));
    CHECK(flamme_frametable_is_ocaml_ret(0x2000));
    CHECK(flamme_frametable_is_ocaml_ret(0x3000));
    CHECK(flamme_frametable_is_ocaml_ret(0x4000));
    CHECK(!flamme_frametable_is_ocaml_ret(0x5000));
    CHECK(!flamme_frametable_is_ocaml_ret(0x3001));
}

int main(void)
{
    RUN(every_descriptor_shape);
    RUN(cut_short_and_absurd_counts);
    RUN(a_stop_is_reported);
    RUN(table_symbol_names);
    RUN(memory_index_reads_the_same_descriptors);
    return CHECK_DONE();
}
