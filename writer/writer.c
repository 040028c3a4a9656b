/*
 * writer/writer.c — the writer thread (see writer.h). Consumes the rings of
 * the thread registry the host hands it (writer/writer_host.h); the only
 * thread that symbolizes, compresses or touches the profile file.
 */
#include "writer/writer.h"

#include <fcntl.h>
#include <link.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fds.h"
#include "common/forkchild.h"
#include "common/index_table.h"
#include "common/profile.h"
#include "common/ring.h"
#include "common/roots.h"
#include "writer/cfi_build.h"
#include "writer/dedup.h"
#include "writer/intern.h"
#include "writer/lines.h"
#include "writer/symbols.h"
#include "writer/writer_host.h"

#define DRAIN_INTERVAL_MS 20 /* between ring sweeps, unless a handler rings */
/* Sweeps that drain nothing back off, doubling the interval up to this:
 * an idle sweep cost the writer ~50 us of CPU (its wake-up included), ~3
 * ms a second while the program waited (make bench-idle). The first record
 * after that wakes it (flamme_writer_activity_sigsafe), as do a stop, an
 * exit, a sync or a deferred arming. */
#define DRAIN_IDLE_MAX_MS 320
#define CHUNK_INTERVAL_NS 1000000000ull /* a chunk at least every second */
#define CHUNK_MAX_RAW (256u * 1024u)
#define CFI_RESCAN_NS 2000000000ull /* look for new libraries every 2 s */

/* What the host handed flamme_writer_start (writer/writer_host.h). */
static struct flamme_writer_host H;

/* Per slot of the host's registry: the thread last seen there and what
 * this run wrote of it; its serial (format 1.4: tids are reused, serials
 * never) is kept across the segments and runs of the process. Writer
 * thread, and flamme_writer_start before it runs. */
struct wslot {
    struct flamme_writer_thread t;
    uint64_t lost_seen;
    int announced;  /* THREAD record written in the current file */
    int32_t domain; /* the domain announced, or -1 */
    uint32_t serial;
    pid_t serial_tid;
    uint64_t serial_start;
    /* This sweep: the work its samples made (one per sample, plus one per
     * frame looked up: below the part a stack shared with the slot's last
     * one, writer/intern.h) and their weight (budget_sweep). */
    uint64_t work, weight;
    /* The ring's read position and the time at the start of the current
     * second of measurement (ring_pace); 0: not started. */
    uint64_t pace_pos, pace_ns;
    /* The last stack interned from the slot's threads (stack_of); valid in
     * the current file. */
    struct flamme_intern_thread last;
};
static struct wslot *ws; /* H.max_threads, allocated at the first start */
static uint32_t next_serial;

static struct {
    pthread_t thread;
    _Atomic int stop;   /* set by writer_stop before it wakes the writer */
    _Atomic int finish; /* set by a dying process's signal handler: complete the file now */
    int closed;         /* the profile was completed (by finish or stop) */
    _Atomic int finished; /* set (release) by the writer once finish is done */
    int out_fd;         /* the profile, as the writer's guard last checked it */
    struct flamme_fd_id out_id;
    char path[4096];    /* the profile's path, to reopen it (see out_guard) */
    flamme_pw *pw;
    flamme_dedup *dedup;
    flamme_symtab *syms;
    const char *self_module; /* libflamme.so's path (it has frame pointers); NULL when linked */
    struct flamme_intern in; /* scratch of stack_of */
    uint64_t samples, lost;
    uint64_t records; /* ring records drained (idle sweeps back off) */
    uint32_t threads;
    uint64_t last_chunk_ns;
    int failed;
    int cur;                 /* the slot whose records are being read */
    uint64_t last_cfi_ns;
    struct rawent *raw; /* raw-stack cache entries (see raw_slot), raw_n of raw_cap used */
    struct flamme_itab raw_tab;
    size_t raw_n, raw_cap;
    char exe_path[4096];      /* the executable, as /proc/self/maps names it */
    flamme_lines *lines;      /* its line table (kept across profiles), NULL if none */
    int lines_tried;
    int exe_loaded; /* this profile has called load_executable */
    int old_efd; /* the previous run's doorbell, closed one run later */
    uint8_t *fact; /* per frame id: FR_* bits (writer/intern.h) */
    uint32_t fact_cap;
    /* Continuous profile (H.period_ns): segment seq covers
     * [seg_from, ...). Once a sweep starts past seg_from + period, rot_at
     * is that boundary: samples taken from then on wait in the stash while
     * the old segment still takes the ones taken before it, for one grace
     * period (a handler that read the clock before the boundary may publish
     * its sample a little later); then the segment is closed, the next
     * opened, and the stash replayed into it. */
    uint64_t period_ns, seg_from, seg_end, rot_at, realtime0, monotonic0;
    uint32_t seq;
    uint64_t *stash;          /* per record: slot index, nwords, the words */
    size_t stash_n, stash_cap;
    int no_stash;             /* write samples into the current segment whatever their time */
    int final;                /* the last sweep of a run: no segment begins */
    int alloc_info;           /* the current file has INFO alloc_rate (every file with ALLOCs) */
    const char *cmdline;
    /* The writer's own CPU time this run (INFO writer_ns): what its threads
     * that ended used (an exec checkpoint ends one and starts another),
     * plus the running one's clock when read from it (writer_cpu_ns). */
    uint64_t cpu_done_ns;
    int running; /* a writer thread is in writer_main (set and cleared by it) */
    /* The writer's part of the agent's CPU budget (budget_sweep): what it
     * may still spend (ns), and what it charged to the threads' budgets. */
    int64_t wbal;
    uint64_t charged_ns;
    uint64_t setup_ns; /* of writer_ns: load_executable, less its symbols (parse_ns) */
    /* Wall time spent naming frames seen for the first time (frame_id):
     * each address of the program's code is named once a profile, however
     * deep or long the run, so it is not charged to the handlers (sweep). */
    uint64_t naming_ns;
    uint64_t lines_ns0; /* flamme_lines_run_ns of the kept table at the start */
    uint64_t parse_ns0; /* flamme_symtab_parse_ns of the kept symbolizer at the start */
    /* The writer thread's CPU clock when its last sweep ended: what it
     * spends between sweeps (waking, polling) counts with the next one. */
    uint64_t cpu_mark;
    /* CPU the starting thread (the program's) spent in flamme_writer_start:
     * mostly the unwind tables of every loaded module (INFO writer_ns). */
    uint64_t start_ns;
    /* The process's CPU clock when profiling started (INFO process_cpu_ns). */
    uint64_t proc_cpu0;
} W;

#define ROTATE_GRACE_NS (2ull * DRAIN_INTERVAL_MS * 1000000ull)

/* Reads the executable's symbols and indexes its line table, the first
 * time this profile names a frame or a thread: the writer's largest fixed
 * cost (the OCaml compiler's 21 MB: a 1.26 MB symbol table read back and a
 * line index of 20,000 ranges), the same whatever the program does. So it
 * is kept out of the budget (sweep subtracts setup_ns), and a run that
 * takes no sample, as a short compile at a low rate mostly does, never
 * pays it. The line table is opened through /proc/self/exe: by then the
 * path may name another file (a rebuild while the program runs), the link
 * still the one running. Writer thread. */
static void load_executable(void)
{
    if (W.exe_loaded)
        return;
    W.exe_loaded = 1;
    uint64_t c0 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    uint64_t p0 = flamme_symtab_parse_ns(W.syms);
    const char *fn, *mod;
    uint64_t off;
    unsigned long entry = getauxval(AT_ENTRY);
    if (entry)
        flamme_symtab_lookup(W.syms, entry, &fn, &mod, &off);
    if (!W.lines_tried && W.exe_path[0]) {
        W.lines_tried = 1;
        W.lines = flamme_lines_open("/proc/self/exe");
    }
    /* The symbols read count as every module's do (flamme_symtab_parse_ns). */
    W.setup_ns += flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - c0 -
                  (flamme_symtab_parse_ns(W.syms) - p0);
}

/* flamme_symtab_lookup, the executable's tables read first. */
static int sym_lookup(uint64_t addr, const char **fn, const char **mod, uint64_t *off)
{
    load_executable();
    return flamme_symtab_lookup(W.syms, addr, fn, mod, off);
}

/* Writes the source position of a new frame of the main executable (the
 * OCaml program and its runtime), from the executable's DWARF line table,
 * parsed on first use and kept across profiles. */
static void frame_line(uint32_t id, uint64_t vaddr, const char *module)
{
    if (!W.exe_path[0] || strcmp(module, W.exe_path) != 0)
        return;
    load_executable();
    const char *file;
    uint32_t line;
    if (W.lines && flamme_lines_lookup(W.lines, vaddr, &file, &line) &&
        flamme_pw_frame_line(W.pw, id, line, file) != 0)
        W.failed = 1;
}

