/*
 * common/profile.h — the flamme profile file format: constants, record
 * layouts, and the one writer and one reader shared by the agent and tools.
 *
 * Owns: the on-disk encoding (spec in doc/format.md; change the doc first).
 * Called by: the agent's writer thread (flamme_pw_*), every tool and the unit
 * tests (flamme_pr_* / flamme_profile_load). Context: ordinary threads only;
 * nothing here is async-signal-safe.
 *
 * File layout (all integers little-endian):
 *   file header (FLAMME_HEADER_SIZE bytes)
 *   chunk*      each: u32 magic "FLMC", u32 payload_raw_len,
 *                     u32 payload_zlen, u32 crc32(raw payload),
 *                     then payload_zlen bytes of one complete zlib stream.
 *   A raw payload is a sequence of records: u8 type, u32 body_len, body.
 *   2.x: stacks are a prefix tree of (parent node, frame) nodes and samples
 *   come in runs of varint, delta-coded samples (STACK_NODES, SAMPLES); the
 *   writer API takes whole stacks and maps them to nodes itself, or
 *   gives the caller the nodes (flamme_pw_nodes).
 *   A truncated file (process killed) decodes up to its last whole chunk.
 */
#ifndef FLAMME_COMMON_PROFILE_H
#define FLAMME_COMMON_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#define FLAMME_MAGIC "FLAMMEPF"     /* 8 bytes, no NUL in the file */
#define FLAMME_VERSION_MAJOR 2
#define FLAMME_VERSION_MINOR 0 /* 1.1: GC record; 1.2: FRAME_LINE record; 1.3: EXIT record;
                                 1.4: thread serial; 1.5: sample flag KERNEL;
                                 1.6: SEGMENT record; 1.7: ALLOC, ALLOC_EVENT;
                                 2.0: STACK_NODES and SAMPLES replace STACK and SAMPLE */
#define FLAMME_VERSION_MAJOR_OLDEST 1 /* the reader reads every file from 1.0 on */
#define FLAMME_HEADER_SIZE 64
#define FLAMME_CHUNK_MAGIC 0x434d4c46u /* "FLMC" as little-endian u32 */

/* Header: magic[8] u16 major u16 minor u32 header_size u32 pid u32 hz
 *         u64 start_realtime_ns u64 start_monotonic_ns u32 flags
 *         then zero padding to FLAMME_HEADER_SIZE. */
struct flamme_header {
    uint16_t major, minor;
    uint32_t pid;
    uint32_t hz;                 /* requested sampling rate per thread */
    uint64_t start_realtime_ns;  /* CLOCK_REALTIME at agent start */
    uint64_t start_monotonic_ns; /* CLOCK_MONOTONIC at agent start; sample times are on this clock */
    uint32_t flags;              /* reserved, 0 */
};

