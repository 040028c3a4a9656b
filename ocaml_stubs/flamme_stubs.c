/*
 * ocaml_stubs/flamme_stubs.c — the C primitives of the flamme OCaml library
 * (called by ocaml_stubs/flamme.ml on any OCaml domain or systhread, never
 * from a signal handler).
 *
 * Each primitive picks the agent that owns the process: a preloaded
 * libflamme.so if there is one (found through its discovery symbol; the
 * linked copy then stays dormant, see agent/agent.c), else the copy of the
 * agent linked into the program with this library. The primitive names are
 * part of the contract: a preloaded agent looks up "caml_flamme_start" to
 * learn that the program drives profiling itself and does not auto-start,
 * so they keep default visibility while everything else is hidden.
 * Errors come back as a one-line OCaml string ("" = success); flamme.ml
 * turns them into Flamme.Error.
 */
#include <stdio.h>
#include <string.h>

#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>

#include "agent/api.h"

#define FLAMME_PRIM __attribute__((visibility("default"))) CAMLprim value

struct impl {
    int (*start)(const struct flamme_start_opts *o, char *err, size_t errlen);
    int (*stop)(struct flamme_totals *t, char *err, size_t errlen);
    int (*running)(void);
};

/* Fills im with the owning agent's entry points. Returns 0, or -1 with err
 * set when a preloaded agent speaks an API this library does not know. */
static int pick_impl(struct impl *im, char *err, size_t errlen)
{
    const struct flamme_agent_api_v1 *api = flamme_preloaded_api;
    if (!api) {
        im->start = flamme_agent_start;
        im->stop = flamme_agent_stop;
        im->running = flamme_agent_running;
        return 0;
    }
    if (api->version != 1 || api->size < sizeof *api || !api->start || !api->stop ||
        !api->running) {
        snprintf(err, errlen,
                 "profiling unavailable: the preloaded libflamme.so has API version %u, "
                 "this library needs 1",
                 (unsigned)api->version);
        return -1;
    }
    im->start = api->start;
    im->stop = api->stop;
    im->running = api->running;
    return 0;
}

/* start_ : string -> int -> int -> int -> string. output "" = default, hz 0 =
 * default, mode -1 default / 0 cpu / 1 wall, period_ms 0 = FLAMME_PERIOD.
 * Returns "" or the reason. */
FLAMME_PRIM caml_flamme_start(value v_output, value v_hz, value v_mode, value v_period_ms)
{
    char err[512] = "";
    struct flamme_totals scratch; /* only for its output buffer's size */
    char path[sizeof scratch.output];
    struct impl im;
    /* Copied now: the string may move once the runtime lock is released. */
    if (caml_string_length(v_output) >= sizeof path || !caml_string_is_c_safe(v_output))
        return caml_copy_string("output path is too long or contains a NUL byte");
    memcpy(path, String_val(v_output), caml_string_length(v_output) + 1);
    struct flamme_start_opts o = {path[0] ? path : NULL, Int_val(v_hz), Int_val(v_mode),
                                  Int_val(v_period_ms)};
    if (pick_impl(&im, err, sizeof err) != 0)
        return caml_copy_string(err);
    caml_enter_blocking_section();
    int rc = im.start(&o, err, sizeof err);
    caml_leave_blocking_section();
    if (rc != 0 && !err[0])
        snprintf(err, sizeof err, "cannot start profiling");
    return caml_copy_string(rc == 0 ? "" : err);
}

/* stop_ : unit -> string. Returns "" or the reason ("not running", ...).
 * The runtime lock is released: stopping joins the agent's writer thread. */
FLAMME_PRIM caml_flamme_stop(value v_unit)
{
    char err[512] = "";
    struct impl im;
    if (pick_impl(&im, err, sizeof err) != 0)
        return caml_copy_string(err);
    caml_enter_blocking_section();
    int rc = im.stop(NULL, err, sizeof err);
    caml_leave_blocking_section();
    if (rc != 0 && !err[0])
        snprintf(err, sizeof err, "cannot stop profiling");
    return caml_copy_string(rc == 0 ? "" : err);
}

/* is_running_ : unit -> bool. false when no usable agent is present. */
FLAMME_PRIM caml_flamme_is_running(value v_unit)
{
    char err[160]; /* the message is not used; sized so it is never cut */
    struct impl im;
    if (pick_impl(&im, err, sizeof err) != 0)
        return Val_false;
    return Val_bool(im.running() != 0);
}
