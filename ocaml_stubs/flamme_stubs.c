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
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <caml/address_class.h>
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <caml/version.h>

#include "agent/alloc.h"
#include "agent/api.h"
#include "common/profile.h"
#include "runtime_hooks/frametable.h"

#define FLAMME_PRIM __attribute__((visibility("default"))) CAMLprim value

#if OCAML_VERSION_MAJOR == 5 && OCAML_VERSION_MINOR >= 5
CAMLextern value caml_memprof_is_sampling(value unit); /* runtime/memprof.c, 5.5+ */
#endif

struct impl {
    int (*start)(const struct flamme_start_opts *o, char *err, size_t errlen);
    int (*stop)(struct flamme_totals *t, char *err, size_t errlen);
    int (*running)(void);
    /* NULL when a preloaded agent predates allocation profiling */
    uint64_t (*alloc_sample)(const struct flamme_alloc_in *a);
    int (*alloc_event)(uint64_t id, unsigned event);
    void (*alloc_set_mode)(double rate, int live);
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
        im->alloc_sample = flamme_alloc_sample;
        im->alloc_event = flamme_alloc_event;
        im->alloc_set_mode = flamme_alloc_set_mode;
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
    int has_alloc = api->size >= offsetof(struct flamme_agent_api_v1, alloc_set_mode) +
                                    sizeof api->alloc_set_mode;
    im->alloc_sample = has_alloc ? api->alloc_sample : NULL;
    im->alloc_event = has_alloc ? api->alloc_event : NULL;
    im->alloc_set_mode = has_alloc ? api->alloc_set_mode : NULL;
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

/* Allocation profiling (agent/alloc.h): the entry points chosen by the last
 * alloc_mode_, read by the Memprof callbacks (any domain; set before
 * Gc.Memprof.start and left in place after, so a late callback never sees
 * them half-written). */
static struct impl alloc_impl;
/* The runtime's list of the program's frame tables (its startup code). */
extern void *caml_frametable[];
static double alloc_rate;

/* alloc_mode_ : float -> bool -> int -> string. rate > 0: allocation
 * profiling starts (live: blocks are tracked until they die); rate 0: it
 * stopped. Returns "" or why it cannot start. */
FLAMME_PRIM caml_flamme_alloc_mode(value v_rate, value v_live, value v_unused)
{
    char err[512] = "";
    struct impl im;
    if (pick_impl(&im, err, sizeof err) != 0)
        return caml_copy_string(err);
    if (!im.alloc_set_mode)
        return caml_copy_string("allocation profiling unavailable: the preloaded libflamme.so "
                                "is older than this library");
    double rate = Double_val(v_rate);
#if OCAML_VERSION_MAJOR == 5 && OCAML_VERSION_MINOR >= 5
    /* OCaml 5.5's Gc.Memprof.start replaces a profile already sampling in
     * this domain where earlier releases raise: the program's own profile
     * would silently stop. Refused here as those releases refuse it. */
    if (rate > 0 && Bool_val(caml_memprof_is_sampling(Val_unit)))
        return caml_copy_string("cannot start allocation profiling: this domain already "
                                "runs a Gc.Memprof profile");
#endif
    if (rate > 0) {
        flamme_frametable_index(caml_frametable);
        alloc_impl = im;
        alloc_rate = rate;
    }
    im.alloc_set_mode(rate, Bool_val(v_live));
    return caml_copy_string("");
}

#define ALLOC_MAX_FRAMES 4096

/* 1 if the callstack in Memprof's record a cannot be read: OCaml 5.3's
 * runtime/memprof.c (run_alloc_callback_res) copies a stashed callstack
 * (a major or C allocation's) to the minor heap and then allocates the
 * record, keeping the callstack meanwhile only in an entry the minor GC may
 * skip (below the table's `young` index). A minor collection right there
 * (the heap full, or another domain's stop-the-world request) reclaims it,
 * and the record names memory the record itself, or whatever comes next,
 * now holds: reading its slots as frame descriptors faults (ocaml/ocaml
 * #14287, fixed in 5.4; seen in 1-5 of 300 runs of tests/alloc's split.exe).
 * Both are allocated in this domain's minor heap, the callstack first, and
 * the minor heap fills downwards: a live young callstack lies above the
 * record's end, a reclaimed one below it (the collection reset the heap
 * and the record was allocated at its top). A callstack outside the minor
 * heap (promoted, or too large for it) is live. */
static int callstack_lost(value a, value bt)
{
#if OCAML_VERSION_MAJOR == 5 && OCAML_VERSION_MINOR < 4
    if (!Is_block(bt) || !Is_young(bt))
        return 0;
    return !Is_young(a) || (char *)bt < (char *)&Field(a, Wosize_val(a)) + sizeof(header_t);
#else
    /* Rooted there; and the order of the two allocations, which the check
     * relies on, is 5.3's. */
    (void)a;
    (void)bt;
    return 0;
#endif
}

/* alloc_sample_ : Gc.Memprof.allocation -> raw_backtrace -> int -> int ->
 * int -> int [@@noalloc]: the record (only where it lies is used), its
 * callstack, n_samples, size, heap lor (source lsl 8).
 * Passes the block's callstack as code addresses (runtime_hooks/
 * frametable.h; the leaf one byte back, inside the allocating call like
 * every caller frame) to the agent; a slot the index does not know (code
 * loaded after the start) is left out.
 * Returns the block's id, 0 when dropped. Allocates nothing. */
FLAMME_PRIM caml_flamme_alloc_sample(value v_a, value v_bt, value v_n, value v_size, value v_kind)
{
    if (!alloc_impl.alloc_sample)
        return Val_long(0);
    int lost = callstack_lost(v_a, v_bt);
    uint64_t addrs[ALLOC_MAX_FRAMES];
    mlsize_t len = !lost && Is_block(v_bt) ? Wosize_val(v_bt) : 0, n = 0;
    for (mlsize_t i = 0; i < len && n < ALLOC_MAX_FRAMES; i++) {
        uintptr_t a = flamme_frametable_slot_addr((uintptr_t)Field(v_bt, i));
        if (a) {
            addrs[n] = a - (n == 0);
            n++;
        }
    }
    long kind = Long_val(v_kind);
    struct flamme_alloc_in a = {addrs,
                                (uint32_t)n,
                                lost ? FLAMME_ALLOC_LOST : len > ALLOC_MAX_FRAMES ? FLAMME_ALLOC_CUT : 0,
                                (uint32_t)Long_val(v_n),
                                (uint64_t)Long_val(v_size),
                                (unsigned)(kind & 0xff),
                                (unsigned)((kind >> 8) & 0xff),
                                alloc_rate};
    return Val_long((long)alloc_impl.alloc_sample(&a));
}

/* alloc_event_ : int -> int -> unit [@@noalloc]. */
FLAMME_PRIM caml_flamme_alloc_event(value v_id, value v_event)
{
    if (alloc_impl.alloc_event)
        alloc_impl.alloc_event((uint64_t)Long_val(v_id), (unsigned)Long_val(v_event));
    return Val_unit;
}
