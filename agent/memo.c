/*
 * agent/memo.c — a thread's stack memo (see agent/memo.h). Runs in the
 * owning thread's SIGPROF handler only: no malloc, no locks, no stdio; the
 * memory was mapped before the thread was armed.
 */
#include "agent/memo.h"

void flamme_memo_init(struct flamme_memo *m, void *mem)
{
    uint64_t *w = mem;
    m->frame = w;
    m->slot = (uintptr_t *)(w + FLAMME_MEMO_FRAMES);
    m->trace = (uintptr_t *)(w + 2 * FLAMME_MEMO_FRAMES);
    m->len = 0;
}

void flamme_memo_walk_start(const struct flamme_memo *m, struct flamme_memo_cursor *c)
{
    for (int r = 0; r < FLAMME_MEMO_RANGES; r++)
        c->next[r] = m->len;
}

/* Index of the range holding the word at a, or -1. */
static int range_of(const struct flamme_range *ranges, int nr, uintptr_t a)
{
    for (int r = 0; r < nr; r++)
        if (a >= ranges[r].lo && a + 8 <= ranges[r].hi && a + 8 > a)
            return r;
    return -1;
}

int32_t flamme_memo_join_sigsafe(struct flamme_memo *m, struct flamme_memo_cursor *c,
                                 uintptr_t at, uint64_t ra, const struct flamme_range *ranges,
                                 int nr)
{
    if (!m->len || !at)
        return -1;
    int r = range_of(ranges, nr < FLAMME_MEMO_RANGES ? nr : FLAMME_MEMO_RANGES, at);
    if (r < 0)
        return -1;
    /* The memo's frames in this stack, leaf first, until one at or above
     * `at`; the others' frames (another stack) are passed over. */
    uintptr_t lo = ranges[r].lo, hi = ranges[r].hi;
    uint32_t i = c->next[r] < m->len ? c->next[r] : m->len;
    while (i > 0) {
        uintptr_t s = m->slot[i - 1];
        if (s >= lo && s < hi && s >= at)
            break;
        i--;
    }
    c->next[r] = i;
    if (i == 0 || m->slot[i - 1] != at)
        return -1;
    uint32_t k = i - 1;
    if (m->frame[k] != ra) {
        /* Another call in that slot: the memo's younger frames are gone. */
        m->len = k;
        return -1;
    }
    /* The older slots, read again in place, root first. */
    int rq = -1;
    uint32_t q;
    for (q = 0; q < k; q++) {
        uintptr_t a = m->slot[q];
        if (rq < 0 || a < ranges[rq].lo || a + 8 > ranges[rq].hi) {
            rq = range_of(ranges, nr, a);
            if (rq < 0)
                break;
        }
        if (*(const uintptr_t *)a != m->frame[q])
            break;
    }
    if (q < k) {
        /* The stack changed at q: the frames older than it still stand. */
        m->len = q;
        return -1;
    }
    return (int32_t)k;
}

void flamme_memo_set_sigsafe(struct flamme_memo *m, uint32_t keep, const uint64_t *frames,
                             const uintptr_t *ra_at, uint32_t n)
{
    if (keep > m->len) {
        m->len = 0;
        return;
    }
    /* frames[lo..n) have slots; frames[lo - 1] is the leaf-most without. */
    uint32_t lo = n;
    while (lo > 1 && ra_at[lo - 1] && !(ra_at[lo - 1] & 7))
        lo--;
    uint32_t add = n - lo;
    if ((uint64_t)keep + add > FLAMME_MEMO_FRAMES) {
        m->len = 0;
        return;
    }
    for (uint32_t j = 0; j < add; j++) {
        m->frame[keep + j] = frames[n - 1 - j];
        m->slot[keep + j] = ra_at[n - 1 - j];
    }
    m->len = keep + add;
}
