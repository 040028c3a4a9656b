/*
 * agent/memo.c — a thread's stack memo (see agent/memo.h): its memory and
 * the search of a slot in it. The replay itself is the walker's
 * (agent/walk.c, replay_memo), which knows the registers. Runs in the owning
 * thread's SIGPROF handler only: no malloc, no locks, no stdio; the memory
 * was mapped before the thread was armed.
 */
#include "agent/memo.h"

void flamme_memo_init(struct flamme_memo *m, void *mem)
{
    uint64_t *w = mem;
    m->frame = w;
    m->slot = (uintptr_t *)(w + FLAMME_MEMO_FRAMES);
    m->trace = (uintptr_t *)(w + 2 * FLAMME_MEMO_FRAMES);
    m->step = (uint8_t *)(w + 3 * FLAMME_MEMO_FRAMES);
    m->trace_step = m->step + FLAMME_MEMO_FRAMES;
    m->len = 0;
}

void flamme_memo_walk_start(const struct flamme_memo *m, struct flamme_memo_cursor *c)
{
    for (int r = 0; r < FLAMME_MEMO_RANGES; r++)
        c->next[r] = m->len;
}

int32_t flamme_memo_find_sigsafe(const struct flamme_memo *m, struct flamme_memo_cursor *c,
                                 uintptr_t at, uint64_t ra, const struct flamme_range *ranges,
                                 int r)
{
    if (!m->len || !at || r < 0 || r >= FLAMME_MEMO_RANGES)
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
    if (i == 0 || m->slot[i - 1] != at || m->frame[i - 1] != ra)
        return -1;
    return (int32_t)(i - 1);
}

/* The first of a walk's frames[lo .. end) that all have a slot (an
 * aligned ra_at); frames[0], the interrupted pc, never has one. */
static uint32_t slotted_from(const uintptr_t *ra_at, uint32_t end)
{
    uint32_t lo = end;
    while (lo > 1 && ra_at[lo - 1] && !(ra_at[lo - 1] & 7))
        lo--;
    return lo;
}

void flamme_memo_set_sigsafe(struct flamme_memo *m, const uint64_t *frames,
                             const uintptr_t *ra_at, const uint8_t *step, uint32_t n)
{
    uint32_t lo = slotted_from(ra_at, n);
    uint32_t len = n - lo;
    if (len > FLAMME_MEMO_FRAMES) {
        m->len = 0;
        return;
    }
    for (uint32_t j = 0; j < len; j++) {
        m->frame[j] = frames[n - 1 - j];
        m->slot[j] = ra_at[n - 1 - j];
        m->step[j] = step[n - 1 - j];
    }
    m->len = len;
}

void flamme_memo_update_sigsafe(struct flamme_memo *m, const uint64_t *frames,
                                const uintptr_t *ra_at, const uint8_t *step, uint32_t n,
                                uint32_t k, uint32_t at, uint32_t len)
{
    /* memo[k - len .. k) were replayed into frames[at + 1 .. at + len]; the
     * frames after them must be memo[0 .. k - len), root last. */
    uint32_t e = k - len, after = at + 1 + len;
    int same = k < m->len && len <= k && after <= n && n - after == e;
    for (uint32_t t = 0; same && t < e; t++)
        same = frames[n - 1 - t] == m->frame[t] && ra_at[n - 1 - t] == m->slot[t] &&
               step[n - 1 - t] == m->step[t];
    if (!same) {
        flamme_memo_set_sigsafe(m, frames, ra_at, step, n);
        return;
    }
    uint32_t lo = slotted_from(ra_at, at);
    if ((uint64_t)k + 1 + (at - lo) > FLAMME_MEMO_FRAMES) {
        m->len = 0;
        return;
    }
    m->step[k] = step[at];
    for (uint32_t i = at; i-- > lo;) {
        uint32_t j = k + (at - i);
        m->frame[j] = frames[i];
        m->slot[j] = ra_at[i];
        m->step[j] = step[i];
    }
    m->len = k + 1 + (at - lo);
}
