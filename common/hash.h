/*
 * common/hash.h — the hashes of the tools' tables. Pure, any thread.
 *
 * flamme_hash_bytes: FNV-1a (64-bit), deterministic: for what must come out
 * the same in every run (a name's colour in the flame graph) and for tables
 * over the program's own data (writer/lines.c).
 * flamme_table_hash: SipHash-2-4 under a key drawn at random once per
 * process (per translation unit), for every table keyed by what a profile or
 * a folded file says: names crafted to collide cannot be, as the key is not
 * known in advance, so interning stays linear.
 */
#ifndef FLAMME_COMMON_HASH_H
#define FLAMME_COMMON_HASH_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* FNV-1a over s[0..n), starting from the offset basis xor seed. */
static inline uint64_t flamme_hash_bytes(const void *s, size_t n, uint64_t seed)
{
    const unsigned char *p = s;
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The random key (getrandom; the clock and pid if that fails). */
static inline const uint64_t *flamme_hash_key(void)
{
    static uint64_t k[2];
    static int set;
    if (!set) {
        if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            k[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
            k[1] = (uint64_t)getpid() * 0xc2b2ae3d27d4eb4full ^ (uint64_t)(uintptr_t)k;
        }
        set = 1;
    }
    return k;
}

static inline uint64_t flamme_rotl64(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define FLAMME_SIPROUND(v0, v1, v2, v3)                                                        \
    do {                                                                                       \
        v0 += v1; v1 = flamme_rotl64(v1, 13); v1 ^= v0; v0 = flamme_rotl64(v0, 32);           \
        v2 += v3; v3 = flamme_rotl64(v3, 16); v3 ^= v2;                                        \
        v0 += v3; v3 = flamme_rotl64(v3, 21); v3 ^= v0;                                        \
        v2 += v1; v1 = flamme_rotl64(v1, 17); v1 ^= v2; v2 = flamme_rotl64(v2, 32);           \
    } while (0)

/* SipHash-2-4 of s[0..n) under key k[2]. */
static inline uint64_t flamme_siphash(const uint64_t k[2], const void *s, size_t n)
{
    const unsigned char *p = s;
    uint64_t v0 = k[0] ^ 0x736f6d6570736575ull, v1 = k[1] ^ 0x646f72616e646f6dull;
    uint64_t v2 = k[0] ^ 0x6c7967656e657261ull, v3 = k[1] ^ 0x7465646279746573ull;
    size_t left = n;
    for (; left >= 8; p += 8, left -= 8) {
        uint64_t m = 0;
        for (int i = 7; i >= 0; i--) /* little-endian, whatever the host */
            m = m << 8 | p[i];
        v3 ^= m;
        FLAMME_SIPROUND(v0, v1, v2, v3);
        FLAMME_SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t i = 0; i < left; i++)
        b |= (uint64_t)p[i] << (8 * i);
    v3 ^= b;
    FLAMME_SIPROUND(v0, v1, v2, v3);
    FLAMME_SIPROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        FLAMME_SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* Finalizer of splitmix64: spreads every input bit over the whole word, so
 * neighbouring integers do not land in neighbouring slots. For tables over
 * ids the process made itself (the writer's interning), not over input. */
static inline uint64_t flamme_hash_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* The tables' hash: keyed, so crafted collisions cannot be prepared. */
static inline uint64_t flamme_table_hash(const void *s, size_t n)
{
    return flamme_siphash(flamme_hash_key(), s, n);
}

/* Same for an integer key (ids, tids). */
static inline uint64_t flamme_table_hash_u64(uint64_t x)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(x >> (8 * i));
    return flamme_table_hash(b, sizeof b);
}

#endif
