/*
 * writer/writer_host.h — everything the writer needs from the process it
 * runs in, handed to flamme_writer_start by whoever starts it (the agent:
 * agent/writer_host.c). The writer includes nothing of agent/ or
 * runtime_hooks/ and calls none of their functions except through this
 * struct: settings, a warning sink, the thread registry whose rings it
 * drains, the agent's periodic work and its INFO records, how to create a
 * segment's file and an unprofiled thread.
 *
 * Who: filled by the agent before each start (normal context), read by the
 * writer thread and by the writer's functions the agent calls. The function
 * pointers are called from the writer thread unless said otherwise; none
 * from a signal handler.
 */
#ifndef FLAMME_WRITER_WRITER_HOST_H
#define FLAMME_WRITER_WRITER_HOST_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/frame_sites.h"
#include "common/profile.h"

struct flamme_ring;

/* One registered thread as the writer sees it (a snapshot of its slot). */
struct flamme_writer_thread {
    pid_t tid;
    int is_main;
    uintptr_t start_routine;        /* what pthread_create was asked to run (0 for main) */
    uint64_t start_ns, end_ns;      /* CLOCK_MONOTONIC; end_ns only once the thread ended */
    struct flamme_ring *ring;       /* NULL until the thread was first armed */
    const _Atomic uint64_t *lost;   /* samples dropped so far (relaxed loads) */
};

/* What thread() found in a slot. */
enum {
    FLAMME_WT_NONE = 0, /* free or being registered: nothing to read */
    FLAMME_WT_DRAIN,    /* a thread (live, or dead and not taken): drain its ring */
    FLAMME_WT_TAKEN,    /* a dead thread now the writer's: drain it, then thread_done */
};

struct flamme_writer_host {
    /* Settings of this profile, as its INFO records say them. */
    int hz, depth, wall;
    uint64_t period_ns;  /* 0: one profile; else one segment per period */
    const char *engine;  /* the sampling engine's name */
    const char *unwind;  /* how stacks are walked (INFO unwind) */
    const char *hidden_fn; /* the agent's own frame in every thread's stack, left out */
    /* libc's signal trampoline, where walks step through a signal frame
     * (agent/walk.h); named __restore_rt when libc's symbols do not name
     * it. 0: unknown. */
    uintptr_t sigreturn;
    /* OCaml's frame tables (common/frame_sites.h), which the unwind rows
     * are checked against; NULL: not checked. */
    const struct flamme_frame_sites_ops *frame_sites;

    /* Prints "flamme: <msg>" on stderr (always). Any thread. */
    void (*warn)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

    /* Creates the file of segment seq (from 2) into path[cap]. Returns the
     * descriptor, or -1 with errno. */
    int (*open_segment)(uint32_t seq, char *path, size_t cap);

    /* Creates a thread the agent neither samples nor counts (the writer's
     * own). Normal context, the starting thread. Returns 0 or an errno. */
    int (*create_thread)(pthread_t *t, void *(*fn)(void *), void *arg);
    /* Joins a thread create_thread made. Returns 0 or an errno. */
    int (*join_thread)(pthread_t t);

    /* The thread registry: slots 0 .. threads_hwm() - 1 of max_threads. */
    int max_threads;
    int (*threads_hwm)(void);
    /* Reads slot i into *t (acquire: its fields and ring as published).
     * take_dead: a dead thread's slot becomes the writer's (FLAMME_WT_TAKEN);
     * else it is only drained. Returns FLAMME_WT_*. */
    int (*thread)(int i, int take_dead, struct flamme_writer_thread *t);
    /* A slot thread() returned TAKEN: keep (1: it stays dead and untaken, a
     * segment still holds its samples) or free it and its ring (0). */
    void (*thread_done)(int i, int keep);
    /* Frees the slots of threads that died after the writer's last sweep.
     * The stopping thread, after the writer thread ended. */
    void (*threads_recycle_dead)(void);

    /* Charges ns of the writer's CPU time to the CPU budget of slot i's
     * thread (agent/budget.h): the writer's share of the agent's budget was
     * spent, and that thread's samples made the work. Writer thread. */
    void (*charge_budget)(int i, uint64_t ns);

    /* Once per sweep, after the rings: records of the agent's other sources
     * (GC events) into pw, and its periodic work (deferred arming, engine
     * review). Returns 0, or -1 if a record could not be written. */
    int (*sweep)(flamme_pw *pw);

    /* As a profile or a segment is completed: the agent's INFO records
     * (handler cost, budget, GC hooks, engines); last: the run's end, not a
     * segment's (the agent may then print its statistics). The writer
     * thread, or the stopping thread after the writer ended. */
    void (*end_info)(flamme_pw *pw, int last);
};

#endif