/* Frame id for addr, emitting its FRAME record the first time. callee_facts
 * are the facts of the frame this one called (0 for the leaf): glibc ships
 * without .symtab, so its static thread roots have no symbol, but the
 * caller of main() is by construction __libc_start_call_main and the caller
 * of our trampoline is start_thread. Sets *facts. Returns UINT32_MAX on
 * allocation failure. */
static uint32_t frame_id(uint64_t addr, uint8_t callee_facts, uint8_t *facts)
{
    int is_new;
    uint32_t id = flamme_dedup_frame(W.dedup, addr, &is_new);
    if (id == UINT32_MAX)
        return id;
    if (id >= W.fact_cap) {
        uint32_t nc = W.fact_cap ? W.fact_cap * 2 : 4096;
        while (nc <= id)
            nc *= 2;
        uint8_t *a = realloc(W.fact, nc);
        if (!a)
            return UINT32_MAX;
        W.fact = a;
        memset(W.fact + W.fact_cap, 0, nc - W.fact_cap);
        W.fact_cap = nc;
    }
    if (is_new) {
        /* The wall clock (vDSO), read twice a new frame: the CPU clock is a
         * system call, ~1.3 us each on a microVM, against the few us a
         * frame's naming takes. */
        uint64_t t0 = flamme_now_sigsafe();
        const char *fn = "", *mod = "";
        uint64_t off = 0;
        sym_lookup(addr, &fn, &mod, &off);
        /* Called from a signal's kernel frame, a frame is named by the
         * byte before its address: glibc's unwind rows for the trampoline
         * start there too. */
        if (!*fn && H.sigreturn && addr + 1 - H.sigreturn < 10)
            fn = "__restore_rt"; /* libc's symbol has no size */
        else if (!*fn && (callee_facts & FR_MAIN))
            fn = "__libc_start_call_main";
        else if (!*fn && (callee_facts & FR_HIDDEN))
            fn = "start_thread";
        uint8_t f = 0;
        /* Only the trampoline is hidden, by name: when the agent is linked
         * into the program (OCaml library) its module is the executable. */
        if (H.hidden_fn && strcmp(fn, H.hidden_fn) == 0)
            f |= FR_HIDDEN;
        else if (strcmp(fn, "flamme_dl_open_wrapped") == 0)
            f |= FR_AGENT;
        if (flamme_is_thread_root(fn, strlen(fn)))
            f |= FR_ROOT;
        if (strcmp(fn, "main") == 0)
            f |= FR_MAIN;
        if (strcmp(mod, "[vdso]") == 0)
            f |= *fn ? FR_VDSO_NAMED : FR_VDSO_ANON;
        W.fact[id] = f;
        if (flamme_pw_frame(W.pw, id, addr, off, fn, mod) != 0)
            W.failed = 1;
        frame_line(id, off, mod);
        W.naming_ns += flamme_now_sigsafe() - t0;
    }
    *facts = W.fact[id];
    return id;
}

/* Takes the snapshot t of slot i: a thread new in the slot starts with
 * nothing written of it. */
static struct wslot *slot_seen(int i, const struct flamme_writer_thread *t)
{
    struct wslot *w = &ws[i];
    if (w->t.tid != t->tid || w->t.start_ns != t->start_ns) {
        w->lost_seen = 0;
        w->announced = 0;
        w->domain = -1;
        w->pace_ns = 0;
        /* Memory as deep as the stacks of the threads alive, not of every
         * thread the slot ever had. */
        flamme_intern_thread_free(&w->last);
    }
    w->t = *t;
    return w;
}

/* Announces (or re-announces, when its domain becomes known) the thread of
 * slot i. */
static void announce(int i, int32_t domain)
{
    struct wslot *s = &ws[i];
    if (s->announced && (domain < 0 || domain == s->domain))
        return;
    const char *fn = "", *mod = "";
    uint64_t off;
    uint8_t kind = FLAMME_THREAD_C;
    if (s->t.is_main)
        kind = FLAMME_THREAD_MAIN;
    else if (sym_lookup(s->t.start_routine, &fn, &mod, &off) == 1) {
        if (strcmp(fn, "domain_thread_func") == 0)
            kind = FLAMME_THREAD_DOMAIN;
        else if (strcmp(fn, "caml_thread_start") == 0)
            kind = FLAMME_THREAD_SYSTHREAD;
        else if (strcmp(fn, "backup_thread_func") == 0)
            kind = FLAMME_THREAD_BACKUP;
        else if (strcmp(fn, "caml_thread_tick") == 0)
            kind = FLAMME_THREAD_TICK;
    }
    if (domain >= 0)
        s->domain = domain;
    if (!s->announced) {
        W.threads++;
        /* A thread keeps its serial across the segments of a run; a new
         * thread in the slot gets the next one. */
        if (!s->serial || s->serial_tid != s->t.tid || s->serial_start != s->t.start_ns) {
            s->serial = ++next_serial;
            s->serial_tid = s->t.tid;
            s->serial_start = s->t.start_ns;
        }
    }
    s->announced = 1;
    if (flamme_pw_thread_serial(W.pw, (uint32_t)s->t.tid, s->serial, kind, s->domain,
                                s->t.start_ns, s->t.is_main ? "main" : fn) != 0)
        W.failed = 1;
}

/* INFO alloc_method: set once before the start (flamme_writer_alloc_method),
 * read by the writer thread it starts. */
static const char *alloc_method = "memprof";

void flamme_writer_alloc_method(const char *method)
{
    alloc_method = method;
}

/* INFO alloc_rate / alloc_live / alloc_method of the current file. */
static void write_alloc_info(double rate, int live)
{
    char v[40];
    snprintf(v, sizeof v, "%.17g", rate);
    if (flamme_pw_info(W.pw, "alloc_rate", v) != 0 ||
        flamme_pw_info(W.pw, "alloc_live", live ? "1" : "0") != 0 ||
        flamme_pw_info(W.pw, "alloc_method", alloc_method) != 0)
        W.failed = 1;
    W.alloc_info = 1;
}

/* Raw-stack cache: the frame addresses of a sample, hashed whole, map to
 * the node interning gave them, so a stack seen before that changed in many
 * frames since its slot's last one (RAW_CACHE_FROM) costs one hash over its
 * words instead of a lookup or two per frame changed. Two independent
 * 64-bit hashes and the length make a false match vanishingly unlikely. */
struct rawent {
    uint64_t h1, h2;
    uint32_t n, sid;  /* n = 0: empty */
    uint8_t root;     /* the stack ends at a thread root */
};

static void raw_hash(const uint64_t *w, uint64_t n, uint64_t *h1, uint64_t *h2)
{
    uint64_t a = 0x9E3779B97F4A7C15ull ^ n, b = 0xC2B2AE3D27D4EB4Full + n;
    for (uint64_t i = 0; i < n; i++) {
        a = (a ^ w[i]) * 0xff51afd7ed558ccdull;
        b = (b + w[i]) * 0xc4ceb9fe1a85ec53ull;
        b ^= b >> 29;
    }
    *h1 = a ^ (a >> 31);
    *h2 = b;
}

static uint64_t raw_hash_of(const void *ctx, uint32_t i)
{
    (void)ctx;
    return W.raw[i].h1;
}

/* key: the entry looked up (h1, h2, n); len unused. */
static int raw_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)ctx, (void)len;
    const struct rawent *k = key, *e = &W.raw[i];
    return e->h1 == k->h1 && e->h2 == k->h2 && e->n == k->n;
}

/* The cache entry for (h1, h2, n): a match (n != 0), or a new entry to
 * fill (n = 0; filling it makes it a match for later lookups). NULL when
 * the cache cannot grow. */
static struct rawent *raw_slot(uint64_t h1, uint64_t h2, uint32_t n)
{
    if (flamme_itab_reserve(&W.raw_tab, W.raw_n, 4096, raw_hash_of, NULL) != 0)
        return NULL;
    if (W.raw_n == W.raw_cap) {
        size_t nc = W.raw_cap ? W.raw_cap * 2 : 2048;
        struct rawent *p = realloc(W.raw, nc * sizeof *p);
        if (!p)
            return NULL;
        W.raw = p;
        W.raw_cap = nc;
    }
    struct rawent key = {h1, h2, n, 0, 0};
    uint32_t *slot = flamme_itab_probe(&W.raw_tab, h1, raw_eq, NULL, &key, 0);
    if (*slot)
        return &W.raw[*slot - 1];
    /* Claimed now, filled by the caller (n = 0 until then, which no
     * lookup matches: every n looked up is at least 1). */
    *slot = (uint32_t)W.raw_n + 1;
    W.raw[W.raw_n] = (struct rawent){0};
    return &W.raw[W.raw_n++];
}

static uint32_t frame_of(void *ctx, uint64_t addr, uint8_t callee_facts, uint8_t *facts)
{
    (void)ctx;
    return frame_id(addr, callee_facts, facts);
}

/* Node of the raw frames of one sample of slot s (FRAME and STACK_NODES
 * records for what is new), from the slot's last stack, of which it shares
 * the root-most same frames (writer/intern.h). Sets *root. UINT32_MAX on
 * failure. */