enum flamme_record_type {
    FLAMME_REC_INFO = 1,   /* str key, str value (str = u32 len + bytes) */
    FLAMME_REC_THREAD = 2, /* u32 tid, u8 kind, i32 domain, u64 time_ns, str name, (1.4) u32 serial;
                              re-sent when it changes */
    FLAMME_REC_FRAME = 3,  /* u32 frame_id, u64 addr, u64 offset_in_module, str function, str module */
    FLAMME_REC_STACK = 4,  /* (1.x only) u32 stack_id, u32 n, u32 frame_id[n] (leaf first) */
    FLAMME_REC_SAMPLE = 5, /* (1.x only) u32 stack_id, u32 tid, u32 weight, i32 domain, u32 flags, u64 time_ns,
                              (1.4) u32 serial */
    FLAMME_REC_LOST = 6,   /* u32 tid, u64 count, (1.4) u32 serial  (samples dropped: ring full) */
    FLAMME_REC_THREAD_END = 7, /* u32 tid, u64 time_ns, (1.4) u32 serial */
    FLAMME_REC_END = 8,    /* u64 samples, u64 lost, u64 end_monotonic_ns, u32 threads: clean end of profile */
    FLAMME_REC_GC = 9,     /* (1.1) u32 tid, i32 domain, u8 kind, u64 start_ns, u64 duration_ns */
    FLAMME_REC_FRAME_LINE = 10, /* (1.2) u32 frame_id, u32 line, str file: source position of a
                                   frame defined earlier (from the module's DWARF .debug_line) */
    FLAMME_REC_EXIT = 11,  /* (1.3) u8 how, i32 code, u64 time_ns, str detail: how the process ended */
    FLAMME_REC_SEGMENT = 12, /* (1.6) u32 seq, u64 from_ns, u64 until_ns (0: open), u64 period_ns */
    FLAMME_REC_ALLOC = 13, /* (1.7) u32 stack_id, u32 tid, u32 serial, i32 domain, u32 flags,
                              u64 time_ns, u64 id, u32 n_samples, u64 size_words, u8 heap,
                              u8 source, f64 rate: one sampled allocation (Gc.Memprof) */
    FLAMME_REC_ALLOC_EVENT = 14, /* (1.7) u64 id, u8 event, u64 time_ns: promoted / died */
    FLAMME_REC_STACK_NODES = 15, /* (2.0) varint first, varint count, count x (varint up,
                                    varint frame): node first+i = (parent first+i-up, frame) */
    FLAMME_REC_SAMPLES = 16, /* (2.0) samples: u8 tag, [varint tid, serial], [zvarint domain],
                                [varint flags], [varint weight], varint node, zvarint dt */
};

/* ALLOC: where the block was allocated, and why. */
enum flamme_alloc_heap { FLAMME_ALLOC_MINOR = 1, FLAMME_ALLOC_MAJOR = 2 };
enum flamme_alloc_source {
    FLAMME_ALLOC_NORMAL = 0,
    FLAMME_ALLOC_MARSHAL = 1,
    FLAMME_ALLOC_CUSTOM = 2,
};
/* ALLOC_EVENT kinds. */
enum flamme_alloc_event {
    FLAMME_ALLOC_PROMOTED = 1,
    FLAMME_ALLOC_DIED_MINOR = 2,
    FLAMME_ALLOC_DIED_MAJOR = 3,
};

/* EXIT record: how the profiled process ended (doc/format.md). */
enum flamme_exit_how {
    FLAMME_EXIT_EXIT = 1,   /* exit(), return from main; code = status */
    FLAMME_EXIT__EXIT = 2,  /* _exit / _Exit; code = status */
    FLAMME_EXIT_SIGNAL = 3, /* died of a signal left at its default action; code = signal */
    FLAMME_EXIT_EXEC = 4,   /* the process image was replaced */
    FLAMME_EXIT_STOPPED = 5, /* profiling stopped, the program went on */
    FLAMME_EXIT_LAST_THREAD = 6, /* main called pthread_exit, the last thread ended */
    FLAMME_EXIT_SEGMENT = 7, /* (1.6) the segment's period ended; the run goes on in the next */
};

/* GC record kinds. */
enum flamme_gc_kind {
    FLAMME_GC_MINOR = 1,       /* one domain's part of a (stop-the-world) minor collection */
    FLAMME_GC_MAJOR_SLICE = 2, /* one major GC slice of a domain */
};

/* Thread kinds (THREAD record). */
enum flamme_thread_kind {
    FLAMME_THREAD_UNKNOWN = 0,
    FLAMME_THREAD_MAIN = 1,      /* the process's initial thread (domain 0) */
    FLAMME_THREAD_DOMAIN = 2,    /* a domain's main thread (Domain.spawn) */
    FLAMME_THREAD_SYSTHREAD = 3, /* Thread.create */
    FLAMME_THREAD_C = 4,         /* created by C code */
    FLAMME_THREAD_BACKUP = 5,    /* runtime's per-domain backup thread */
    FLAMME_THREAD_TICK = 6,      /* systhreads' tick thread */
};

