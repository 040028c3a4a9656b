/*
 * agent/memo.h — a thread's stack memo: the frames of its last whole stack,
 * the stack slots their return addresses were read from, and how the walk
 * went from each frame to the next, so that the next walk can replay the
 * frames it shares with that stack instead of looking up their unwind rows.
 *
 * Between two samples a thread's stack mostly changes near its leaf (on
 * ocamlopt.opt, stacks of ~680 frames on average: 84% of consecutive
 * samples differ in fewer than 64 leaf-side frames, 98% in fewer than 128).
 * When a walk reads, from a stack slot the memo has, the return address the
 * memo has there, the memo's older frames are replayed one step at a time
 * for as long as each step is one the slot alone decides: within one stack,
 * a CFA of rsp plus a constant (the frame's size, fixed by its pc) that
 * restores nothing but maybe rbp from CFA - 16 (where the rows say so, or
 * where rbp points there, which the replay checks as the walk does), or a
 * frame-pointer step whose rbp is the one the memo's next slot needs. Each
 * replayed slot is read again in place and must still hold its frame; the
 * registers are carried as the walk would carry them. Where a step depends
 * on other data (a stack switch: OCaml's C calls, [@@noalloc] calls with the
 * OCaml stack pointer in rbx, effect handlers' links to their parent stack;
 * a rule that reads other saved registers), or a slot changed, the walk
 * goes on by its rows. Return addresses in their slots alone would not do: below a
 * [@@noalloc] call at a shallower depth, the OCaml stack still holds the
 * deeper recursion's return addresses, dead but unchanged.
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
/* Bytes of memory a memo needs (flamme_memo_init): its frames, slots and
 * steps, and a walk's trace (where each frame was read, and how). */
#define FLAMME_MEMO_BYTES (3 * FLAMME_MEMO_FRAMES * sizeof(uint64_t) + 2 * FLAMME_MEMO_FRAMES)
/* Stacks (ranges) a walk may meet the memo in. */
#define FLAMME_MEMO_RANGES 16

/* How the walk went from a frame to the next older one (agent/walk.c). */
#define FLAMME_STEP_OTHER 0   /* anything else: never replayed */
/* CFA = rsp + constant, same stack, nothing restored but rbp, and that only
 * when it points at CFA - 16 (the frame's own frame pointer: OCaml's rows
 * do not say it was pushed; the walk checks, and so does the replay). */
#define FLAMME_STEP_RSP 1
#define FLAMME_STEP_RSP_RBP 2 /* the same, rbp restored from CFA - 16 by the rows */
#define FLAMME_STEP_RBP 3     /* CFA = rbp + 16, rbp restored from CFA - 16, same stack */
#define FLAMME_STEP_FP 4      /* by frame pointer, same stack */

struct flamme_memo {
    uint64_t *frame;  /* root-most first: frame[0] is the outermost return address */
    uintptr_t *slot;  /* where frame[i] was read: an 8-aligned stack address */
    uint8_t *step;    /* step[i]: how the walk came to frame[i] from frame[i + 1] */
    uintptr_t *trace; /* FLAMME_MEMO_FRAMES: the walk's ra_at (agent/walk.h) */
    uint8_t *trace_step; /* FLAMME_MEMO_FRAMES: the walk's steps */
    uint32_t len;     /* frames held; 0: none */
};

/* Where one walk is in the memo, per range of its known stacks: memo
 * frames at index >= next[r] in range r were passed (once the walk met
 * memo frame k, every frame it meets later is older: all below k). Set by
 * flamme_memo_walk_start. */
struct flamme_memo_cursor {
    uint32_t next[FLAMME_MEMO_RANGES];
};

/* Points m at mem (FLAMME_MEMO_BYTES), empty. */
void flamme_memo_init(struct flamme_memo *m, void *mem);

/* Starts a walk's cursor at the memo's leaf end. async-signal-safe: yes. */
void flamme_memo_walk_start(const struct flamme_memo *m, struct flamme_memo_cursor *c);

/* The memo index whose frame is ra read from stack slot `at` (in
 * ranges[r]), or -1. The walk's slots so far in that stack are younger
 * (lower) than `at`; within one stack a thread's frames are at higher
 * addresses the older they are, in the memo as in the walk, so the memo
 * frames of at's stack are searched from where the walk's last frame there
 * left off: a walk reads each memo slot about once, in order.
 * async-signal-safe: yes. */
int32_t flamme_memo_find_sigsafe(const struct flamme_memo *m, struct flamme_memo_cursor *c,
                                 uintptr_t at, uint64_t ra, const struct flamme_range *ranges,
                                 int r);

/* Makes the memo a whole walk's frames[n - 1], ..., frames[1] (root first),
 * read from ra_at[i] by step[i] (frames[0], the interrupted pc, has no
 * slot). Frames leaf-ward of one with no slot (ra_at 0: read from a checked
 * copy) are left out; a walk deeper than FLAMME_MEMO_FRAMES empties the
 * memo. async-signal-safe: yes. */
void flamme_memo_set_sigsafe(struct flamme_memo *m, const uint64_t *frames,
                             const uintptr_t *ra_at, const uint8_t *step, uint32_t n);

/* The same for a walk that met the memo at frames[at] = m->frame[k] and
 * replayed the next len frames from it: when the frames older than those
 * are the memo's own (same frame, slot and step at the same index, checked),
 * only the memo's part younger than k is written again, the walk's
 * frames[at - 1] down to its leaf-most frame with a slot; otherwise as
 * flamme_memo_set_sigsafe. A whole stack thousands of frames deep that
 * changed near its leaf costs its change, not its depth. async-signal-safe:
 * yes. */
void flamme_memo_update_sigsafe(struct flamme_memo *m, const uint64_t *frames,
                                const uintptr_t *ra_at, const uint8_t *step, uint32_t n,
                                uint32_t k, uint32_t at, uint32_t len);

#endif