static uint32_t stack_of(int s, const uint64_t *frames, uint32_t n, uint32_t same, int *root)
{
    W.in.pw = W.pw;
    W.in.frame = frame_of;
    return flamme_intern_stack(&W.in, &ws[s].last, frames, n, same, root);
}

/* A stack that changed in fewer frames than this since its slot's last one
 * is interned from it (a lookup or two a frame changed); from this many on,
 * the raw-stack cache is asked first (a hash a frame, whatever changed):
 * it pays when a stack comes back after a big change, as a program's phases
 * do. On ocamlopt no stack of more than 64 frames ever came back (0 hits
 * in 882), so hashing every one of them was 7.5% of the writer's time. */
#define RAW_CACHE_FROM 32

/* Keeps a copy of a sample that belongs to the next segment (see rot_at).
 * Without memory it goes to the current segment rather than be lost. */
static void on_record(void *ctx, const uint64_t *rec, uint64_t nwords);

static void stash_record(int slot, const uint64_t *rec, uint64_t nwords)
{
    if (W.stash_n + nwords + 2 > W.stash_cap) {
        size_t nc = W.stash_cap ? W.stash_cap * 2 : 4096;
        while (nc < W.stash_n + nwords + 2)
            nc *= 2;
        uint64_t *a = realloc(W.stash, nc * sizeof *a);
        if (!a) {
            W.no_stash = 1;
            on_record(NULL, rec, nwords);
            W.no_stash = 0;
            return;
        }
        W.stash = a;
        W.stash_cap = nc;
    }
    W.stash[W.stash_n++] = (uint64_t)slot;
    W.stash[W.stash_n++] = nwords;
    memcpy(W.stash + W.stash_n, rec, nwords * sizeof *rec);
    W.stash_n += nwords;
}

/* Writes the stashed samples into the current segment; those that belong
 * to a later one still (a writer held up past a whole period) are stashed
 * again, unless force (the run ends: everything goes into the last). */
static void replay_stash(int force)
{
    uint64_t *st = W.stash;
    size_t n = W.stash_n;
    W.stash = NULL;
    W.stash_n = W.stash_cap = 0;
    W.rot_at = 0;
    W.no_stash = force;
    for (size_t i = 0; i < n;) {
        W.cur = (int)st[i];
        uint64_t nw = st[i + 1];
        on_record(NULL, st + i + 2, nw);
        i += 2 + nw;
    }
    W.no_stash = 0;
    free(st);
}

/* The allocation mode: a sequence number the writer compares with the
 * last it recorded (see flamme_writer_alloc_mode). */
static _Atomic uint64_t mode_seq;
static _Atomic uint64_t mode_rate_bits;
static _Atomic int mode_live;
static uint64_t mode_seen; /* the last sequence number recorded (writer thread) */
/* The last mode with a rate above 0 (a stop sets rate 0 while its
 * allocations may still be in the rings). */
static _Atomic uint64_t last_rate_bits;
static _Atomic int last_live;

void flamme_writer_alloc_mode(double rate, int live)
{
    uint64_t bits;
    memcpy(&bits, &rate, sizeof bits);
    atomic_store_explicit(&mode_rate_bits, bits, memory_order_relaxed);
    atomic_store_explicit(&mode_live, live, memory_order_relaxed);
    if (rate > 0) {
        atomic_store_explicit(&last_live, live, memory_order_relaxed);
        /* Pairs with the acquire load in alloc_mode_last. */
        atomic_store_explicit(&last_rate_bits, bits, memory_order_release);
    }
    /* Pairs with the acquire load in alloc_mode_changed. */
    atomic_fetch_add_explicit(&mode_seq, 1, memory_order_release);
}

/* The last mode with a rate above 0: returns 1 and fills rate/live, or 0
 * when allocation profiling never ran. */
static int alloc_mode_last(double *rate, int *live)
{
    uint64_t bits = atomic_load_explicit(&last_rate_bits, memory_order_acquire);
    if (!bits)
        return 0;
    memcpy(rate, &bits, sizeof *rate);
    *live = atomic_load_explicit(&last_live, memory_order_relaxed);
    return 1;
}

/* The mode to record when it changed since the last call (returns 1 and
 * fills rate/live), else 0. */
static int alloc_mode_changed(double *rate, int *live)
{
    uint64_t seq = atomic_load_explicit(&mode_seq, memory_order_acquire);
    if (seq == mode_seen)
        return 0;
    mode_seen = seq;
    uint64_t bits = atomic_load_explicit(&mode_rate_bits, memory_order_relaxed);
    memcpy(rate, &bits, sizeof *rate);
    *live = atomic_load_explicit(&mode_live, memory_order_relaxed);
    return 1;
}

/* Ring record of agent/alloc.c: ALLOC (its stack interned like a sample's,
 * but never BROKEN: a Memprof callstack ends at the outermost OCaml frame,
 * not at a thread root) or ALLOC_EVENT. */
static void on_alloc_record(int slot, uint32_t kind, const uint64_t *rec, uint64_t nwords)
{
    /* A segment opened after the mode was recorded (or while a stop
     * drains) still says how its allocations were sampled. */
    double arate;
    int alive;
    if (!W.alloc_info && alloc_mode_last(&arate, &alive))
        write_alloc_info(arate, alive);
    if (kind == FLAMME_RING_ALLOC_EVENT) {
        uint64_t time, id;
        uint8_t event;
        if (flamme_ring_alloc_event_get(rec, nwords, &time, &id, &event) == 0 &&
            flamme_pw_alloc_event(W.pw, id, event, time) != 0)
            W.failed = 1;
        return;
    }
    struct flamme_ring_alloc ra;
    if (flamme_ring_alloc_get(rec, nwords, &ra) != 0)
        return;
    struct flamme_alloc a;
    memset(&a, 0, sizeof a);
    a.domain = ra.domain;
    announce(slot, a.domain);
    int root;
    a.stack_id = ra.n > FLAMME_MAX_STACK_FRAMES
                     ? UINT32_MAX
                     : stack_of(slot, ra.frames, (uint32_t)ra.n,
                                flamme_intern_shared(&ws[slot].last, ra.frames, (uint32_t)ra.n), &root);
    if (a.stack_id == UINT32_MAX) {
        W.failed = 1;
        return;
    }
    a.tid = (uint32_t)ws[slot].t.tid;
    a.serial = ws[slot].serial;
    /* A callstack the runtime lost is no stack at all: BROKEN, so that
     * every view names it instead of showing a bare thread. */
    a.flags = ra.truncated == FLAMME_ALLOC_LOST ? FLAMME_SAMPLE_BROKEN
              : ra.truncated                    ? FLAMME_SAMPLE_TRUNCATED
                                                : 0;
    a.time_ns = ra.time;
    a.id = ra.id;
    a.n_samples = ra.n_samples;
    a.size_words = ra.size_words;
    a.heap = ra.heap;
    a.source = ra.source;
    a.rate = ra.rate;
    if (flamme_pw_alloc(W.pw, &a) != 0)
        W.failed = 1;
}

/* Ring callback: one sample record -> FRAME/STACK records as needed + SAMPLE. */
static void on_record(void *ctx, const uint64_t *rec, uint64_t nwords)
{
    (void)ctx;
    int s = W.cur;
    W.records++;
    uint32_t kind = flamme_ring_kind(rec[0]);
    if (kind == FLAMME_RING_ALLOC || kind == FLAMME_RING_ALLOC_EVENT) {
        on_alloc_record(s, kind, rec, nwords);
        return;
    }
    struct flamme_ring_sample rs;
    if (flamme_ring_sample_get(rec, nwords, &rs) != 0)
        return;
    uint32_t flags = rs.flags;
    uint64_t t = rs.time;
    uint32_t weight = rs.weight;
    int32_t domain = rs.domain;
    uint64_t n = rs.n;
    const uint64_t *frames = rs.frames;
    /* A sample from past the segment's end waits for the next segment,
     * even when the sweep that drains it began before that end. */
    if (W.period_ns && !W.no_stash && t >= W.seg_end) {
        if (!W.rot_at)
            W.rot_at = W.seg_end;
        stash_record(s, rec, nwords);
        return;
    }
    announce(s, domain);
    if (n > FLAMME_MAX_STACK_FRAMES) {
        W.failed = 1;
        return;
    }
    uint32_t same = flamme_intern_shared(&ws[s].last, frames, (uint32_t)n);
    uint64_t h1 = 0, h2 = 0;
    struct rawent *e = NULL;
    if (n - same >= RAW_CACHE_FROM) {
        raw_hash(frames, n, &h1, &h2);
        e = raw_slot(h1, h2, (uint32_t)n);
    }
    uint32_t sid;
    int root;
    ws[s].work++;
    ws[s].weight += weight;
    if (e && e->n) {
        sid = e->sid;
        root = e->root;
    } else {
        sid = stack_of(s, frames, (uint32_t)n, same, &root);
        ws[s].work += W.in.named;
        if (sid == UINT32_MAX) {
            W.failed = 1;
            return;
        }
        if (e)
            *e = (struct rawent){h1, h2, (uint32_t)n, sid, (uint8_t)root};
    }
    /* A stack is whole exactly when it ends at a thread root: a walk that
     * stopped "cleanly" anywhere else (a zero rbp or return address left by
     * code without frame pointers, a forged frame) is broken too, so that
     * every verb and export marks it. */
    if (root)
        flags &= ~FLAMME_SAMPLE_BROKEN;
    else if (!(flags & FLAMME_SAMPLE_TRUNCATED))
        flags |= FLAMME_SAMPLE_BROKEN;
    if (flamme_pw_sample_serial(W.pw, sid, (uint32_t)ws[s].t.tid, ws[s].serial, weight, domain, flags,
                                t) != 0)
        W.failed = 1;
    W.samples++;
}

