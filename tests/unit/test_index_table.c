/*
 * tests/unit/test_index_table.c — common/index_table.h, the table under the
 * tools' and the line tables' interning: every key added is found at its
 * index through all the growths, absent keys end on an empty slot, and a
 * hash that sends every key to one slot still gives the right answers.
 */
#include "tests/unit/check.h"
#include "common/hash.h"
#include "common/index_table.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NKEYS 20000

struct keys {
    char s[NKEYS][16];
    uint32_t n;
    int same_hash; /* every key hashes alike */
};

static uint64_t hash_of(const struct keys *k, const char *s)
{
    return k->same_hash ? 42 : flamme_hash_bytes(s, strlen(s), 0);
}

static uint64_t key_hash(const void *ctx, uint32_t i)
{
    const struct keys *k = ctx;
    return hash_of(k, k->s[i]);
}

static int key_eq(const void *ctx, uint32_t i, const void *s, size_t len)
{
    const struct keys *k = ctx;
    return strlen(k->s[i]) == len && memcmp(k->s[i], s, len) == 0;
}

/* Index of s, added if new; UINT32_MAX when out of memory. */
static uint32_t intern(struct flamme_itab *t, struct keys *k, const char *s)
{
    if (flamme_itab_reserve(t, k->n, 16, key_hash, k) < 0)
        return UINT32_MAX;
    uint32_t *slot = flamme_itab_probe(t, hash_of(k, s), key_eq, k, s, strlen(s));
    if (*slot)
        return *slot - 1;
    snprintf(k->s[k->n], sizeof k->s[0], "%s", s);
    *slot = k->n + 1;
    return k->n++;
}

static void run(int same_hash, uint32_t n)
{
    static struct keys k;
    memset(&k, 0, sizeof k);
    k.same_hash = same_hash;
    struct flamme_itab t = { 0 };
    CHECK(flamme_itab_probe(&t, 1, key_eq, &k, "x", 1) == NULL); /* no slots yet */
    char buf[16];
    int wrong = 0;
    for (uint32_t i = 0; i < n; i++) {
        snprintf(buf, sizeof buf, "key%u", i);
        wrong += intern(&t, &k, buf) != i;
        wrong += intern(&t, &k, buf) != i; /* again: found, not added */
    }
    CHECK(wrong == 0 && k.n == n);
    CHECK(t.cap >= 2 * (size_t)n && (t.cap & (t.cap - 1)) == 0);
    for (uint32_t i = 0; i < n; i++) {
        snprintf(buf, sizeof buf, "key%u", i);
        const uint32_t *slot =
            flamme_itab_probe(&t, hash_of(&k, buf), key_eq, &k, buf, strlen(buf));
        wrong += !slot || *slot != i + 1;
        snprintf(buf, sizeof buf, "absent%u", i);
        slot = flamme_itab_probe(&t, hash_of(&k, buf), key_eq, &k, buf, strlen(buf));
        wrong += !slot || *slot != 0;
    }
    CHECK(wrong == 0);
    flamme_itab_free(&t);
    CHECK(t.slot == NULL && t.cap == 0);
}

TEST(many_keys)
{
    run(0, NKEYS);
}

TEST(all_keys_collide)
{
    run(1, 1000);
}

int main(void)
{
    RUN(many_keys);
    RUN(all_keys_collide);
    return CHECK_DONE();
}
