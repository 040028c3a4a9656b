/*
 * agent/api.h — starting and stopping the profiler at run time. Used by the
 * constructor (auto-start when preloaded) and by the OCaml library's stubs
 * (Flamme.start / Flamme.stop), possibly through the discovery symbol below
 * when the library and a preloaded agent are both present: then exactly one
 * agent (the preloaded one) owns threads, timers and the handler.
 * Any thread, not a signal handler; calls are serialised internally.
 */
#ifndef FLAMME_AGENT_API_H
#define FLAMME_AGENT_API_H
#include <stddef.h>
#include <stdint.h>

struct flamme_start_opts {
    const char *output; /* NULL: FLAMME_OUTPUT / default; %p expanded */
    int hz;             /* 0: FLAMME_HZ / default */
    int wall;           /* -1: FLAMME_MODE; 0 cpu; 1 wall */
    int period_ms;      /* > 0: a continuous profile, one segment per period; else FLAMME_PERIOD */
};

struct flamme_totals {
    uint64_t samples, lost;
    uint32_t threads;
    char output[4096];
};

/* Starts profiling every registered thread into a new profile. Returns 0, or
 * -1 with one line in err: not an OCaml 5 process, already running, output
 * not writable, no sampling engine. */
int flamme_agent_start(const struct flamme_start_opts *o, char *err, size_t errlen);

/* Stops profiling and completes the profile file. Returns 0 (totals filled
 * when t is not NULL), or -1 with one line in err (not running, write error:
 * the profile may be incomplete). */
int flamme_agent_stop(struct flamme_totals *t, char *err, size_t errlen);

/* 1 while profiling. */
int flamme_agent_running(void);

/* What a preloaded libflamme.so exports for a linked copy to find with
 * dlsym(RTLD_DEFAULT, FLAMME_AGENT_API_SYMBOL). */
struct flamme_alloc_in;
#define FLAMME_AGENT_API_SYMBOL "flamme_agent_api_v1"
struct flamme_agent_api_v1 {
    uint32_t version; /* 1 */
    uint32_t size;    /* sizeof(struct flamme_agent_api_v1) */
    int (*start)(const struct flamme_start_opts *o, char *err, size_t errlen);
    int (*stop)(struct flamme_totals *t, char *err, size_t errlen);
    int (*running)(void);
    /* Since allocation profiling (present when size covers them):
     * agent/alloc.h's entry points. */
    uint64_t (*alloc_sample)(const struct flamme_alloc_in *a);
    int (*alloc_event)(uint64_t id, unsigned event);
    void (*alloc_set_mode)(double rate, int live);
};

/* Linked copy only (agent/agent.c with FLAMME_LINKED, used by the OCaml
 * library's stubs): the preloaded agent's table, looked up by the
 * constructor; NULL when none is preloaded (the loader is not asked later). */
extern const struct flamme_agent_api_v1 *flamme_preloaded_api;

#endif
