/*
 * writer/intern.c — a sample's frames to its prefix-tree node, from the
 * thread's last stack (see writer/intern.h). Writer thread only.
 */
#include "writer/intern.h"

#include <stdlib.h>
#include <string.h>

/* Bits beside the FR_* facts (which use the low six). */
#define SEEN_ANY 0x80u /* in seen[]: some frame at or above was not skipped */
#define KEPT 0x40u     /* in the facts scratch: the frame has a node of its own */
_Static_assert(((FR_HIDDEN | FR_ROOT | FR_MAIN | FR_VDSO_NAMED | FR_VDSO_ANON | FR_AGENT) &
                (SEEN_ANY | KEPT)) == 0,
               "a frame fact collides with intern.c's own bits");

/* Grows p (elem bytes each) to cap entries; 0 / -1 (p unchanged). */
static int grow(void **p, uint32_t cap, size_t elem)
{
    void *q = realloc(*p, (size_t)cap * elem);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

static uint32_t cap_for(uint32_t n)
{
    uint32_t c = 256;
    while (c < n)
        c *= 2;
    return c;
}

/* Makes room for n frames in the scratch and in t; 0 / -1. */
static int reserve(struct flamme_intern *in, struct flamme_intern_thread *t, uint32_t n)
{
    if (n > in->cap) {
        uint32_t c = cap_for(n);
        if (grow((void **)&in->ids, c, sizeof *in->ids) || grow((void **)&in->kept, c, sizeof *in->kept) ||
            grow((void **)&in->knode, c, sizeof *in->knode) || grow((void **)&in->facts, c, 1))
            return -1;
        in->cap = c;
    }
    if (n > t->cap) {
        uint32_t c = cap_for(n);
        if (grow((void **)&t->addr, c, sizeof *t->addr) || grow((void **)&t->node, c, sizeof *t->node) ||
            grow((void **)&t->seen, c, 1))
            return -1;
        t->cap = c;
    }
    return 0;
}

/* Root-first position r of a leaf-first stack of n frames: its address as
 * frames are named (a return address points after its call: less one keeps
 * a call at the very end of a function, noreturn, in that function). */
static inline uint64_t addr_at(const uint64_t *frames, uint32_t n, uint32_t r)
{
    return r == n - 1 ? frames[0] : frames[n - 1 - r] - 1;
}

uint32_t flamme_intern_shared(const struct flamme_intern_thread *t, const uint64_t *frames,
                              uint32_t n)
{
    uint32_t same = 0, lim = n < t->n ? n : t->n;
    while (same < lim && t->addr[same] == addr_at(frames, n, same))
        same++;
    return same;
}

uint32_t flamme_intern_stack(struct flamme_intern *in, struct flamme_intern_thread *t,
                             const uint64_t *frames, uint32_t n, uint32_t same, int *root)
{
    in->named = 0;
    if (reserve(in, t, n) != 0) {
        t->n = 0;
        return UINT32_MAX;
    }
    if (same == n && n == t->n) {
        *root = t->root;
        return n ? t->node[n - 1] : 0;
    }
    /* The frames below the shared part are named leaf first: a frame's name
     * may depend on its callee's (glibc's unnamed thread roots). */
    uint32_t m = n - same;
    uint8_t callee = 0;
    in->named = m;
    for (uint32_t i = 0; i < m; i++) {
        uint32_t id = in->frame(in->ctx, i ? frames[i] - 1 : frames[i], callee, &callee);
        if (id == UINT32_MAX) {
            t->n = 0;
            return UINT32_MAX;
        }
        in->ids[i] = id;
        in->facts[i] = callee;
    }
    /* Then shaped root first: a skipped frame has no node, an unnamed vDSO
     * frame none when its nearest caller not skipped is a named one. */
    uint8_t seen = same ? t->seen[same - 1] : 0;
    int whole = (seen & SEEN_ANY) ? t->root : 0;
    uint32_t k = 0;
    for (uint32_t r = same; r < n; r++) {
        uint32_t i = n - 1 - r;
        uint8_t f = in->facts[i];
        if (!(f & FR_SKIP)) {
            if (!(seen & SEEN_ANY))
                whole = (f & FR_ROOT) != 0; /* the root-most frame kept */
            if (!((f & FR_VDSO_ANON) && (seen & FR_VDSO_NAMED))) {
                in->kept[k++] = in->ids[i];
                in->facts[i] |= KEPT;
            }
            seen = (uint8_t)(f | SEEN_ANY);
        }
        t->addr[r] = addr_at(frames, n, r);
        t->seen[r] = seen;
    }
    uint32_t node = same ? t->node[same - 1] : 0;
    t->n = same; /* until the rest has its nodes */
    if (flamme_pw_nodes(in->pw, node, k, in->kept, in->knode) != 0)
        return UINT32_MAX;
    for (uint32_t r = same, j = 0; r < n; r++) {
        if (in->facts[n - 1 - r] & KEPT)
            node = in->knode[j++];
        t->node[r] = node;
    }
    t->n = n;
    t->root = (uint8_t)whole;
    *root = whole;
    return node;
}

void flamme_intern_thread_reset(struct flamme_intern_thread *t)
{
    t->n = 0;
}

void flamme_intern_thread_free(struct flamme_intern_thread *t)
{
    free(t->addr);
    free(t->node);
    free(t->seen);
    memset(t, 0, sizeof *t);
}

void flamme_intern_free(struct flamme_intern *in)
{
    free(in->ids);
    free(in->kept);
    free(in->knode);
    free(in->facts);
    in->ids = in->kept = in->knode = NULL;
    in->facts = NULL;
    in->cap = 0;
}