/* Libraries loaded or unloaded (dlopen/dlclose): the agent's interposers
 * bump maps_gen; loads that bypass them (a bare library name is forwarded
 * untouched, agent/dl.c) show in the loader's own counters. */
static _Atomic uint64_t maps_gen;
/* The loader's load count as of the last check (or the writer's start):
 * flamme_writer_loader_check builds rows only when it moved. */
static _Atomic uint64_t loader_adds_checked;

static int phdr_counts(struct dl_phdr_info *info, size_t size, void *data)
{
    uint64_t *c = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1; /* the counters are the same in every entry: one is enough */
}

/* The loader's count of objects loaded so far (dl_iterate_phdr's
 * dlpi_adds). */
static uint64_t loader_adds(void)
{
    uint64_t c[2] = {0, 0};
    dl_iterate_phdr(phdr_counts, c);
    return c[0];
}

/* The loader's counts (adds, subs) and maps_gen when the mappings were
 * last read: by flamme_writer_start (libraries_seen), then by
 * follow_libraries. */
static uint64_t seen_gen, seen[2];

/* 1 if libraries came or went (the loader's counts, or maps_gen that
 * flamme_writer_libraries_changed moves) since the last call, which this
 * one now counts as seen; 0 otherwise. */
static int libraries_changed(void)
{
    uint64_t c[2] = {seen[0], seen[1]};
    dl_iterate_phdr(phdr_counts, c);
    /* Pairs with the release add in flamme_writer_libraries_changed. */
    uint64_t gen = atomic_load_explicit(&maps_gen, memory_order_acquire);
    if (gen == seen_gen && c[0] == seen[0] && c[1] == seen[1])
        return 0;
    seen_gen = gen;
    seen[0] = c[0];
    seen[1] = c[1];
    return 1;
}

/* Before the start reads the mappings (the unwind tables of every
 * module, and the symbolizer's when it is made): a first sweep that
 * found the counts unset re-read every mapping of a short process for
 * nothing. A symbolizer kept from an earlier profile re-reads them here
 * if libraries came or went meanwhile. */
static void libraries_seen(void)
{
    if (libraries_changed() && W.syms)
        flamme_symtab_refresh(W.syms);
}

/* Re-reads the mappings for the symbolizer and the unwind rows when
 * libraries came or went since the last sweep, before the rings are
 * drained: frames in a new library are named from the start. */
static void follow_libraries(void)
{
    if (!libraries_changed())
        return;
    flamme_symtab_refresh(W.syms);
    flamme_cfi_add_from_maps(NULL, W.self_module);
}

/* The writer's share of the agent's CPU budget (agent/budget.h: the
 * handler has FLAMME_BUDGET, 2% by default, of the program's time): 1% of
 * the periods its samples stand for, saved up to WRITER_BALANCE_MAX_NS
 * (through a shallow phase, for a deep one after). What its sweeps cost
 * beyond it (draining, interning, symbolizing, compressing, and waking up
 * for them; not the executable's symbols and line table, read once) is charged to
 * the budgets of the threads whose samples made the work, in proportion to
 * it: their handlers then shorten more samples, and a shortened stack costs
 * the writer less (deep recursion: hundreds of new frames a sample). */
#define WRITER_BUDGET_PCT 1
#define WRITER_BALANCE_MAX_NS 20000000
/* What the writer's share starts a profile with. Its fixed costs (waking
 * every 20 ms, the first chunks, naming the first frames of each library)
 * come before the samples that pay for them: charged to the handlers,
 * they took a short run's whole budget, and a 0.05-0.3 s program with
 * 120-deep stacks at 999 Hz kept 6-25% of its stacks whole. At most this
 * much more of the writer's time per profile is not charged. */
#define WRITER_START_CREDIT_NS 2000000

/* After a sweep over slots 0..hwm-1, which took sweep_ns of the writer's
 * CPU. */
static void budget_sweep(int hwm, uint64_t sweep_ns)
{
    uint64_t work = 0, weight = 0;
    for (int i = 0; i < hwm; i++) {
        work += ws[i].work;
        weight += ws[i].weight;
    }
    uint64_t period = H.hz > 0 ? 1000000000u / (unsigned)H.hz : 0;
    W.wbal += (int64_t)(weight * period * WRITER_BUDGET_PCT / 100) - (int64_t)sweep_ns;
    if (W.wbal > WRITER_BALANCE_MAX_NS)
        W.wbal = WRITER_BALANCE_MAX_NS;
    if (W.wbal < 0 && work && H.charge_budget) {
        uint64_t over = (uint64_t)-W.wbal;
        for (int i = 0; i < hwm; i++)
            if (ws[i].work)
                H.charge_budget(i, (uint64_t)((double)over * (double)ws[i].work / (double)work));
        W.charged_ns += over;
        W.wbal = 0;
    }
    for (int i = 0; i < hwm; i++)
        ws[i].work = ws[i].weight = 0;
}

/* Keeps a ring's consumed pages mapped while it comes round within 2 s
 * (common/ring.h, keep_pages), measured over a second or more of sweeps, or
 * as soon as it came round within one: a thread sampled with deep stacks
 * fills a 2 MiB ring in ~0.4 s (ocamlopt at 999 Hz), and giving its pages
 * back cost a TLB shootdown per drain and a page fault in the handler per
 * page. A slower ring gives them back. */
static void ring_pace(struct wslot *s, struct flamme_ring *r, uint64_t now)
{
    if (!s->pace_ns || now < s->pace_ns || r->read_pos < s->pace_pos) {
        s->pace_ns = now;
        s->pace_pos = r->read_pos;
        return;
    }
    uint64_t dt = now - s->pace_ns;
    uint64_t words = r->read_pos - s->pace_pos;
    if (dt < 1000000000u && words <= r->mask)
        return;
    r->keep_pages = (double)words * 2e9 >= (double)(r->mask + 1) * (double)dt;
    s->pace_ns = now;
    s->pace_pos = r->read_pos;
}

/* One sweep over all slots: drain rings, report losses, retire dead threads. */
static void rotate(void);

