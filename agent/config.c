/*
 * agent/config.c — environment parsing for the agent (see config.h).
 * Runs in the constructor only.
 */
#include "agent/config.h"

#include "agent/budget.h"
#include "common/outfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses env var `name` as an integer in [lo, hi]. Returns the value, or def
 * when unset; warns and returns def when malformed or out of range. */
static long env_long(const char *name, long def, long lo, long hi)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "flamme: %s=%s is not an integer in %ld..%ld; using %ld\n", name, s, lo,
                hi, def);
        return def;
    }
    return v;
}

/* Parses env var name as one of the words in choices (NULL-terminated).
 * Returns its index, or 0 (the default) when unset or unknown (with a
 * warning naming the accepted words). */
static int env_word(const char *name, const char *const *choices)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    for (int i = 0; choices[i]; i++)
        if (!strcmp(s, choices[i]))
            return i;
    char list[128] = "";
    for (int i = 0; choices[i]; i++) {
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
        if (choices[i + 1])
            strncat(list, "|", sizeof list - strlen(list) - 1);
    }
    fprintf(stderr, "flamme: %s=%s is not one of %s; using %s\n", name, s, list, choices[0]);
    return 0;
}

/* Parses env var name as seconds (decimals allowed) in [lo, hi]; returns
 * nanoseconds, 0 when unset; warns and returns 0 when malformed. */
static uint64_t env_seconds_ns(const char *name, double lo, double hi)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "flamme: %s=%s is not a number of seconds in %g..%g; not used\n", name,
                s, lo, hi);
        return 0;
    }
    return (uint64_t)(v * 1e9 + 0.5);
}

int flamme_config_segment_path(const struct flamme_config *c, uint32_t seq, char *out,
                               size_t outlen)
{
    return flamme_out_name(c->pattern, (int)getpid(), c->period_ns != 0, seq, out, outlen);
}

int flamme_config_set_output(struct flamme_config *c, const char *pattern)
{
    char keep[sizeof c->pattern], abs[sizeof c->pattern];
    size_t keep_skip = c->shown_skip, skip = 0;
    memcpy(keep, c->pattern, sizeof keep);
    if (pattern[0] != '/' && getcwd(abs, sizeof abs) && abs[0] == '/') {
        /* Resolved once, here: the program may change directory before a
         * later segment, a reopen or a fork child's profile. */
        size_t n = strlen(abs);
        int len = snprintf(abs + n, sizeof abs - n, "%s%s", n > 1 ? "/" : "", pattern);
        if (len < 0 || (size_t)len >= sizeof abs - n)
            return -1;
        skip = n > 1 ? n + 1 : 1;
        pattern = abs;
    } else if (pattern[0] == '/' && keep_skip && !strncmp(pattern, keep, keep_skip)) {
        skip = keep_skip; /* derived from the pattern before (a fork child's) */
    }
    size_t len = strlen(pattern);
    if (len >= sizeof c->pattern)
        return -1;
    memmove(c->pattern, pattern, len + 1); /* may be c->pattern itself */
    c->shown_skip = skip;
    if (flamme_config_segment_path(c, 1, c->output, sizeof c->output) != 0) {
        memcpy(c->pattern, keep, sizeof keep);
        c->shown_skip = keep_skip;
        return -1;
    }
    return 0;
}

const char *flamme_config_shown(const struct flamme_config *c, const char *path)
{
    size_t n = c->shown_skip;
    return n && !strncmp(path, c->pattern, n) ? path + n : path;
}

void flamme_config_load(struct flamme_config *c)
{
    memset(c, 0, sizeof *c);
    c->quiet = env_long("FLAMME_QUIET", 0, 0, 1);
    c->excl = env_long("FLAMME_EXCL", 0, 0, 1);
    c->disabled = env_long("FLAMME_DISABLE", 0, 0, 1);
    c->autostart = env_long("FLAMME_AUTOSTART", 1, 0, 1);
    c->stats = env_long("FLAMME_STATS", 0, 0, 1);
    c->sample_blocked = env_long("FLAMME_SAMPLE_BLOCKED", 1, 0, 1);
    c->dither = env_long("FLAMME_DITHER", 1, 0, 1);
    c->fork = env_long("FLAMME_FORK", 1, 0, 1);
    c->hz = (int)env_long("FLAMME_HZ", 99, 1, 10000);
    c->depth = (int)env_long("FLAMME_DEPTH", 16384, 16, 1000000);
    c->budget_pct = (int)env_long("FLAMME_BUDGET", FLAMME_BUDGET_PCT, 0, 100);
    c->period_ns = env_seconds_ns("FLAMME_PERIOD", 0.1, 86400);
    long ring_kb = env_long("FLAMME_RING_KB", 1024, 64, 1L << 22);
    uint64_t words = (uint64_t)ring_kb * 1024 / 8;
    /* Room for about 16 deepest samples (2 MiB at the default depth; the
     * ring rounds up to a power of two), so a deep recursion sampled at a
     * high rate is drained (the writer is rung at half) before the ring
     * overflows even when the writer is slow to be scheduled. Only address
     * space: the writer gives drained pages back (common/ring.c). */
    uint64_t min_words = 16 * (uint64_t)c->depth;
    c->ring_words = words < min_words ? min_words : words;

    static const char *const engines[] = {"auto", "perf", "timer", "itimer", NULL};
    static const char *const modes[] = {"cpu", "wall", NULL};
    snprintf(c->engine, sizeof c->engine, "%s", engines[env_word("FLAMME_ENGINE", engines)]);
    c->wall = env_word("FLAMME_MODE", modes) == 1;

    const char *dir = getenv("FLAMME_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (dir && dir[0] && dir[0] != '/' && !c->quiet)
        fprintf(stderr, "flamme: FLAMME_CACHE_DIR=%s is not an absolute path; ignored\n", dir);
    if (!env_long("FLAMME_CACHE", 1, 0, 1))
        c->cache_dir[0] = '\0';
    else if (dir && dir[0] == '/')
        snprintf(c->cache_dir, sizeof c->cache_dir, "%s", dir);
    else if (xdg && xdg[0] == '/')
        snprintf(c->cache_dir, sizeof c->cache_dir, "%s/flamme/rows", xdg);
    else if (home && home[0] == '/')
        snprintf(c->cache_dir, sizeof c->cache_dir, "%s/.cache/flamme/rows", home);

    const char *out = getenv("FLAMME_OUTPUT");
    if (!out || !*out)
        out = "flamme.%p.flm";
    if (flamme_config_set_output(c, out) != 0) {
        fprintf(stderr, "flamme: FLAMME_OUTPUT is too long; using flamme.%%p.flm\n");
        flamme_config_set_output(c, "flamme.%p.flm");
    }
}
