/*
 * common/hash.h — the byte-string hash the tools' tables share (FNV-1a,
 * 64-bit). Pure, any thread; not for hostile inputs' worst cases, which the
 * callers' open-addressing tables tolerate by growing.
 */
#ifndef FLAMME_COMMON_HASH_H
#define FLAMME_COMMON_HASH_H
#include <stddef.h>
#include <stdint.h>

/* FNV-1a over s[0..n), starting from the offset basis xor seed. */
static inline uint64_t flamme_hash_bytes(const void *s, size_t n, uint64_t seed)
{
    const unsigned char *p = s;
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

#endif