static void sweep(void)
{
    uint64_t t0 = flamme_now_sigsafe();
    if (W.period_ns && !W.rot_at && !W.final && t0 >= W.seg_end)
        W.rot_at = W.seg_end;
    uint64_t cpu0 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    uint64_t between = W.cpu_mark && cpu0 > W.cpu_mark ? cpu0 - W.cpu_mark : 0;
    uint64_t lines0 = flamme_lines_run_ns(W.lines), setup0 = W.setup_ns;
    uint64_t parse0 = flamme_symtab_parse_ns(W.syms), naming0 = W.naming_ns;
    follow_libraries();
    int hwm = H.threads_hwm();
    for (int i = 0; i < hwm; i++) {
        /* A dead thread's slot is ours to drain only once taken (its thread
         * may recycle it itself when no writer runs); while a segment
         * closes it is drained without being taken. */
        struct flamme_writer_thread t;
        int st = H.thread(i, !W.rot_at, &t);
        if (st == FLAMME_WT_NONE)
            continue;
        int taken = st == FLAMME_WT_TAKEN;
        struct wslot *s = slot_seen(i, &t);
        W.cur = i;
        if (!s->announced)
            announce(i, -1);
        if (t.ring) {
            flamme_ring_drain(t.ring, on_record, NULL);
            ring_pace(s, t.ring, t0);
        }
        uint64_t lost = atomic_load_explicit(t.lost, memory_order_relaxed);
        if (lost != s->lost_seen) {
            if (flamme_pw_lost_serial(W.pw, (uint32_t)t.tid, s->serial, lost - s->lost_seen) != 0)
                W.failed = 1;
            W.lost += lost - s->lost_seen;
            s->lost_seen = lost;
        }
        /* While a segment closes, a dead thread's slot stays DEAD (drained,
         * not taken: only the writer drains while it runs), so the samples
         * the stash holds for it keep their thread until replayed. */
        if (taken && W.rot_at) {
            /* Its last samples went to the stash in this very drain: it
             * stays DEAD (only this writer takes DEAD slots while it runs). */
            H.thread_done(i, 1);
        } else if (taken) {
            if (flamme_pw_thread_end_serial(W.pw, (uint32_t)t.tid, s->serial, t.end_ns) != 0)
                W.failed = 1;
            H.thread_done(i, 0);
        }
    }
    /* GC records, deferred arming, the engine's review. */
    if (H.sweep(W.pw) != 0)
        W.failed = 1;
    double arate;
    int alive;
    if (alloc_mode_changed(&arate, &alive) && arate > 0)
        write_alloc_info(arate, alive);
    if (W.rot_at && !W.final && t0 >= W.rot_at + ROTATE_GRACE_NS)
        rotate();
    uint64_t now = flamme_now_sigsafe();
    /* Libraries loaded since (dlopen) get their unwind tables too. */
    if (now - W.last_cfi_ns >= CFI_RESCAN_NS) {
        flamme_cfi_add_from_maps(NULL, W.self_module);
        W.last_cfi_ns = now;
    }
    uint64_t named_flush_ns = 0;
    if (flamme_pw_pending(W.pw) >= CHUNK_MAX_RAW ||
        (flamme_pw_pending(W.pw) > 0 && now - W.last_chunk_ns >= CHUNK_INTERVAL_NS)) {
        size_t pending = flamme_pw_pending(W.pw), named = flamme_pw_pending_named(W.pw);
        uint64_t f0 = named ? flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) : 0;
        if (flamme_pw_flush(W.pw) != 0)
            W.failed = 1;
        /* Compressing the new frames' names is part of naming them. */
        if (named)
            named_flush_ns = (uint64_t)((double)(flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - f0) *
                                        (double)named / (double)pending);
        W.last_chunk_ns = now;
    }
    /* The line table's units, made on first use, are a one-time cost like
     * the rest of the executable's (setup_ns, load_executable), and so is
     * every module's symbol table, read when a frame first lands in it:
     * charged, a short run's libc and loader symbols read cold (no kept
     * copy) cost 2-4 ms its handlers then took out of its stacks. So is
     * naming a new frame (naming_ns, which holds most of those, hence the
     * larger of the two): charged, a 0.1 s compile at 999 Hz beside
     * another job had 2-13% of its 70-105-frame stacks shortened in 3 of 14
     * runs, to save nothing (its 550 frames are named whether its stacks
     * are whole or not). And so is the share of a chunk's compression that
     * its FRAME and FRAME_LINE records take (named_flush_ns, by their
     * bytes): charged, a 0.2 s program through 3,240 functions at 999 Hz
     * (tests/unwind's manyfns), whose one chunk of ~270 KB is nearly all
     * names and took 2-4 ms to compress, kept 33-90% of its stacks whole
     * in about half its runs. */
    uint64_t once_ns = flamme_lines_run_ns(W.lines) - lines0 + (W.setup_ns - setup0) +
                       (flamme_symtab_parse_ns(W.syms) - parse0);
    if (W.naming_ns - naming0 > once_ns)
        once_ns = W.naming_ns - naming0;
    once_ns += named_flush_ns;
    uint64_t cpu1 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    uint64_t sweep_ns = cpu1 - cpu0 + between;
    W.cpu_mark = cpu1;
    budget_sweep(hwm, sweep_ns > once_ns ? sweep_ns - once_ns : 0);
}

/* The writer's doorbell: an eventfd that handlers ring when a ring is
 * half full (write(2) is async-signal-safe), so deep stacks at high rates
 * are drained before rings overflow. -1 while no writer runs. */
static _Atomic int wake_fd = -1;
/* What wake_fd was when made (written before wake_fd is published); the
 * previous run's doorbell, kept open one run longer (see writer_stop). */
static struct flamme_fd_id wake_id, old_wake_id;

/* Set by the writer while it waits longer than DRAIN_INTERVAL_MS (its
 * sweeps drained nothing); taken by the first record after that
 * (flamme_writer_activity_sigsafe). Relaxed: a hint; the ring's own
 * release/acquire orders the data, and a missed hint costs one wait. */
static _Atomic int writer_idle;

void flamme_writer_activity_sigsafe(void)
{
    if (atomic_load_explicit(&writer_idle, memory_order_relaxed) &&
        atomic_exchange_explicit(&writer_idle, 0, memory_order_relaxed)) {
        int e = errno; /* callers in normal context too (Memprof callbacks) */
        flamme_writer_wake_sigsafe();
        errno = e;
    }
}

void flamme_writer_wake_sigsafe(void)
{
    /* Pairs with the release store in flamme_writer_start. */
    int fd = atomic_load_explicit(&wake_fd, memory_order_acquire);
    /* A number the program closed and reused is never written to. */
    if (fd >= 0 && flamme_fd_same_sigsafe(fd, &wake_id)) {
        uint64_t one = 1;
        /* The system call itself: libc's write is the agent's interposer
         * (agent/blocking.c), whose frame, descriptor lookup and signal
         * hold have no place in a handler that may have only
         * CRAMPED_STACK_NEED bytes of alternate stack left. */
        long r = syscall(SYS_write, fd, &one, sizeof one);
        (void)r; /* EAGAIN: the doorbell is already ringing */
    }
}

/* How the process is ending; set (relaxed: the stop or finish request that
 * follows orders it before finalize reads it) by the agent's exit paths. */
static _Atomic int end_how = FLAMME_EXIT_STOPPED, end_code;

void flamme_writer_set_end_sigsafe(int how, int code)
{
    atomic_store_explicit(&end_how, how, memory_order_relaxed);
    atomic_store_explicit(&end_code, code, memory_order_relaxed);
}

/* The EXIT record for how the process is ending. */
static void write_exit_at(int how, int code, uint64_t until);

static void write_exit(void)
{
    write_exit_at(atomic_load_explicit(&end_how, memory_order_relaxed),
                  atomic_load_explicit(&end_code, memory_order_relaxed), flamme_now_sigsafe());
}

/* The closing SEGMENT record (continuous profiles), then EXIT. */
static void write_exit_at(int how, int code, uint64_t until)
{
    if (W.period_ns && flamme_pw_segment(W.pw, W.seq, W.seg_from, until, W.period_ns) != 0)
        W.failed = 1;
    char d[160];
    switch (how) {
    case FLAMME_EXIT_EXIT:
        snprintf(d, sizeof d, "exit(%d)", code);
        break;
    case FLAMME_EXIT__EXIT:
        snprintf(d, sizeof d, "_exit(%d)", code);
        break;
    case FLAMME_EXIT_SIGNAL: {
        const char *abbrev = sigabbrev_np(code);
        snprintf(d, sizeof d, "killed by signal %d (SIG%s); the profile was completed first", code,
                 abbrev ? abbrev : "?");
        break;
    }
    case FLAMME_EXIT_EXEC:
        snprintf(d, sizeof d, "exec: the process image was replaced");
        break;
    case FLAMME_EXIT_LAST_THREAD:
        snprintf(d, sizeof d, "the main thread called pthread_exit and the last thread ended "
                              "(exit status 0)");
        break;
    case FLAMME_EXIT_SEGMENT:
        snprintf(d, sizeof d, "segment %u ended; the run goes on in segment %u", (unsigned)W.seq,
                 (unsigned)W.seq + 1);
        break;
    default:
        snprintf(d, sizeof d, "profiling stopped; the program went on");
        how = FLAMME_EXIT_STOPPED;
        break;
    }
    if (flamme_pw_exit(W.pw, (uint8_t)how, code, until, d) != 0)
        W.failed = 1;
}

static void write_totals_info(void);

/* The writer's CPU time this run so far: from the writer thread, its own
 * clock included; from any other thread (a stop, after the join) what the
 * ended writer threads used. */
static uint64_t writer_cpu_ns(void)
{
    return W.cpu_done_ns + (W.running ? flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) : 0);
}

/* Completes the file: the handler-cost INFO, the END record, close.
 * Writer thread (finish) or the stopping thread after the join (stop).
 * Returns 0, or -1 if the profile could not be written completely. */
static int finalize(void)
{
    if (W.closed)
        return W.failed ? -1 : 0;
    W.closed = 1;
    /* Compressed and written before INFO writer_ns, and its CPU time
     * added there (the writer's own clock stopped counting when its loop
     * ended), so that the profile's last chunk (in a short program, nearly
     * all of it) counts among the agent's costs; only INFO, EXIT and END
     * are left for close. */
    uint64_t c0 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (flamme_pw_flush(W.pw) != 0)
        W.failed = 1;
    /* Every frame is named now: the line rows the run made, for the next
     * process of this executable. */
    flamme_lines_keep(W.lines);
    if (!W.running)
        W.cpu_done_ns += flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - c0;
    write_totals_info();
    write_exit();
    if (flamme_pw_close(W.pw, W.samples, W.lost, flamme_now_sigsafe(), W.threads) != 0)
        W.failed = 1;
    W.pw = NULL;
    return W.failed ? -1 : 0;
}

/* The host's INFO records (handler cost and budget, GC hook pauses,
 * engines), written as a profile (or segment) is completed. */