/* Sample flags (SAMPLE record). */
#define FLAMME_SAMPLE_TRUNCATED 0x1u /* depth limit hit: frames past the limit were dropped (root end) */
#define FLAMME_SAMPLE_BROKEN    0x2u /* walk stopped at an invalid frame pointer, not at a clean end */
#define FLAMME_SAMPLE_NO_OCAML  0x4u /* no OCaml stack ranges were usable (blocking section, no domain) */
#define FLAMME_SAMPLE_SYSCALL   0x8u /* (wall mode) the thread was blocked in a system call */
#define FLAMME_SAMPLE_GC_MINOR  0x10u /* taken during a minor collection of the thread's domain */
#define FLAMME_SAMPLE_GC_MAJOR  0x20u /* taken during a major GC slice of the thread's domain */
#define FLAMME_SAMPLE_KERNEL    0x40u /* (cpu mode) time the kernel spent on behalf of this stack */

/* What a reader accepts (doc/format.md "Limits"): no agent writes more
 * frames per stack (its --depth is at most 1,000,000), and a file's chunks
 * may not inflate to more than 64 MiB + 256 times the file's size (what
 * flamme writes inflates about 30 times at most). Past either the load fails
 * with one line: such a file was crafted, and would only cost time and memory. */
#define FLAMME_MAX_STACK_FRAMES 1048576u
#define FLAMME_MAX_INFLATE(file_bytes) ((64ull << 20) + 256ull * (uint64_t)(file_bytes))
/* The frames of the distinct stacks samples and ALLOCs name, all added up
 * (2.x: a prefix tree names deep stacks in a few bytes each); the tools'
 * own budgets per byte of file are the same. */
#define FLAMME_MAX_STACK_FRAMES_TOTAL(file_bytes) ((16ull << 20) + 4096ull * (uint64_t)(file_bytes))

/* Frame ids and stack ids are assigned by the writer, dense from 0, and each
 * is defined (FRAME / STACK record) before the first record that uses it.
 * The writer maps its callers' stack ids to nodes of its prefix tree (2.x);
 * the reader gives the stacks samples name dense ids in first-use order. */

/* ---------------------------------------------------------------- writer */

typedef struct flamme_pw flamme_pw;

/* Starts a profile on an open, writable fd (takes ownership on success:
 * closed by flamme_pw_close). Writes the file header. Returns NULL on failure
 * (errno), leaving fd open and the caller's. */
flamme_pw *flamme_pw_open(int fd, const struct flamme_header *hdr);

/* Each appends one record to the current chunk. Return 0, or -1 on a write or
 * compression error (the writer then stays failed; later calls return -1).
 * serial (1.4): the thread's identity beside its tid, from 1, never reused
 * in a profile (doc/format.md "Thread identity"); the forms without it
 * write serial 0 ("not given": the thread is known by its tid alone). */
int flamme_pw_thread_serial(flamme_pw *w, uint32_t tid, uint32_t serial, uint8_t kind,
                            int32_t domain, uint64_t time_ns, const char *name);
int flamme_pw_sample_serial(flamme_pw *w, uint32_t stack_id, uint32_t tid, uint32_t serial,
                            uint32_t weight, int32_t domain, uint32_t flags, uint64_t time_ns);
int flamme_pw_lost_serial(flamme_pw *w, uint32_t tid, uint32_t serial, uint64_t count);
int flamme_pw_thread_end_serial(flamme_pw *w, uint32_t tid, uint32_t serial, uint64_t time_ns);
int flamme_pw_info(flamme_pw *w, const char *key, const char *value);
int flamme_pw_thread(flamme_pw *w, uint32_t tid, uint8_t kind, int32_t domain, uint64_t time_ns,
                     const char *name);
int flamme_pw_thread_end(flamme_pw *w, uint32_t tid, uint64_t time_ns);
int flamme_pw_frame(flamme_pw *w, uint32_t frame_id, uint64_t addr, uint64_t offset,
                    const char *function, const char *module);
