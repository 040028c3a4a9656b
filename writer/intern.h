/*
 * writer/intern.h — a sample's raw frames to its node in the profile's
 * prefix tree, at the cost of what changed since the thread's last stack.
 *
 * Each thread keeps the last stack interned from it: its frames' addresses
 * root first and the node reached after each. A new stack compares its
 * root-most addresses with those (a compare a frame) and looks up only the
 * frames past the part they share: a deep recursion's consecutive samples
 * differ in a few leaf-most frames. Before, every new stack looked up all
 * its frames in two tables and copied them into a third.
 *
 * Frames are named by the caller (writer.c's frame_id: dedup id, symbol,
 * FRAME record) and come with facts (FR_* below); two shape the stack:
 * FR_SKIP frames are left out, and an unnamed vDSO frame folds into the
 * named vDSO function that called it when that is its nearest caller not
 * left out. FR_ROOT on the root-most frame kept makes the stack whole.
 *
 * Called by: the writer thread only. Allocates. A thread's state is valid
 * for one flamme_pw and one set of frame ids: reset it with the profile.
 */
#ifndef FLAMME_WRITER_INTERN_H
#define FLAMME_WRITER_INTERN_H
#include <stdint.h>

#include "common/profile.h"

/* Facts about a frame (writer.c keeps a byte per frame id). */
#define FR_HIDDEN 1u /* the agent's own code (H.hidden_fn: its pthread_create trampoline) */
#define FR_ROOT 2u   /* a thread's first function */
#define FR_MAIN 4u   /* the program's main() */
/* The vDSO's exported functions (__vdso_clock_gettime...) call unnamed
 * internal code (the clock read); a sample there is shown as the exported
 * function, so the vDSO has one name per entry point. */
#define FR_VDSO_NAMED 8u
#define FR_VDSO_ANON 16u
/* agent/dl.c's dlopen wrapper, under which the program's own dlopen
 * runs (its own work, the rows, is not sampled: in_agent): left out of the
 * stack like a tail call, so flamme does not show in the program's frames.
 * Any other agent function still shows: its time is flamme's. */
#define FR_AGENT 32u
#define FR_SKIP (FR_HIDDEN | FR_AGENT) /* left out of the stack */

/* A thread's last stack (zeroed: none). */
struct flamme_intern_thread {
    uint64_t *addr; /* root first; the leaf's pc exact, return addresses less one */
    uint32_t *node; /* the node after each frame (the parent's where it was left out) */
    uint8_t *seen;  /* the facts of the nearest frame kept or folded at or above it */
    uint32_t n, cap;
    uint8_t root; /* the stack is whole */
};

/* Names the frame at addr (already adjusted): its id, UINT32_MAX on
 * failure. callee_facts: the facts of the frame it called (0 for the
 * leaf). Sets *facts. */
typedef uint32_t (*flamme_intern_frame_fn)(void *ctx, uint64_t addr, uint8_t callee_facts,
                                           uint8_t *facts);

struct flamme_intern {
    flamme_pw *pw;
    flamme_intern_frame_fn frame;
    void *ctx;
    /* scratch, cap entries each */
    uint32_t *ids, *kept, *knode;
    uint8_t *facts;
    uint32_t cap;
    uint32_t named; /* frames the last flamme_intern_stack looked up (its cost) */
};

/* How many root-most frames the stack frames[0..n) (leaf first, as the
 * ring has it) shares with t's last stack: a compare a frame. */
uint32_t flamme_intern_shared(const struct flamme_intern_thread *t, const uint64_t *frames,
                              uint32_t n);

/* The node of that stack, which becomes t's last stack; same is what
 * flamme_intern_shared returned for it (t unchanged since), and the frames
 * below those are looked up (in->named says how many). Sets *root (the
 * stack ends at a thread root). Returns UINT32_MAX on allocation failure
 * (t is then empty). */
uint32_t flamme_intern_stack(struct flamme_intern *in, struct flamme_intern_thread *t,
                             const uint64_t *frames, uint32_t n, uint32_t same, int *root);

/* Forgets t's last stack (a new profile), keeping its memory. */
void flamme_intern_thread_reset(struct flamme_intern_thread *t);
void flamme_intern_thread_free(struct flamme_intern_thread *t);
void flamme_intern_free(struct flamme_intern *in);

#endif