static void write_totals_info(void)
{
    H.end_info(W.pw, !W.rot_at);
    char buf[96];
    snprintf(buf, sizeof buf, "%llu %llu %llu %llu", (unsigned long long)writer_cpu_ns(),
             (unsigned long long)W.charged_ns,
             (unsigned long long)(W.setup_ns + flamme_lines_run_ns(W.lines) - W.lines_ns0 +
                                  flamme_symtab_parse_ns(W.syms) - W.parse_ns0),
             (unsigned long long)W.start_ns);
    if (flamme_pw_info(W.pw, "writer_ns", buf) != 0)
        W.failed = 1;
    /* The program's CPU time, for the agent's share of it: the samples'
     * weight says little of a run that took few. */
    uint64_t proc = flamme_cpu_ns_sigsafe(CLOCK_PROCESS_CPUTIME_ID);
    snprintf(buf, sizeof buf, "%llu",
             (unsigned long long)(proc > W.proc_cpu0 ? proc - W.proc_cpu0 : 0));
    if (flamme_pw_info(W.pw, "process_cpu_ns", buf) != 0)
        W.failed = 1;
}

/* flamme_writer_sync: requests counted up by callers, sweeps done
 * counted by the writer, under sync_mu. */
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_cv = PTHREAD_COND_INITIALIZER;
static uint64_t sync_req, sync_done;

/* The wait before the next sweep (ms): DRAIN_INTERVAL_MS after a sweep that
 * drained records, or without a doorbell (nothing else would wake the
 * writer for a ring filling up); else twice the last, at most
 * DRAIN_IDLE_MAX_MS, and never past the current segment's end. */
static int next_interval(int last, int drained, int doorbell)
{
    if (drained || !doorbell)
        return DRAIN_INTERVAL_MS;
    int ms = last * 2 > DRAIN_IDLE_MAX_MS ? DRAIN_IDLE_MAX_MS : last * 2;
    if (W.period_ns) {
        uint64_t now = flamme_now_sigsafe();
        uint64_t left = W.seg_end > now ? (W.seg_end - now) / 1000000u + 1 : 0;
        if (W.rot_at || left < DRAIN_INTERVAL_MS)
            return DRAIN_INTERVAL_MS;
        if (left < (uint64_t)ms)
            ms = (int)left;
    }
    return ms;
}

/* Held by the writer thread through each sweep and its end (finalize
 * included), and by a fork's prepare handler while the agent follows forks
 * (flamme_writer_fork_prepare): a fork child then copies the writer's
 * tables (symbols, line tables, interned stacks) between two sweeps, never
 * half changed. */
static pthread_mutex_t sweep_mu = PTHREAD_MUTEX_INITIALIZER;

static void *writer_main(void *arg)
{
    (void)arg;
    W.running = 1;
    W.cpu_mark = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    int fd = atomic_load_explicit(&wake_fd, memory_order_acquire);
    int interval = DRAIN_INTERVAL_MS;
    /* Pairs with the release stores in flamme_writer_stop / _finish_sigsafe. */
    while (!atomic_load_explicit(&W.stop, memory_order_acquire) &&
           !atomic_load_explicit(&W.finish, memory_order_acquire)) {
        pthread_mutex_lock(&sync_mu);
        uint64_t req = sync_req;
        pthread_mutex_unlock(&sync_mu);
        uint64_t records = W.records;
        pthread_mutex_lock(&sweep_mu);
        sweep();
        pthread_mutex_unlock(&sweep_mu);
        pthread_mutex_lock(&sync_mu);
        if (sync_done < req) {
            sync_done = req;
            pthread_cond_broadcast(&sync_cv);
        }
        pthread_mutex_unlock(&sync_mu);
        /* The program closed our doorbell (a close-everything loop) or
         * reused its number: sweep on the timer alone, and never read what
         * may now be the program's data. */
        if (fd >= 0 && !flamme_fd_same_sigsafe(fd, &wake_id))
            fd = -1;
        interval = next_interval(interval, W.records != records, fd >= 0);
        atomic_store_explicit(&writer_idle, interval > DRAIN_INTERVAL_MS, memory_order_relaxed);
        /* The system calls themselves, not libc's poll and read: in the
         * agent's library those are its interposers (agent/blocking.c),
         * which are for the program's waits, not the writer's. */
        struct pollfd p = {fd, POLLIN, 0};
        if (syscall(SYS_poll, &p, (nfds_t)(fd >= 0), interval) > 0 &&
            (p.revents & POLLIN)) {
            uint64_t v;
            long r = syscall(SYS_read, fd, &v, sizeof v);
            (void)r;
        }
    }
    atomic_store_explicit(&writer_idle, 0, memory_order_relaxed);
    pthread_mutex_lock(&sweep_mu);
    sweep(); /* final drain: sampling has stopped */
    if (W.period_ns) {
        /* The run ends within a segment's grace: its last samples stay in
         * it, and the threads held for them end in it too. */
        replay_stash(1);
        W.final = W.no_stash = 1;
        sweep();
        W.final = W.no_stash = 0;
    }
    /* Its CPU time is counted now: a stop finalizes after the join. */
    W.cpu_done_ns = writer_cpu_ns();
    W.running = 0;
    if (atomic_load_explicit(&W.finish, memory_order_acquire)) {
        finalize();
        /* Pairs with the acquire load in flamme_writer_wait_finished_sigsafe. */
        atomic_store_explicit(&W.finished, 1, memory_order_release);
    }
    pthread_mutex_unlock(&sweep_mu);
    return NULL;
}

/* See flamme_writer_active (seq_cst: a plain flag read by exiting threads). */
static _Atomic int writer_active;

int flamme_writer_active(void)
{
    return atomic_load(&writer_active);
}

void flamme_writer_libraries_changed(void)
{
    /* Pairs with the acquire load in libraries_changed. */
    atomic_fetch_add_explicit(&maps_gen, 1, memory_order_release);
    if (atomic_load_explicit(&wake_fd, memory_order_acquire) < 0)
        return;
    flamme_cfi_add_from_maps(NULL, W.self_module);
    flamme_writer_wake_sigsafe();
}

void flamme_writer_loader_check(void)
{
    if (atomic_load_explicit(&wake_fd, memory_order_acquire) < 0)
        return;
    uint64_t adds = loader_adds();
    /* Relaxed: the count is only compared; concurrent callers that both
     * see it move both build, and the second finds every module added. */
    if (atomic_exchange_explicit(&loader_adds_checked, adds, memory_order_relaxed) != adds)
        flamme_writer_libraries_changed();
}

int flamme_writer_sync(int timeout_ms)
{
    if (atomic_load_explicit(&wake_fd, memory_order_acquire) < 0)
        return -1;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    dl.tv_sec += timeout_ms / 1000 + dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&sync_mu);
    /* A sweep that began before this request may have missed samples taken
     * just now: wait for one that reads the request. */
    uint64_t my = ++sync_req;
    flamme_writer_wake_sigsafe();
    int rc = 0;
    while (sync_done < my && rc == 0)
        rc = pthread_cond_timedwait(&sync_cv, &sync_mu, &dl);
    int ok = sync_done >= my;
    pthread_mutex_unlock(&sync_mu);
    return ok ? 0 : -1;
}

void flamme_writer_finish_sigsafe(void)
{
    /* Pairs with the writer loop's acquire load. */
    atomic_store_explicit(&W.finish, 1, memory_order_release);
    flamme_writer_wake_sigsafe();
}

int flamme_writer_wait_finished_sigsafe(int timeout_ms)
{
    /* A flag and short sleeps rather than a pipe: one descriptor fewer for
     * a close-everything loop to take away. The raw system call, not the
     * agent's own nanosleep wrapper. From 100 us doubling to 2 ms: a short
     * profile (a fork child's that ends) is done in well under a ms. */
    long step_ns = 100000, waited_ns = 0;
    while (waited_ns < timeout_ms * 1000000L) {
        if (atomic_load_explicit(&W.finished, memory_order_acquire))
            return 1;
        struct timespec ts = {0, step_ns};
        syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL);
        waited_ns += step_ns;
        if (step_ns < 2000000)
            step_ns *= 2;
    }
    return atomic_load_explicit(&W.finished, memory_order_acquire);
}

/* The profile's guard (flamme_pw_set_guard): before each chunk, the number
 * must still be our file. If the program closed it (and maybe reused the
 * number), the file is reopened by path, if it is still the same file, and
 * written on from its end; otherwise the profile stops here, said once. */
static int out_guard(int *fd)
{
    if (flamme_fd_same_sigsafe(*fd, &W.out_id))
        return 0;
    struct flamme_fd_id id;
    int nfd = flamme_open_high(W.path, O_WRONLY, &id);
    if (nfd >= 0 && id.dev == W.out_id.dev && id.ino == W.out_id.ino &&
        lseek(nfd, 0, SEEK_END) >= 0) {
        *fd = nfd;
        return 0;
    }
    if (nfd >= 0)
        flamme_close_checked(nfd, &id);
    H.warn("the program closed the profile's descriptor and %s cannot be reopened; "
                         "the profile ends here (incomplete)", W.path);
    *fd = -1;
    return -1;
}

