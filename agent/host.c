/*
 * agent/host.c — the agent's side of the writer's host interface (see
 * agent/host.h, writer/writer_host.h): the registry's slots as snapshots,
 * the sweep's work for the agent (GC records, deferred arming, the engine's
 * review, the checked-read fallback), the INFO records of the handler,
 * budget, GC hooks and engines. The functions run on the writer thread
 * unless said otherwise.
 */
#include "agent/host.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "agent/agent.h"
#include "agent/budget.h"
#include "agent/engine.h"
#include "agent/handler.h"
#include "agent/threads.h"
#include "agent/walk.h"
#include "runtime_hooks/frametable.h"
#include "runtime_hooks/switch_rows.h"
#include "runtime_hooks/gc_hooks.h"
#include "runtime_hooks/ocaml_rt.h"

static void host_warn(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    flamme_agent_warn(1, "%s", buf);
}

static int host_open_segment(uint32_t seq, char *path, size_t cap)
{
    if (flamme_config_segment_path(&flamme_cfg, seq, path, cap) != 0) {
        path[0] = 0;
        errno = ENAMETOOLONG;
        return -1;
    }
    return flamme_agent_open_output(path, cap);
}

static int host_create_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
    return flamme_thread_create_own(t, fn, arg);
}

static int host_threads_hwm(void)
{
    /* Pairs with the release store when a slot is first claimed. */
    return atomic_load_explicit(&flamme_slots_hwm, memory_order_acquire);
}

static int host_thread(int i, int take_dead, struct flamme_writer_thread *t)
{
    struct flamme_slot *s = &flamme_slots[i];
    /* Pairs with the release stores in register (LIVE) and unregister (DEAD). */
    int st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (st != FLAMME_SLOT_LIVE && st != FLAMME_SLOT_DEAD)
        return FLAMME_WT_NONE;
    int r = FLAMME_WT_DRAIN;
    if (st == FLAMME_SLOT_DEAD && take_dead) {
        if (!flamme_slot_take_dead(s))
            return FLAMME_WT_NONE;
        r = FLAMME_WT_TAKEN;
    }
    t->tid = s->tid;
    t->is_main = s->is_main;
    t->start_routine = s->start_routine;
    t->start_ns = s->start_ns;
    t->end_ns = s->end_ns;
    /* Pairs with the release store in arm_locked (agent/threads.c). */
    t->ring = __atomic_load_n(&s->ring, __ATOMIC_ACQUIRE);
    t->lost = &s->lost;
    return r;
}

static void host_thread_done(int i, int keep)
{
    struct flamme_slot *s = &flamme_slots[i];
    if (keep) /* untaken: only the writer takes DEAD slots while it runs */
        atomic_store_explicit(&s->state, FLAMME_SLOT_DEAD, memory_order_release);
    else
        flamme_slot_release(s);
}

static void host_charge_budget(int i, uint64_t ns)
{
    /* Pairs with the exchange in the slot's handler (agent/handler.c). */
    atomic_fetch_add_explicit(&flamme_slots[i].writer_debt_ns, ns, memory_order_relaxed);
}

static int host_sweep(flamme_pw *pw)
{
    int rc = flamme_gc_drain(pw);
    flamme_threads_arm_pending();
    flamme_threads_review_engine();
    flamme_safe_read_prepare_fallback();
    return rc;
}

static void host_end_info(flamme_pw *pw, int last)
{
    uint64_t p50, p99, n;
    flamme_handler_cost(&p50, &p99, &n);
    char buf[160];
    snprintf(buf, sizeof buf, "%llu %llu %llu", (unsigned long long)p50,
             (unsigned long long)p99, (unsigned long long)n);
    flamme_pw_info(pw, "handler_ns_p50_p99_n", buf);
    uint64_t skipped, skipped_w, own, handler_ns, replayed, leaf, leaf_w;
    flamme_budget_totals(&skipped, &skipped_w, &own, &handler_ns, &replayed, &leaf, &leaf_w);
    snprintf(buf, sizeof buf, "%d %d %llu %llu %llu %llu %llu %llu %llu", flamme_cfg.budget_pct,
             FLAMME_BUDGET_SHORT_DEPTH,
             (unsigned long long)skipped, (unsigned long long)skipped_w, (unsigned long long)own,
             (unsigned long long)handler_ns, (unsigned long long)replayed,
             (unsigned long long)leaf, (unsigned long long)leaf_w);
    flamme_pw_info(pw, "budget", buf);
    uint64_t pc_only = flamme_handler_pc_only();
    if (pc_only) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)pc_only);
        flamme_pw_info(pw, "pc_only_samples", buf);
    }
    uint64_t gc_paused_ns, gc_pauses;
    flamme_gc_major_paused(&gc_paused_ns, &gc_pauses);
    if (gc_pauses) {
        snprintf(buf, sizeof buf, "%llu %llu", (unsigned long long)(gc_paused_ns / 1000000u),
                 (unsigned long long)gc_pauses);
        flamme_pw_info(pw, "gc_major_hooks_paused_ms_n", buf);
    }
    if (flamme_engine_kernel_counted())
        flamme_pw_info(pw, "engine_kernel", "counted");
    if (flamme_engine_timer_info(buf, sizeof buf))
        flamme_pw_info(pw, "engine_timer", buf);
    char moved[256];
    if (flamme_engine_moved(moved, sizeof moved))
        flamme_pw_info(pw, "engine_moved_to_timer", moved);
    if (flamme_cfg.stats && last)
        flamme_agent_warn(1, "handler cost: median %llu ns, p99 %llu ns over %llu samples",
                          (unsigned long long)p50, (unsigned long long)p99,
                          (unsigned long long)n);
}

static const struct flamme_frame_sites_ops frame_sites = {
    .is_table = flamme_frametable_is_table_symbol,
    .sites = flamme_frametable_image_sites,
    .is_switch_fn = flamme_switch_rows_is_fn,
    .switch_span = flamme_switch_rows_span,
};

const struct flamme_writer_host *flamme_agent_host_for_start(void)
{
    static struct flamme_writer_host h;
    h = (struct flamme_writer_host){
        .hz = flamme_cfg.hz,
        .depth = flamme_cfg.depth,
        .wall = flamme_cfg.wall,
        .period_ns = flamme_cfg.period_ns,
        .engine = flamme_engine_name(),
        .unwind = flamme_ocaml_has_frame_pointers_sigsafe() == 0
                      ? "CFI (OCaml without frame pointers)"
                      : "CFI, frame pointers where there is none",
        .hidden_fn = "flamme_tramp", /* agent/threads.c: every registered thread's first frame */
        .sigreturn = flamme_walk_sigreturn(),
        .frame_sites = &frame_sites,
        .warn = host_warn,
        .open_segment = host_open_segment,
        .create_thread = host_create_thread,
        .join_thread = flamme_thread_join_own,
        .max_threads = FLAMME_MAX_THREADS,
        .threads_hwm = host_threads_hwm,
        .thread = host_thread,
        .thread_done = host_thread_done,
        .threads_recycle_dead = flamme_threads_recycle_dead,
        .charge_budget = host_charge_budget,
        .sweep = host_sweep,
        .end_info = host_end_info,
    };
    flamme_handler_cost_reset();
    return &h;
}