int flamme_pw_stack(flamme_pw *w, uint32_t stack_id, uint32_t n, const uint32_t *frame_ids);
/* The prefix tree itself, for a caller that keeps its own stacks' nodes
 * (the writer, per thread): the nodes of frames[0..m) (root side first)
 * under node parent (0: the empty stack), defined if new, go to
 * nodes[0..m). After flamme_pw_stacks_are_nodes, the stack ids samples and
 * allocations name are such nodes, and flamme_pw_stack fails. Return 0, or
 * -1 on allocation failure (the writer then stays failed). */
int flamme_pw_nodes(flamme_pw *w, uint32_t parent, uint32_t m, const uint32_t *frames,
                    uint32_t *nodes);
void flamme_pw_stacks_are_nodes(flamme_pw *w);
int flamme_pw_frame_line(flamme_pw *w, uint32_t frame_id, uint32_t line, const char *file);
int flamme_pw_sample(flamme_pw *w, uint32_t stack_id, uint32_t tid, uint32_t weight,
                     int32_t domain, uint32_t flags, uint64_t time_ns);
int flamme_pw_lost(flamme_pw *w, uint32_t tid, uint64_t count);
int flamme_pw_exit(flamme_pw *w, uint8_t how, int32_t code, uint64_t time_ns, const char *detail);
int flamme_pw_segment(flamme_pw *w, uint32_t seq, uint64_t from_ns, uint64_t until_ns,
                      uint64_t period_ns);
int flamme_pw_gc(flamme_pw *w, uint32_t tid, int32_t domain, uint8_t kind, uint64_t start_ns,
                 uint64_t duration_ns);

/* One sampled allocation (ALLOC, 1.7): fields as struct flamme_alloc below
 * (thread, promoted_ns and died_ns are not written). */
struct flamme_alloc;
int flamme_pw_alloc(flamme_pw *w, const struct flamme_alloc *a);
int flamme_pw_alloc_event(flamme_pw *w, uint64_t id, uint8_t event, uint64_t time_ns);

/* guard(&fd) runs before each chunk is written: it may replace the fd (the
 * old number is then left alone), or return -1 after setting it to -1 (the
 * profile fails; nothing more is written or closed). The agent uses it to
 * make sure the number is still its own file. */
void flamme_pw_set_guard(flamme_pw *w, int (*guard)(int *fd));

/* Writes END and flushes, leaving the writer open: the file is complete as
 * it stands, and a writer that goes on after truncating the file back to
 * its size before END (the agent, after a failed exec) keeps it valid.
 * Returns 0 / -1. */
int flamme_pw_end(flamme_pw *w, uint64_t samples, uint64_t lost, uint64_t end_ns,
                  uint32_t threads);

/* The descriptor the writer writes to (-1 once a guard gave up). */
int flamme_pw_fd(const flamme_pw *w);

/* Bytes of raw (uncompressed) payload in the open chunk. */
size_t flamme_pw_pending(const flamme_pw *w);

/* Of those, the bytes of FRAME and FRAME_LINE records: what naming frames
 * seen for the first time adds to the chunk (the writer's one-time costs). */
size_t flamme_pw_pending_named(const flamme_pw *w);

/* Compresses and writes the open chunk (no-op when empty). Returns 0 / -1. */
int flamme_pw_flush(flamme_pw *w);

/* Writes an END record, flushes, closes the fd, frees w.
 * Returns 0, or -1 if anything failed at any point of the profile's life. */
int flamme_pw_close(flamme_pw *w, uint64_t samples, uint64_t lost, uint64_t end_ns,
                    uint32_t threads);

/* ---------------------------------------------------------------- reader */

struct flamme_frame {
    uint64_t addr, offset;
    char *function; /* never NULL; "" when unknown */
    char *module;   /* never NULL */
    char *file;     /* never NULL; "" when the profile has no source position for it */
    uint32_t line;  /* 0 when unknown */
};

struct flamme_stack {
    uint32_t n;
    uint32_t *frames; /* frame ids, leaf first */
};

struct flamme_sample {
    uint32_t stack_id, tid, weight, flags;
    int32_t domain;
    uint64_t time_ns;
    uint32_t serial; /* 0: not given (files before 1.4) */
    uint32_t thread; /* index of its thread in flamme_profile.threads */
};