static int spawn_writer(void);
static uint64_t build_tables(void);
/* Set in a fork child the agent profiles: the unwind tables are the
 * parent's, already built for every mapping (flamme_writer_start). */
static int tables_inherited;

/* The INFO records every profile (and segment) begins with, and the
 * opening SEGMENT record of a continuous profile's segment. */
static void write_start_info(void)
{
    char buf[32];
    flamme_pw_info(W.pw, "agent", "flamme " "1.0");
    snprintf(buf, sizeof buf, "%d", H.hz);
    flamme_pw_info(W.pw, "hz", buf);
    snprintf(buf, sizeof buf, "%d", H.depth);
    flamme_pw_info(W.pw, "depth", buf);
    flamme_pw_info(W.pw, "engine", H.engine);
    flamme_pw_info(W.pw, "mode", H.wall ? "wall" : "cpu");
    flamme_pw_info(W.pw, "unwind", H.unwind);
    if (W.cmdline)
        flamme_pw_info(W.pw, "cmdline", W.cmdline);
    char host[256];
    if (gethostname(host, sizeof host - 1) == 0) {
        host[sizeof host - 1] = 0;
        flamme_pw_info(W.pw, "hostname", host);
    }
    if (W.period_ns && flamme_pw_segment(W.pw, W.seq, W.seg_from, 0, W.period_ns) != 0)
        W.failed = 1;
    W.alloc_info = 0;
}

/* Closes the current segment at W.rot_at and opens the next one, which
 * gets the stashed samples (writer thread, within a sweep). When the next
 * file cannot be created the current segment goes on for another period
 * (said on stderr): nothing is lost. */
static void rotate(void)
{
    uint64_t at = W.rot_at;
    char path[sizeof W.path];
    int fd = H.open_segment(W.seq + 1, path, sizeof path);
    int e = errno;
    struct flamme_fd_id id;
    fd = flamme_fd_high_path(fd, path, O_WRONLY, &id);
    struct flamme_header h = {.major = FLAMME_VERSION_MAJOR, .minor = FLAMME_VERSION_MINOR,
                              .pid = (uint32_t)getpid(), .hz = (uint32_t)H.hz,
                              .start_realtime_ns = W.realtime0 + (at - W.monotonic0),
                              .start_monotonic_ns = at};
    flamme_pw *pw = fd >= 0 ? flamme_pw_open(fd, &h) : NULL;
    flamme_dedup *dd = pw ? flamme_dedup_new() : NULL;
    if (!dd) {
        if (!pw && fd >= 0)
            e = errno, close(fd);
        if (pw)
            flamme_pw_close(pw, 0, 0, 0, 0);
        H.warn("cannot create segment %u (%s): %s; segment %u goes on for another period",
               (unsigned)W.seq + 1, path, strerror(e ? e : ENOMEM), (unsigned)W.seq);
        W.seg_end += W.period_ns;
        replay_stash(0);
        return;
    }
    /* The old segment: completed up to the boundary. */
    write_totals_info();
    write_exit_at(FLAMME_EXIT_SEGMENT, 0, at);
    if (flamme_pw_close(W.pw, W.samples, W.lost, at, W.threads) != 0 || W.failed)
        H.warn("segment %s is incomplete (write error)", W.path);
    /* The new one: its own ids, its own threads (serials stay the run's). */
    W.pw = pw;
    flamme_pw_set_guard(W.pw, out_guard);
    flamme_pw_stacks_are_nodes(W.pw);
    W.out_id = id;
    snprintf(W.path, sizeof W.path, "%s", path);
    flamme_dedup_free(W.dedup);
    W.dedup = dd;
    W.raw_n = 0;
    if (W.raw_tab.slot)
        memset(W.raw_tab.slot, 0, W.raw_tab.cap * sizeof *W.raw_tab.slot);
    if (W.fact)
        memset(W.fact, 0, W.fact_cap);
    int hi = H.threads_hwm(); /* (see flamme_writer_start) */
    for (int i = 0; i < hi && i < H.max_threads; i++) {
        if (ws[i].announced)
            ws[i].announced = 0;
        if (ws[i].last.n)
            flamme_intern_thread_reset(&ws[i].last); /* its nodes were the old file's */
    }
    W.samples = W.lost = 0;
    W.threads = 0;
    W.failed = 0;
    W.seq++;
    W.seg_from = at;
    W.seg_end = at + W.period_ns;
    write_start_info();
    replay_stash(0);
    W.last_chunk_ns = flamme_now_sigsafe();
}

const char *flamme_writer_path(void)
{
    return W.path;
}

int flamme_writer_start(const struct flamme_writer_host *host, int fd, const char *path,
                        const char *cmdline)
{
    uint64_t cpu0 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    W.proc_cpu0 = flamme_cpu_ns_sigsafe(CLOCK_PROCESS_CPUTIME_ID);
    H = *host;
    flamme_cfi_set_frame_sites(H.frame_sites);
    if (ws) {
        /* A previous profile's nodes, in the slots the registry ever gave
         * out (beyond its high mark none was used), and written only where
         * there are some: a page of the 600 KB read for the first time is
         * a fault, and written in a fork child a copy (the 4,096 slots were
         * a third of a fork child's start). */
        int hi = H.threads_hwm();
        for (int i = 0; i < hi && i < H.max_threads; i++)
            if (ws[i].last.n)
                flamme_intern_thread_reset(&ws[i].last);
    } else if (!(ws = calloc((size_t)H.max_threads, sizeof *ws))) {
        H.warn("cannot start the profile writer for %s: %s", path, strerror(ENOMEM));
        close(fd);
        return -1;
    }
    /* else every slot is zero as calloc gives it: 4,096 slots are 600 KB,
     * and resetting them touched each page (152 page faults) for the few
     * threads a program has. */
    /* A profile may be started again after a stop: begin from a clean slate
     * (the symbolizer is kept: the process's code is the same). */
    flamme_symtab *keep_syms = W.syms;
    flamme_lines *keep_lines = W.lines;
    int keep_lines_tried = W.lines_tried;
    int keep_efd = W.thread ? W.old_efd : -1;
    flamme_intern_free(&W.in);
    free(W.fact);
    free(W.raw);
    flamme_itab_free(&W.raw_tab);
    free(W.stash);
    memset(&W, 0, sizeof W);
    W.wbal = WRITER_START_CREDIT_NS;
    flamme_writer_set_end_sigsafe(FLAMME_EXIT_STOPPED, 0);
    W.syms = keep_syms;
    W.lines = keep_lines;
    W.lines_tried = keep_lines_tried;
    W.lines_ns0 = flamme_lines_run_ns(W.lines);
    W.parse_ns0 = flamme_symtab_parse_ns(W.syms);
    ssize_t el = readlink("/proc/self/exe", W.exe_path, sizeof W.exe_path - 1);
    W.exe_path[el > 0 ? el : 0] = 0;
    W.old_efd = keep_efd;
    /* Threads that exist now: what they lost before this profile is not
     * its loss. */
    int hwm = H.threads_hwm();
    for (int i = 0; i < hwm; i++) {
        struct flamme_writer_thread t;
        struct wslot *w = &ws[i];
        if (H.thread(i, 0, &t) != FLAMME_WT_NONE) {
            slot_seen(i, &t);
            w->lost_seen = atomic_load_explicit(t.lost, memory_order_relaxed);
        } else {
            w->t.tid = 0;
            w->t.start_ns = 0;
            w->lost_seen = 0;
        }
        w->announced = 0;
        w->domain = -1;
        w->work = w->weight = 0;
    }
    struct flamme_header h;
    memset(&h, 0, sizeof h);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    h.major = FLAMME_VERSION_MAJOR;
    h.minor = FLAMME_VERSION_MINOR;
    h.pid = (uint32_t)getpid();
    h.hz = (uint32_t)H.hz;
    h.start_realtime_ns = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
    h.start_monotonic_ns = flamme_now_sigsafe();
    snprintf(W.path, sizeof W.path, "%s", path);
    fd = flamme_fd_high_path(fd, path, O_WRONLY, &W.out_id);
    W.pw = flamme_pw_open(fd, &h);
    if (W.pw) {
        flamme_pw_set_guard(W.pw, out_guard);
        flamme_pw_stacks_are_nodes(W.pw);
    }
    W.dedup = flamme_dedup_new();
    libraries_seen();
    if (!W.syms)
        W.syms = flamme_symtab_new();
    if (!W.pw || !W.dedup || !W.syms) {
        H.warn("cannot start the profile writer for %s: %s", path,
               strerror(errno ? errno : ENOMEM));
        /* flamme_pw_open leaves fd to us when it fails; once it succeeded,
         * closing the profile closes fd. */
        if (W.pw)
            flamme_pw_close(W.pw, 0, 0, 0, 0);
        else
            close(fd);
        W.pw = NULL;
        flamme_dedup_free(W.dedup);
        W.dedup = NULL;
        return -1;
    }
#ifndef FLAMME_LINKED
    {
        /* Our own module, from /proc/self/maps (never the loader: see
         * agent/libc_next.h). Its symbols are not read for this: parsing
         * them was a fifth of the start's 2.8 ms in a short compile. */
        const char *mod = flamme_symtab_module(W.syms, (uint64_t)(uintptr_t)flamme_writer_start);
        /* Linked into the program (the OCaml library), our module is the
         * executable, whose unwind rows a program without frame pointers
         * needs: nothing to skip then. */
        W.self_module = *mod && strcmp(mod, W.exe_path) != 0 ? mod : NULL;
    }
#else
    /* Linked by the OCaml library, the agent shares its module with the
     * program's own code: skipping it would leave a program built without
     * frame pointers with no unwind tables for its OCaml code. */
    W.self_module = NULL;
#endif
    /* Unwind tables, built before sampling starts: every library and the
     * executable, whether or not its OCaml has frame pointers: its C code
     * (stubs, the runtime) is sampled inside prologues and epilogues where
     * rbp is the caller's, and its rows are exact there. The loader's
     * count is read first: a load after it is a change. */
    atomic_store_explicit(&loader_adds_checked, loader_adds(), memory_order_relaxed);
    /* A fork child has its parent's tables, whole (no build was running
     * at the fork) for the same mappings. */
    uint64_t build_ns = tables_inherited ? 0 : build_tables();
    tables_inherited = 0;
    W.last_cfi_ns = flamme_now_sigsafe();
    W.cmdline = cmdline;
    W.realtime0 = h.start_realtime_ns;
    W.monotonic0 = h.start_monotonic_ns;
    W.period_ns = H.period_ns;
    W.seq = 1;
    W.seg_from = h.start_monotonic_ns;
    W.seg_end = W.seg_from + W.period_ns;
    write_start_info();
    W.last_chunk_ns = flamme_now_sigsafe();
    flamme_fd_window_enter(); /* common/fds.h */
    int efd = flamme_fd_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), &wake_id);
    flamme_fd_window_leave();
    if (efd < 0) {
        H.warn("cannot create the writer's eventfd: %s", strerror(errno));
        flamme_pw_close(W.pw, 0, 0, 0, 0);
        W.pw = NULL;
        return -1;
    }
    /* Pairs with the acquire loads in the handler's doorbell and the writer. */
    atomic_store_explicit(&wake_fd, efd, memory_order_release);
    W.start_ns = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - cpu0 + build_ns;
    /* The writer never takes samples: block everything so no signal meant
     * for the program lands on it. */
    int rc = spawn_writer();
    if (rc != 0) {
        H.warn("cannot start the writer thread: %s", strerror(rc));
        flamme_pw_close(W.pw, 0, 0, 0, 0);
        W.pw = NULL;
        return -1;
    }
    return 0;
}

