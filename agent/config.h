/*
 * agent/config.h — the agent's settings, read once from the environment in
 * the start-up constructor (single-threaded, before main).
 *
 *   FLAMME_OUTPUT  profile path; %p = pid (default flamme.%p.flm)
 *   FLAMME_HZ      samples per CPU-second per thread, 1..10000 (default 99)
 *   FLAMME_DEPTH   max frames per sample, 16..1000000 (default 16384)
 *   FLAMME_RING_KB per-thread ring size in KiB (default: 1024, raised to hold
 *                  sixteen samples of FLAMME_DEPTH frames: 2 MiB of address
 *                  space at the default depth, resident only while in flight)
 *   FLAMME_QUIET   1: no informational lines on stderr (errors still printed)
 *   FLAMME_EXCL    1 (set by `flamme record`): never overwrite an existing
 *                  output; a second process of the same run writes OUTPUT.<pid>
 *   FLAMME_ENGINE  auto|perf|timer|itimer (default auto: perf where its events
 *                  may sample the kernel; else timer up to 100 Hz, perf above)
 *   FLAMME_MODE    cpu|wall (default cpu); wall samples every thread on the
 *                  wall clock, blocked ones included
 *   FLAMME_AUTOSTART 0: a preloaded agent waits for Flamme.start (default 1)
 *   FLAMME_SAMPLE_BLOCKED 0: leave threads that start with SIGPROF blocked
 *                  (runtime backup/tick threads) unsampled (default 1)
 *   FLAMME_BUDGET  % of the program's CPU time the signal handler may use,
 *                  0..100 (default 2, see agent/budget.h); 0: no cap, every
 *                  sample walked in full (for tests of the walker)
 *   FLAMME_STATS   1: print the handler's cost at the end (even if quiet)
 *   FLAMME_PERIOD  SECONDS (0.1..86400, decimals allowed): a continuous
 *                  profile, one complete file per period (doc/format.md
 *                  SEGMENT); %n in FLAMME_OUTPUT is the segment's number,
 *                  else ".NNNNNN" goes before a final ".flm" (default: none)
 *   FLAMME_FORK    0: a fork child is not profiled (default 1: a child
 *                  forked while profiling writes a profile of its own,
 *                  named as agent.c's child_pattern says)
 *   FLAMME_DISABLE 1: load but do nothing
 * A bad value prints one line on stderr and the default is used.
 */
#ifndef FLAMME_AGENT_CONFIG_H
#define FLAMME_AGENT_CONFIG_H
#include <stddef.h>
#include <stdint.h>

struct flamme_config {
    char output[4096];  /* the current (first) file's path */
    char pattern[4096]; /* FLAMME_OUTPUT or the start's output, unexpanded,
                         * made absolute (see flamme_config_set_output) */
    size_t shown_skip;  /* bytes of the working directory put before a relative
                         * pattern (0: none), left out of the names messages give */
    uint64_t period_ns; /* 0: one profile; else one segment per period */
    int hz;
    int depth;
    uint64_t ring_words;
    int quiet;
    int excl;
    int disabled;
    char engine[8];
    int wall;
    int autostart;
    int stats;
    int sample_blocked;
    int dither; /* timer engine: samples at random instants of the thread's CPU time, not at ticks */
    int budget_pct;
    int fork; /* profile the children forked while profiling (agent.c, flamme_atfork_child) */
    /* Where built unwind tables are kept for the next process
     * (writer/cfi_cache.h): FLAMME_CACHE_DIR, else $XDG_CACHE_HOME/flamme/rows
     * or ~/.cache/flamme/rows; "" with FLAMME_CACHE=0 (none kept or read). */
    char cache_dir[4096];
};

/* Fills c from the environment; never fails (bad values fall back to defaults
 * with a warning on stderr). */
void flamme_config_load(struct flamme_config *c);

/* Sets c->pattern and c->output from pattern (%p expanded; the first
 * segment's path when c->period_ns is set). A relative pattern is made
 * absolute against the working directory now, so that the program's chdir
 * does not move its later segments, a reopen or its fork children's
 * profiles. Returns 0, or -1 if too long (c unchanged). */
int flamme_config_set_output(struct flamme_config *c, const char *pattern);

/* path (one of c's outputs) as messages give it: without the working
 * directory flamme_config_set_output put before a relative pattern. */
const char *flamme_config_shown(const struct flamme_config *c, const char *path);

/* The path of segment seq (from 1): c->pattern with %p, %n and %% expanded;
 * with a period and no %n, ".NNNNNN" (seq, 6 digits) is put before a final
 * ".flm", or at the end. Returns 0, or -1 if it does not fit in outlen. */
int flamme_config_segment_path(const struct flamme_config *c, uint32_t seq, char *out,
                               size_t outlen);

#endif