struct flamme_thread {
    uint32_t tid;
    uint32_t serial; /* with tid, the thread's identity (0: known by tid alone) */
    uint8_t kind;
    int32_t domain;
    uint64_t start_ns, end_ns; /* end_ns 0 if never ended in the file */
    char *name;
    uint64_t lost;
    /* Profiles of several processes read as one: the process's command
     * line (its INFO cmdline, owned by the profile's info), NULL otherwise.
     * Thread labels then begin with the command's name. */
    const char *command;
};

struct flamme_gc_event {
    uint32_t tid;
    int32_t domain;
    uint8_t kind; /* enum flamme_gc_kind; other values are kept as read */
    uint64_t start_ns, duration_ns;
};

/* A sampled allocation (ALLOC record) and what became of it. */
struct flamme_alloc {
    uint32_t stack_id, tid, serial, flags;
    int32_t domain;
    uint32_t thread;     /* index of its thread in flamme_profile.threads (reader) */
    uint64_t time_ns, id;
    uint32_t n_samples;
    uint64_t size_words; /* header excluded */
    uint8_t heap, source; /* enum flamme_alloc_heap / flamme_alloc_source; others kept as read */
    double rate;         /* samples per word */
    uint64_t promoted_ns, died_ns; /* from ALLOC_EVENT; 0: none (died_ns 0: alive at the end) */
};

/* Estimates from one ALLOC (doc/format.md): bytes and blocks allocated
 * that its samples stand for (unbiased for Memprof's); 0 for a rate
 * outside (0, 1]. */
static inline double flamme_alloc_bytes(const struct flamme_alloc *a)
{
    return a->rate > 0 && a->rate <= 1 ? (double)a->n_samples * 8.0 / a->rate : 0;
}
/* An ALLOC of size 0 is a heap-fill weight, not a block: no blocks. */
static inline double flamme_alloc_blocks(const struct flamme_alloc *a)
{
    return a->rate > 0 && a->rate <= 1 && a->size_words
               ? (double)a->n_samples / (a->rate * ((double)a->size_words + 1.0))
               : 0;
}

/* An ALLOC_EVENT as read: what became of block id, and when. */
struct flamme_alloc_event_rec {
    uint64_t id, time_ns;
    uint8_t event; /* enum flamme_alloc_event; others kept as read */
};

/* Gives the allocs named by events (by id) their promoted_ns / died_ns.
 * Events no alloc names are appended to *left / *nleft (its capacity
 * grown with realloc) when left is not NULL. Returns 0, or -1
 * (allocation). */
int flamme_alloc_match_events(struct flamme_alloc *allocs, size_t nallocs,
                              const struct flamme_alloc_event_rec *ev, size_t nev,
                              struct flamme_alloc_event_rec **left, size_t *nleft);

struct flamme_kv {
    char *key, *value;
};

/* A whole profile in memory. */
struct flamme_profile {
    struct flamme_header hdr;
    struct flamme_frame *frames;   size_t nframes;
    struct flamme_stack *stacks;   size_t nstacks;
    struct flamme_sample *samples; size_t nsamples;
    struct flamme_thread *threads; size_t nthreads;
    struct flamme_kv *info;        size_t ninfo;
    uint64_t lost;          /* sum of LOST records */
    int complete;           /* 1 if the END record was read */
    int truncated;          /* 1 if the file ended mid-chunk or a chunk was corrupt */
    uint64_t end_ns;        /* from END, else time of the last sample */
    struct flamme_gc_event *gc; size_t ngc; /* GC records in file order (not time order) */
    uint8_t exit_how;       /* from EXIT (enum flamme_exit_how), 0 without one */
    int32_t exit_code;
    char *exit_detail;      /* from EXIT, NULL without one */
    uint64_t file_bytes;    /* size of the file read: the tools' work budgets scale with it */
    struct flamme_alloc *allocs; size_t nallocs; /* ALLOC records in file order (1.7) */
    /* ALLOC_EVENTs whose id no ALLOC of this file has: blocks allocated in
     * an earlier segment of the run; flamme_profile_load_many matches them
     * across the files of one pid. */
    struct flamme_alloc_event_rec *alloc_orphans; size_t nalloc_orphans;
    /* From the last SEGMENT record (1.6); all 0 when the file is no segment.
     * segment_until_ns 0: the segment was cut short (use end_ns). */
    uint32_t segment_seq;
    uint64_t segment_from_ns, segment_until_ns, segment_period_ns;
    uint32_t nfiles;        /* files read into it: 1, more after flamme_profile_load_many */
    uint32_t npids;         /* merged: the processes (header pids) they came from */
    uint32_t segment_last_seq; /* merged: the last file's seq (segment_seq is the first's) */
    uint32_t segment_missing;  /* merged: seqs missing between files of one pid */
};