/* The table builder's thread: its CPU time goes to *arg. */
static void *build_tables_main(void *arg)
{
    uint64_t t0 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    flamme_cfi_add_from_maps(NULL, W.self_module);
    *(uint64_t *)arg = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - t0;
    return NULL;
}

/* Builds the unwind tables of every mapped file before sampling starts,
 * on a thread of its own that the caller waits for; returns that thread's
 * CPU time (0 when built on the caller's thread, whose own clock has it).
 * Why a thread: the caller is the program's (its main thread, in the
 * constructor), and a build without kept tables mallocs and frees a few
 * hundred KB of blocks in glibc's main heap, among the program's first
 * blocks. That changed how the heap lies: under OCaml 5.5, a program whose
 * arrays above 128 words come and go had the heap's top given back to the
 * kernel and taken again at every major slice (tests/e2e/heaptrim.ml,
 * ~138,000 page faults for ~500 alone, every run without kept tables).
 * glibc gives a new thread an arena of its own; the writer thread, started
 * next, takes that arena over once the builder has ended. Where no thread
 * can be made, the caller builds them. */
static uint64_t build_tables(void)
{
    uint64_t ns = 0;
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = H.create_thread(&t, build_tables_main, &ns);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        H.join_thread(t);
    else
        flamme_cfi_add_from_maps(NULL, W.self_module);
    return ns;
}

/* Size of the file before the END an exec checkpoint wrote, or -1. */
static off_t exec_mark = -1;

/* Starts the writer thread with every signal blocked (it never takes
 * samples, and no signal meant for the program may land on it). */
static int spawn_writer(void)
{
    sigset_t all, old;
    sigfillset(&all);
    atomic_store(&writer_active, 1);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = H.create_thread(&W.thread, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        atomic_store(&writer_active, 0);
    return rc;
}

int flamme_writer_exec_checkpoint(uint64_t *samples, uint64_t *lost, uint32_t *threads)
{
    exec_mark = -1;
    /* Pairs with the writer loop's acquire load. */
    atomic_store_explicit(&W.stop, 1, memory_order_release);
    flamme_writer_wake_sigsafe();
    H.join_thread(W.thread); /* after its final sweep */
    if (flamme_pw_flush(W.pw) != 0)
        return -1;
    flamme_lines_keep(W.lines); /* as finalize: the new image may be the same program */
    off_t mark = lseek(flamme_pw_fd(W.pw), 0, SEEK_CUR);
    flamme_writer_set_end_sigsafe(FLAMME_EXIT_EXEC, 0);
    write_exit();
    *samples = W.samples;
    *lost = W.lost;
    *threads = W.threads;
    if (mark < 0 || flamme_pw_end(W.pw, W.samples, W.lost, flamme_now_sigsafe(), W.threads) != 0)
        return -1;
    exec_mark = mark;
    return 0;
}

int flamme_writer_exec_resume(void)
{
    int fd = flamme_pw_fd(W.pw);
    flamme_writer_set_end_sigsafe(FLAMME_EXIT_STOPPED, 0);
    if (exec_mark < 0 || !flamme_fd_same_sigsafe(fd, &W.out_id) || ftruncate(fd, exec_mark) != 0 ||
        lseek(fd, exec_mark, SEEK_SET) != exec_mark)
        return -1;
    atomic_store_explicit(&W.stop, 0, memory_order_release);
    return spawn_writer() == 0 ? 0 : -1;
}

int flamme_writer_stop(uint64_t *samples, uint64_t *lost, uint32_t *threads)
{
    /* Pairs with the writer loop's acquire load. */
    atomic_store_explicit(&W.stop, 1, memory_order_release);
    flamme_writer_wake_sigsafe();
    H.join_thread(W.thread);
    atomic_store(&writer_active, 0);
    H.threads_recycle_dead(); /* threads that ended after the final sweep */
    int efd = atomic_exchange_explicit(&wake_fd, -1, memory_order_acq_rel);
    *samples = W.samples;
    *lost = W.lost;
    *threads = W.threads;
    int rc = finalize();
    flamme_dedup_free(W.dedup);
    W.dedup = NULL;
    /* A handler that loaded the fd just before the exchange may still write
     * to it: keep it open until the next stop (by then no handler can hold
     * it), so such a write never lands on a file the program reopened. */
    if (W.old_efd >= 0 && flamme_fd_same_sigsafe(W.old_efd, &old_wake_id))
        close(W.old_efd);
    W.old_efd = efd;
    old_wake_id = wake_id;
    return rc;
}

int flamme_writer_empty_sigsafe(void)
{
    return W.samples == 0 && W.lost == 0;
}

void flamme_writer_fork_prepare(void)
{
    pthread_mutex_lock(&sweep_mu);
}

void flamme_writer_fork_parent(void)
{
    pthread_mutex_unlock(&sweep_mu);
}

/* Closes a descriptor the child inherited if it still is what id says
 * (the system call itself: the agent's close is its interposer). */
static void close_inherited(int fd, const struct flamme_fd_id *id)
{
    if (fd >= 0 && flamme_fd_same_sigsafe(fd, id))
        syscall(SYS_close, fd);
}

void flamme_writer_atfork_child(int follow)
{
    /* Held by the forking thread itself when the fork was prepared. */
    pthread_mutex_init(&sweep_mu, NULL);
    pthread_mutex_init(&sync_mu, NULL);
    pthread_cond_init(&sync_cv, NULL);
    if (!follow)
        return;
    /* The parent's profile, doorbell and last doorbell: the child's copies
     * of its descriptors. Its writer's objects are left as they are (the
     * child never touches those pages: they stay shared); its tables of
     * symbols and lines, consistent between two sweeps, serve the child. */
    if (W.pw)
        close_inherited(flamme_pw_fd(W.pw), &W.out_id);
    W.pw = NULL;
    W.dedup = NULL;
    close_inherited(atomic_exchange(&wake_fd, -1), &wake_id);
    close_inherited(W.old_efd, &old_wake_id);
    W.old_efd = -1;
    memset(&W.thread, 0, sizeof W.thread);
    atomic_store(&writer_active, 0);
    atomic_store(&writer_idle, 0);
    W.running = 0;
    atomic_store(&W.stop, 0);
    atomic_store(&W.finish, 0);
    atomic_store(&W.finished, 0);
    exec_mark = -1;
    sync_req = sync_done = 0;
    tables_inherited = 1;
}
