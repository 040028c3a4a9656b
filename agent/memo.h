/*
 * agent/memo.h — a thread's stack memo: the frames of its last whole stack
 * and the stack slots their return addresses were read from, so that the
 * next walk can stop at the first frame it shares with that stack and take
 * the older frames from the memo.
 *
 * Between two samples a thread's stack mostly changes near its leaf (on
 * ocamlopt.opt, stacks of ~680 frames on average: 84% of consecutive
 * samples differ in fewer than 64 leaf-side frames, 98% in fewer than 128),
 * so a walk that stops where it meets the memo costs its changed part, not
 * the whole depth. A join is taken only when the slot read holds the
 * memo's return address for that slot and every older slot of the memo,
 * read again in place (inside the thread's known stacks), still holds its
 * own: the same return addresses in the same slots are the same frame
 * chain. A stack that was unwound and rebuilt from another caller, freed,
 * or moved (a grown OCaml stack) fails the check, and the walk goes on.
 *
 * Who: the SIGPROF handler of the thread that owns the memo (agent/handler.c)
 * through the walker (agent/walk.c); the memory is mapped at the thread's
 * first arming (agent/threads.c). async-signal-safe: yes (every function).
 */
#ifndef FLAMME_AGENT_MEMO_H
#define FLAMME_AGENT_MEMO_H
#include <stdint.h>

#include "runtime_hooks/ocaml_rt.h"

/* Frames a memo holds; a deeper stack is not kept (its walks go the
 * whole way, within the CPU budget). */
#define FLAMME_MEMO_FRAMES 16384
/* Bytes of memory a memo needs (flamme_memo_init): its frames and slots,
 * and a walk's trace (where each frame was read). */
#define FLAMME_MEMO_BYTES (3 * FLAMME_MEMO_FRAMES * sizeof(uint64_t))
/* Stacks (ranges) a walk may join the memo in. */
#define FLAMME_MEMO_RANGES 16

struct flamme_memo {
    uint64_t *frame;  /* root-most first: frame[0] is the outermost return address */
    uintptr_t *slot;  /* where frame[i] was read: an 8-aligned stack address */
    uintptr_t *trace; /* FLAMME_MEMO_FRAMES: the walk's ra_at (agent/walk.h) */
    uint32_t len;     /* frames held; 0: none */
};

/* Where one walk is in the memo, per range of its known stacks: memo
 * frames at index >= next[r] in range r were passed. Set by
 * flamme_memo_walk_start. */
struct flamme_memo_cursor {
    uint32_t next[FLAMME_MEMO_RANGES];
};

/* Points m at mem (FLAMME_MEMO_BYTES), empty. */
void flamme_memo_init(struct flamme_memo *m, void *mem);

/* Starts a walk's cursor at the memo's leaf end. async-signal-safe: yes. */
void flamme_memo_walk_start(const struct flamme_memo *m, struct flamme_memo_cursor *c);

/* Whether the walk may stop at the return address ra it read from stack
 * slot `at`, the walk's slots so far in ranges[0..nr) being younger
 * (lower within each stack) than `at`: returns the memo index whose frame
 * that is, once every older slot of the memo was read again (directly,
 * only inside ranges) and still holds its frame; -1 otherwise. A slot
 * whose frame changed cuts the memo there (its older frames stand).
 *
 * Within one stack a thread's frames are at higher addresses the older
 * they are, in the memo as in the walk, so the memo frames of at's stack
 * are searched from where the walk's last frame there left off: a walk
 * reads each memo slot about once, in order. async-signal-safe: yes. */
int32_t flamme_memo_join_sigsafe(struct flamme_memo *m, struct flamme_memo_cursor *c,
                                 uintptr_t at, uint64_t ra, const struct flamme_range *ranges,
                                 int nr);

/* Makes the memo its first `keep` frames (root side) followed by a walk's
 * frames[n - 1], ..., frames[1], read from ra_at[n - 1], ..., ra_at[1]
 * (frames[0], the interrupted pc, has no slot). Frames leaf-ward of one with
 * no slot (ra_at 0: read from a checked copy) are left out; a memo that
 * would pass FLAMME_MEMO_FRAMES is emptied. async-signal-safe: yes. */
void flamme_memo_set_sigsafe(struct flamme_memo *m, uint32_t keep, const uint64_t *frames,
                             const uintptr_t *ra_at, uint32_t n);

#endif
