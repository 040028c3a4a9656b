/*
 * tools/collapse.h — turns a loaded profile into folded stacks
 * ("root;...;leaf COUNT"), the shared input of `collapse`, `svg` and `report`.
 * Any thread; allocates.
 */
#ifndef FLAMME_TOOLS_COLLAPSE_H
#define FLAMME_TOOLS_COLLAPSE_H
#include <stdint.h>
#include <stdio.h>
#include "common/profile.h"

struct flamme_collapse_opts {
    int threads;    /* add one root frame per thread ("domain 1", "thread 12345", "main") */
    int raw_names;  /* 1: keep mangled symbol names */
    int addresses;  /* 1: unknown frames as module+0xoffset (default: [module]) */
    int fold_gc;    /* 1: the GC part of a stack becomes one "[GC]" / "[GC stw wait]" frame */
    int lines;      /* 1: frames with a source position get " (file:line)" (one frame per line) */
};

/* The command's name in a command line (INFO cmdline): its first word's
 * basename, as perf's comm. Returns where it begins in cmdline, *len its
 * length (0 for an empty line). */
const char *flamme_command_name(const char *cmdline, size_t *len);

/* Display name of one thread: "main", "domain N", "thread TID (domain N)", ... */
const char *flamme_thread_label(const struct flamme_thread *t, char *buf, size_t len);

/* Writes s for a terminal: valid UTF-8 passes, while control characters
 * (C0, DEL, C1) and bytes that are not UTF-8 are written as \xNN, so text
 * from a profile (command line, names) can never drive the terminal. */
void flamme_put_term_safe(FILE *out, const char *s);

/* Why flamme_collapse_profile returned -2. */
#define FLAMME_COLLAPSE_TOO_BIG                                                              \
    "its stacks would make more folded text than a profile of its size can honestly "       \
    "hold (32 MiB + 512 bytes per byte of file); not collapsed"

/* Prints the one line for a flamme_collapse_profile failure r of `flamme
 * verb` on path; returns the exit status (2 for -2, 1 for memory). */
int flamme_collapse_error(const char *verb, const char *path, int r);

/* Calls emit once per distinct folded stack (frames joined root first with
 * ';', names made safe for the folded format: no ';' or newline) with the sum
 * of sample weights. Stacks flagged TRUNCATED get a "[truncated]" root frame,
 * BROKEN ones "[broken]" below the last good frame; wall-mode samples taken
 * in a system call end with a "[blocked]" leaf, cpu time the kernel spent
 * for the stack with a "[kernel]" leaf. Order: sorted by stack
 * text. Returns 0, -1 on allocation failure, -2 when the text would pass the
 * profile's budget (flamme_profile_budget: 32 MiB + 512 bytes per byte of
 * file; only crafted files get there). */
int flamme_collapse_profile(const struct flamme_profile *p, const struct flamme_collapse_opts *o,
                            void (*emit)(void *ctx, const char *stack, uint64_t count), void *ctx);

#endif