/* A work budget for a tool on p: base + per_byte units per byte of the file
 * (how much text, how many frame references it may expand the profile to). */
static inline uint64_t flamme_profile_budget(const struct flamme_profile *p, uint64_t base,
                                             uint64_t per_byte)
{
    return base + per_byte * p->file_bytes;
}

/* Loads a profile. Returns 0 on success (also for a truncated file: see
 * p->truncated), or -1 with one line in err ("FILE: what is wrong") for a
 * file that is not a profile, has a newer major version, or has no readable
 * header. */
int flamme_profile_load(const char *path, struct flamme_profile *p, char *err, size_t errlen);
void flamme_profile_free(struct flamme_profile *p);

/* Sorts p's threads by (tid, serial) and renumbers its samples' thread
 * indices (what a load leaves). Returns 0, or -1 (allocation). */
int flamme_profile_sort_threads(struct flamme_profile *p);

/* Loads n profiles and merges them into one (common/merge.c; rules in
 * doc/format.md "Several files read as one"); n == 1 is flamme_profile_load.
 * Returns 0, or -1 with one line in err naming the file that failed. A
 * truncated file is merged as read; *truncated_file (may be NULL) is set
 * to the first such path, else NULL. */
int flamme_profile_load_many(const char *const *paths, size_t n, struct flamme_profile *p,
                             const char **truncated_file, char *err, size_t errlen);

/* Returns 1 if the first bytes of buf look like a flamme profile. */
int flamme_is_profile(const void *buf, size_t len);

/* Reads the header at the start of the file fd (pread: its position is
 * left alone) into *hdr. Returns 0, or -1 if fd does not begin with a
 * whole flamme header. flamme_profile_writer, and the loader's own
 * decoding is the same. */
int flamme_header_read(int fd, struct flamme_header *hdr);

/* When process pid (0: this one) started, on CLOCK_MONOTONIC, in ns: its
 * /proc stat starttime (clock ticks since boot, which an exec keeps) less
 * the time the machine has spent suspended. 0 if unknown. */
uint64_t flamme_proc_start_monotonic_ns(int pid);

/* The pid of the process writing the profile at path: its header's, when
 * that process runs and started no later than the profile (not a pid the
 * kernel gave again). 0 when none (or not a profile, unreadable, a link).
 * A process that stopped profiling and runs on counts too. The agent (is a
 * file an earlier image's, before an exec) and `flamme record` (a file
 * another run writes; a child's profile still being written). */
int flamme_profile_writer(const char *path);

/* Thread lookup by tid (the first thread that had it, when the tid was
 * reused); NULL if absent. */
const struct flamme_thread *flamme_profile_thread(const struct flamme_profile *p, uint32_t tid);

/* The thread of a sample of p (never NULL for a loaded profile). */
static inline const struct flamme_thread *flamme_sample_thread(const struct flamme_profile *p,
                                                               const struct flamme_sample *s)
{
    return s->thread < p->nthreads ? &p->threads[s->thread] : NULL;
}

/* Info value by key; NULL if absent. */
const char *flamme_profile_info(const struct flamme_profile *p, const char *key);

#endif
