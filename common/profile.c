/*
 * common/profile.c — encoder and decoder of the flamme profile file format
 * (spec: doc/format.md; constants and record list: common/profile.h).
 *
 * Owns: the byte-level encoding (little-endian, written byte by byte so the
 * host's struct layout and endianness never leak into files), chunk framing,
 * zlib compression of chunks, and the in-memory struct flamme_profile.
 * Called by: the agent's writer thread (flamme_pw_*: buffers one chunk in
 * memory, compresses and writes it on flush) and by every tool / unit test
 * (flamme_profile_load: reads the whole file, decodes every intact chunk).
 * Context: ordinary threads; allocates; nothing is async-signal-safe.
 *
 * Since 2.0 the writer keeps a prefix tree of the stacks it was given
 * ((parent node, frame) -> node) and writes only the nodes a new stack adds
 * (STACK_NODES), and buffers samples into runs coded against the previous
 * sample (SAMPLES): both batches are closed into records before any other
 * record and at each flush, so every id is still defined before its use.
 * The reader reads 1.x files (STACK, SAMPLE) and 2.x ones alike and builds
 * whole stacks only for the nodes that samples or ALLOCs name.
 *
 * The loader treats the file as hostile: every length is checked against the
 * bytes that remain before it is used, ids must be dense and defined before
 * use, and decoding stops at the first damaged chunk (p->truncated).
 */
#include "common/profile.h"
#include "common/fds.h"
#include "common/bulk.h"
#include "common/hash.h"
#include "common/index_table.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* Chunk header: magic, raw_len, zlen, crc32(raw). */
#define CHUNK_HDR_SIZE 16u
/* Record header: u8 type, u32 body_len. */
#define REC_HDR_SIZE 5u
/* A writer never produces a chunk payload larger than this (it flushes
 * before); a reader refuses larger ones as corrupt, which bounds what a
 * hostile chunk header can make it allocate. */
#define MAX_CHUNK_RAW (64u << 20)
/* The writer starts a new chunk by itself once this much is pending. */
#define AUTO_FLUSH_RAW (4u << 20)
/* The chunk buffer's first size (it doubles as needed). The buffer is a
 * mapping of its own, not malloc's: it is made in the thread that starts
 * profiling, usually the main thread, and grown and freed by the writer
 * thread while the program runs. From malloc it lay in glibc's main heap
 * among the program's own blocks, and its free there in mid-run made
 * glibc give the heap's top back and take it again at every major GC
 * slice of a program whose blocks above 128 words come and go
 * (tests/e2e/heaptrim.ml: 140,000 page faults instead of 600, in 5 of 8
 * runs under the preloaded agent, 4-5 of 6 through the library). */
#define FIRST_RAW_CAP (128u << 10)
#define RAW_AHEAD ((size_t)64 << 10) /* populated ahead of the writing (reserve) */
/* Largest record body the writer accepts (a record never spans chunks). */
#define MAX_BODY (MAX_CHUNK_RAW - REC_HDR_SIZE)
/* zlib level for chunks: 1 costs about a third of the CPU of level 6 on
 * sample-heavy chunks for ~11% more bytes (measured, see doc/format.md), and
 * the writer thread runs inside the profiled program. */
#ifndef ZLEVEL
#define ZLEVEL 1
#endif

/* ------------------------------------------------------------ encoding */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* Writes all of buf, retrying short writes and EINTR. Returns 0 / -1. */
static int write_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t k = write(fd, buf, len);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        buf += k;
        len -= (size_t)k;
    }
    return 0;
}

/* The fields encode_header writes, read back (header_size and the
 * magic are the caller's to check). */
static void decode_header(const uint8_t *b, struct flamme_header *hdr)
{
    hdr->major = get_u16(b + 8);
    hdr->minor = get_u16(b + 10);
    hdr->pid = get_u32(b + 16);
    hdr->hz = get_u32(b + 20);
    hdr->start_realtime_ns = get_u64(b + 24);
    hdr->start_monotonic_ns = get_u64(b + 32);
    hdr->flags = get_u32(b + 40);
}

int flamme_header_read(int fd, struct flamme_header *hdr)
{
    uint8_t b[FLAMME_HEADER_SIZE];
    if (pread(fd, b, sizeof b, 0) != (ssize_t)sizeof b || !flamme_is_profile(b, sizeof b))
        return -1;
    decode_header(b, hdr);
    return 0;
}

uint64_t flamme_proc_start_monotonic_ns(int pid)
{
    char buf[1024];
    if (pid)
        snprintf(buf, sizeof buf, "/proc/%d/stat", pid);
    int fd = flamme_open_high(pid ? buf : "/proc/self/stat", O_RDONLY, NULL);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* The command name in parentheses may hold spaces and ')': the fields
     * are counted from the last ')'; starttime is the 22nd. */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        if ((p = strchr(p + 1, ' ')))
            p++;
    long hz = sysconf(_SC_CLK_TCK);
    if (!p || hz <= 0)
        return 0;
    unsigned long long ticks = strtoull(p, NULL, 10);
    uint64_t boot_ns = (uint64_t)(ticks / (unsigned long)hz) * 1000000000u +
                       (uint64_t)(ticks % (unsigned long)hz) * 1000000000u / (unsigned long)hz;
    struct timespec b, m;
    if (clock_gettime(CLOCK_BOOTTIME, &b) != 0 || clock_gettime(CLOCK_MONOTONIC, &m) != 0)
        return 0;
    int64_t suspended = ((int64_t)b.tv_sec - m.tv_sec) * 1000000000 + (b.tv_nsec - m.tv_nsec);
    if (suspended < 0)
        suspended = 0;
    return boot_ns > (uint64_t)suspended ? boot_ns - (uint64_t)suspended : 0;
}

int flamme_profile_writer(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct flamme_header h;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flamme_header_read(fd, &h) == 0;
    close(fd);
    if (!ok || h.pid == 0 || h.pid > INT32_MAX || (kill((pid_t)h.pid, 0) != 0 && errno != EPERM))
        return 0;
    /* A pid the kernel gave again started after the profile did (to the
     * clock tick /proc counts in). */
    uint64_t started = flamme_proc_start_monotonic_ns((int)h.pid);
    long hz = sysconf(_SC_CLK_TCK);
    uint64_t tick = hz > 0 ? 1000000000u / (unsigned long)hz : 10000000u;
    return started && started <= h.start_monotonic_ns + tick ? (int)h.pid : 0;
}

static void encode_header(uint8_t *b, const struct flamme_header *hdr)
{
    memset(b, 0, FLAMME_HEADER_SIZE);
    memcpy(b, FLAMME_MAGIC, 8);
    put_u16(b + 8, FLAMME_VERSION_MAJOR);
    put_u16(b + 10, FLAMME_VERSION_MINOR);
    put_u32(b + 12, FLAMME_HEADER_SIZE);
    put_u32(b + 16, hdr->pid);
    put_u32(b + 20, hdr->hz);
    put_u64(b + 24, hdr->start_realtime_ns);
    put_u64(b + 32, hdr->start_monotonic_ns);
    put_u32(b + 40, hdr->flags);
}

/* -------------------------------------------------------------- writer */

/* A growable byte buffer (the writer's open STACK_NODES / SAMPLES bodies). */
struct bbuf {
    uint8_t *b;
    size_t len, cap;
};

/* Makes room for need more bytes. Returns 0 / -1 (ENOMEM). */
static int bb_reserve(struct bbuf *bb, size_t need)
{
    if (bb->cap - bb->len >= need)
        return 0;
    size_t cap = bb->cap ? bb->cap : 4096;
    while (cap - bb->len < need)
        cap *= 2;
    uint8_t *n = realloc(bb->b, cap);
    if (!n)
        return -1;
    bb->b = n;
    bb->cap = cap;
    return 0;
}

/* Appends v as a varint (room for 10 bytes must have been reserved). */
static void bb_varint(struct bbuf *bb, uint64_t v)
{
    while (v >= 0x80) {
        bb->b[bb->len++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    bb->b[bb->len++] = (uint8_t)v;
}

static uint64_t zigzag(uint64_t v)
{
    return v << 1 ^ (uint64_t)-(int64_t)(v >> 63);
}

/* A SAMPLES or STACK_NODES body is closed into its record past this size:
 * records stay small next to the chunk, and a killed program loses little. */
#define BATCH_MAX (64u << 10)

struct flamme_pw {
    int fd;
    int failed;        /* sticky: any error makes every later call fail */
    uint8_t *raw;      /* the open chunk's payload */
    size_t raw_len, raw_cap;
    size_t raw_mapped; /* of raw_cap: populated (reserve) */
    size_t named_len;  /* of raw_len: FRAME and FRAME_LINE records */
    uint8_t *out;      /* chunk header + compressed payload */
    size_t out_cap;
    z_stream zs;       /* reused across chunks (deflateReset) */
    int zs_ready;
    int (*guard)(int *fd); /* see flamme_pw_set_guard, or NULL */
    uint64_t start_ns;     /* the header's start_monotonic_ns: SAMPLES' first time base */
    struct flamme_itab tree; /* the prefix tree: (parent << 32 | frame) -> node */
    uint64_t *tkey;        /* node - 1 -> its (parent << 32 | frame) */
    size_t tkey_cap;
    uint32_t nnodes;       /* nodes defined (node 0 included) */
    uint32_t *smap;        /* the caller's stack id -> node (UINT32_MAX: none) */
    size_t smap_cap;
    int by_node;           /* the caller's stack ids are nodes (flamme_pw_stacks_are_nodes) */
    /* The last stack interned, root first, and the node reached after each
     * of its frames: a deep recursion's consecutive stacks share most of
     * their root-most frames, which then cost a compare each instead of an
     * interning. */
    uint32_t *last_frames, *last_nodes;
    uint32_t last_n, last_cap;
    struct bbuf nodes;     /* open STACK_NODES: its nodes (up, frame) */
    uint32_t nodes_first, nodes_count;
    struct bbuf samples;   /* open SAMPLES body */
    uint32_t s_tid, s_serial, s_flags; /* the run's previous sample */
    int32_t s_domain;
    uint64_t s_time;
};

void flamme_pw_set_guard(flamme_pw *w, int (*guard)(int *fd))
{
    w->guard = guard;
}

/* zlib's allocator for the compressor: its ~260 KB of state (window,
 * hash chains, pending output; the hash heads cleared at every chunk) from
 * the huge-page chunks the unwind tables are read into, while the
 * process's allowance lasts (common/bulk.h): from malloc, a short run
 * paid a page fault for each 4 KB of it as it was first touched, 13 us
 * each on a microVM. */
static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    if (size && items > SIZE_MAX / size)
        return Z_NULL;
    return flamme_bulk_alloc_counted((size_t)items * size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    flamme_bulk_free(p);
}

flamme_pw *flamme_pw_open(int fd, const struct flamme_header *hdr)
{
    /* On failure the fd stays open and owned by the caller. */
    flamme_pw *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->fd = fd;
    w->zs.zalloc = z_alloc;
    w->zs.zfree = z_free;
    if (deflateInit(&w->zs, ZLEVEL) != Z_OK) {
        free(w);
        errno = ENOMEM;
        return NULL;
    }
    w->zs_ready = 1;
    w->start_ns = hdr->start_monotonic_ns;
    w->nnodes = 1;
    w->s_domain = -1;
    w->s_time = w->start_ns;
    uint8_t b[FLAMME_HEADER_SIZE];
    encode_header(b, hdr);
    if (write_all(fd, b, sizeof b) < 0) {
        int e = errno;
        deflateEnd(&w->zs);
        free(w);
        errno = e;
        return NULL;
    }
    return w;
}

size_t flamme_pw_pending(const flamme_pw *w)
{
    return w->raw_len + w->nodes.len + w->samples.len;
}

size_t flamme_pw_pending_named(const flamme_pw *w)
{
    return w->named_len;
}

static int flush_chunk(flamme_pw *w);

/* Makes room for need more payload bytes. Returns 0 / -1 (ENOMEM). */
static int reserve(flamme_pw *w, size_t need)
{
    if (w->raw_cap - w->raw_len < need) {
        size_t cap = w->raw_cap ? w->raw_cap : FIRST_RAW_CAP;
        while (cap - w->raw_len < need)
            cap *= 2;
        void *n = w->raw ? mremap(w->raw, w->raw_cap, cap, MREMAP_MAYMOVE)
                         : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (n == MAP_FAILED) {
            errno = ENOMEM;
            return -1;
        }
        w->raw = n;
        w->raw_cap = cap;
    }
    /* The chunk is written front to back, and a page fault can cost far
     * more than the page (21-26 us on a VM, where populating took
     * 0.4-1.6 us a page; agent/bigheap.c): the pages about to be written
     * are populated ahead, 64 KB at a time. Best effort: before Linux 5.14
     * they fault in as they are written. */
    if (w->raw_len + need > w->raw_mapped) {
        size_t to = (w->raw_len + need + RAW_AHEAD - 1) / RAW_AHEAD * RAW_AHEAD;
        if (to > w->raw_cap)
            to = w->raw_cap;
        madvise(w->raw + w->raw_mapped, to - w->raw_mapped, MADV_POPULATE_WRITE);
        w->raw_mapped = to;
    }
    return 0;
}

/* Opens a record of body_len bytes in the chunk and returns where its body
 * goes, or NULL (writer now failed) on error or an oversized body. Flushes
 * the chunk first when the record would push it past the auto-flush size, so
 * records never straddle chunks and chunks stay under MAX_CHUNK_RAW. */
static uint8_t *rec_open(flamme_pw *w, uint8_t type, size_t body_len)
{
    if (w->failed)
        return NULL;
    if (body_len > MAX_BODY) {
        errno = EINVAL;
        w->failed = 1;
        return NULL;
    }
    if (w->raw_len > 0 && w->raw_len + REC_HDR_SIZE + body_len > AUTO_FLUSH_RAW &&
        flush_chunk(w) < 0)
        return NULL;
    if (reserve(w, REC_HDR_SIZE + body_len) < 0) {
        w->failed = 1;
        return NULL;
    }
    uint8_t *p = w->raw + w->raw_len;
    p[0] = type;
    put_u32(p + 1, (uint32_t)body_len);
    w->raw_len += REC_HDR_SIZE + body_len;
    return p + REC_HDR_SIZE;
}

/* Writes the open STACK_NODES as a record (no-op when empty). 0 / -1. */
static int close_nodes(flamme_pw *w)
{
    if (w->nodes_count == 0)
        return 0;
    uint8_t head[20];
    struct bbuf h = { head, 0, sizeof head };
    bb_varint(&h, w->nodes_first);
    bb_varint(&h, w->nodes_count);
    uint8_t *p = rec_open(w, FLAMME_REC_STACK_NODES, h.len + w->nodes.len);
    if (!p)
        return -1;
    memcpy(p, head, h.len);
    memcpy(p + h.len, w->nodes.b, w->nodes.len);
    w->nodes.len = 0;
    w->nodes_count = 0;
    return 0;
}

/* Writes the open STACK_NODES, then the open SAMPLES (whose samples may
 * name those nodes) as records, and starts a new run. 0 / -1. */
static int close_batches(flamme_pw *w)
{
    if (close_nodes(w) < 0)
        return -1;
    if (w->samples.len == 0)
        return 0;
    uint8_t *p = rec_open(w, FLAMME_REC_SAMPLES, w->samples.len);
    if (!p)
        return -1;
    memcpy(p, w->samples.b, w->samples.len);
    w->samples.len = 0;
    w->s_tid = w->s_serial = w->s_flags = 0;
    w->s_domain = -1;
    w->s_time = w->start_ns;
    return 0;
}

/* rec_open for every record but the batched ones: the open batches go
 * first, so the record comes after every definition written before it. */
static uint8_t *rec_begin(flamme_pw *w, uint8_t type, size_t body_len)
{
    if (w->failed || close_batches(w) < 0)
        return NULL;
    return rec_open(w, type, body_len);
}

/* Appends a str (u32 len + bytes) at p; returns the byte after it. */
static uint8_t *put_str(uint8_t *p, const char *s, size_t n)
{
    put_u32(p, (uint32_t)n);
    memcpy(p + 4, s, n);
    return p + 4 + n;
}

static size_t str_len(const char *s)
{
    return s ? strlen(s) : 0;
}

int flamme_pw_info(flamme_pw *w, const char *key, const char *value)
{
    size_t kl = str_len(key), vl = str_len(value);
    uint8_t *p = rec_begin(w, FLAMME_REC_INFO, 8 + kl + vl);
    if (!p)
        return -1;
    p = put_str(p, key ? key : "", kl);
    put_str(p, value ? value : "", vl);
    return 0;
}

int flamme_pw_thread_serial(flamme_pw *w, uint32_t tid, uint32_t serial, uint8_t kind,
                            int32_t domain, uint64_t time_ns, const char *name)
{
    size_t nl = str_len(name);
    uint8_t *p = rec_begin(w, FLAMME_REC_THREAD, 4 + 1 + 4 + 8 + 4 + nl + 4);
    if (!p)
        return -1;
    put_u32(p, tid);
    p[4] = kind;
    put_u32(p + 5, (uint32_t)domain);
    put_u64(p + 9, time_ns);
    put_u32(put_str(p + 17, name ? name : "", nl), serial);
    return 0;
}

int flamme_pw_thread(flamme_pw *w, uint32_t tid, uint8_t kind, int32_t domain, uint64_t time_ns,
                     const char *name)
{
    return flamme_pw_thread_serial(w, tid, 0, kind, domain, time_ns, name);
}

/* THREAD_END and LOST share one body layout: u32 tid, u64 value, u32 serial. */
static int rec_tid_u64(flamme_pw *w, uint8_t type, uint32_t tid, uint64_t v, uint32_t serial)
{
    uint8_t *p = rec_begin(w, type, 16);
    if (!p)
        return -1;
    put_u32(p, tid);
    put_u64(p + 4, v);
    put_u32(p + 12, serial);
    return 0;
}

int flamme_pw_thread_end_serial(flamme_pw *w, uint32_t tid, uint32_t serial, uint64_t time_ns)
{
    return rec_tid_u64(w, FLAMME_REC_THREAD_END, tid, time_ns, serial);
}

int flamme_pw_thread_end(flamme_pw *w, uint32_t tid, uint64_t time_ns)
{
    return rec_tid_u64(w, FLAMME_REC_THREAD_END, tid, time_ns, 0);
}

int flamme_pw_frame(flamme_pw *w, uint32_t frame_id, uint64_t addr, uint64_t offset,
                    const char *function, const char *module)
{
    size_t fl = str_len(function), ml = str_len(module);
    uint8_t *p = rec_begin(w, FLAMME_REC_FRAME, 4 + 8 + 8 + 8 + fl + ml);
    if (!p)
        return -1;
    put_u32(p, frame_id);
    put_u64(p + 4, addr);
    put_u64(p + 12, offset);
    p = put_str(p + 20, function ? function : "", fl);
    put_str(p, module ? module : "", ml);
    w->named_len += REC_HDR_SIZE + 4 + 8 + 8 + 8 + fl + ml;
    return 0;
}

int flamme_pw_frame_line(flamme_pw *w, uint32_t frame_id, uint32_t line, const char *file)
{
    size_t fl = str_len(file);
    uint8_t *p = rec_begin(w, FLAMME_REC_FRAME_LINE, 4 + 4 + 4 + fl);
    if (!p)
        return -1;
    put_u32(p, frame_id);
    put_u32(p + 4, line);
    put_str(p + 8, file ? file : "", fl);
    w->named_len += REC_HDR_SIZE + 4 + 4 + 4 + fl;
    return 0;
}

int flamme_pw_exit(flamme_pw *w, uint8_t how, int32_t code, uint64_t time_ns, const char *detail)
{
    size_t dl = str_len(detail);
    uint8_t *p = rec_begin(w, FLAMME_REC_EXIT, 1 + 4 + 8 + 4 + dl);
    if (!p)
        return -1;
    p[0] = how;
    put_u32(p + 1, (uint32_t)code);
    put_u64(p + 5, time_ns);
    put_str(p + 13, detail ? detail : "", dl);
    return 0;
}

int flamme_pw_segment(flamme_pw *w, uint32_t seq, uint64_t from_ns, uint64_t until_ns,
                      uint64_t period_ns)
{
    uint8_t *p = rec_begin(w, FLAMME_REC_SEGMENT, 4 + 8 + 8 + 8);
    if (!p)
        return -1;
    put_u32(p, seq);
    put_u64(p + 4, from_ns);
    put_u64(p + 12, until_ns);
    put_u64(p + 20, period_ns);
    return 0;
}

static uint64_t tree_hash(const void *ctx, uint32_t i)
{
    return flamme_hash_mix64(((const flamme_pw *)ctx)->tkey[i]);
}

static int tree_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    return ((const flamme_pw *)ctx)->tkey[i] == *(const uint64_t *)key;
}

/* The node the caller's stack id stands for; UINT32_MAX when it never
 * defined it (written as is: the reader ignores what names no node). */
static uint32_t node_of(const flamme_pw *w, uint32_t stack_id)
{
    if (w->by_node)
        return stack_id;
    return stack_id < w->smap_cap ? w->smap[stack_id] : UINT32_MAX;
}

/* Defines m new nodes in a chain under parent, which has no child for
 * frames[0]: the node of frames[0] (root side), its child for frames[1],
 * ..., down to frames[m - 1]; their ids go to nodes[0..m). None can exist
 * (the first is not a child of parent yet, the others' parents are new),
 * so they are inserted without a look-up, a group at a time with their
 * slots prefetched: a deep stack's new part is hundreds of nodes, each
 * slot a cache miss. Returns 0, or -1 on allocation failure or when the
 * ids run out. */
static int node_chain(flamme_pw *w, uint32_t parent, const uint32_t *frames, uint32_t m,
                      uint32_t *nodes)
{
    enum { GROUP = 16 };
    uint32_t nkeys = w->nnodes - 1;
    /* The last id made stays below UINT32_MAX - 1. */
    if (w->nnodes > UINT32_MAX - 1 - m)
        return -1;
    if (flamme_itab_reserve_more(&w->tree, nkeys, m, 1024, tree_hash, w) < 0)
        return -1;
    if (nkeys + m > w->tkey_cap) {
        size_t cap = w->tkey_cap ? w->tkey_cap * 2 : 1024;
        while (cap < nkeys + m)
            cap *= 2;
        uint64_t *k = realloc(w->tkey, cap * sizeof *k);
        if (!k)
            return -1;
        w->tkey = k;
        w->tkey_cap = cap;
    }
    if (bb_reserve(&w->nodes, (size_t)m * 20) < 0)
        return -1;
    size_t mask = w->tree.cap - 1;
    uint64_t h[GROUP];
    for (uint32_t g = 0; g < m; g += GROUP) {
        uint32_t cnt = m - g < GROUP ? m - g : GROUP;
        /* Node ids are dense: the k-th new node is w->nnodes + k. */
        for (uint32_t k = 0; k < cnt; k++) {
            uint32_t up = g + k ? w->nnodes + k - 1 : parent;
            uint64_t key = (uint64_t)up << 32 | frames[g + k];
            w->tkey[w->nnodes - 1 + k] = key;
            h[k] = flamme_hash_mix64(key) & mask;
            __builtin_prefetch(&w->tree.slot[h[k]], 1);
        }
        for (uint32_t k = 0; k < cnt; k++) {
            size_t j = h[k];
            while (w->tree.slot[j])
                j = (j + 1) & mask;
            uint32_t node = w->nnodes++;
            w->tree.slot[j] = node; /* index node - 1, stored + 1 */
            if (w->nodes_count == 0)
                w->nodes_first = node;
            w->nodes_count++;
            bb_varint(&w->nodes, node - parent);
            bb_varint(&w->nodes, frames[g + k]);
            nodes[g + k] = parent = node;
        }
    }
    return 0;
}

/* The node (parent, frame), defined (into the open STACK_NODES) if new.
 * Node n's key is tkey[n - 1] (node 0, the empty stack, is nobody's
 * child), so node ids are dense in the order nodes are made. Returns
 * UINT32_MAX on allocation failure or when the ids run out. */
static uint32_t node_child(flamme_pw *w, uint32_t parent, uint32_t frame)
{
    uint64_t key = (uint64_t)parent << 32 | frame;
    if (flamme_itab_reserve(&w->tree, w->nnodes - 1, 1024, tree_hash, w) < 0)
        return UINT32_MAX;
    uint32_t *slot =
        flamme_itab_probe(&w->tree, flamme_hash_mix64(key), tree_eq, w, &key, sizeof key);
    if (*slot)
        return *slot;
    uint32_t node;
    return node_chain(w, parent, &frame, 1, &node) == 0 ? node : UINT32_MAX;
}

int flamme_pw_nodes(flamme_pw *w, uint32_t parent, uint32_t m, const uint32_t *frames,
                    uint32_t *nodes)
{
    if (w->failed)
        return -1;
    uint32_t i = 0, node = parent;
    while (i < m) {
        uint32_t made = w->nnodes;
        if ((node = node_child(w, node, frames[i])) == UINT32_MAX)
            goto fail;
        nodes[i++] = node;
        if (node == made)
            break; /* a new node: every deeper one is new too */
    }
    if (i < m && node_chain(w, node, frames + i, m - i, nodes + i) != 0)
        goto fail;
    if (w->nodes.len >= BATCH_MAX && close_nodes(w) < 0)
        return -1;
    return 0;
fail:
    w->failed = 1;
    errno = ENOMEM;
    return -1;
}

void flamme_pw_stacks_are_nodes(flamme_pw *w)
{
    w->by_node = 1;
}

int flamme_pw_stack(flamme_pw *w, uint32_t stack_id, uint32_t n, const uint32_t *frame_ids)
{
    if (w->failed)
        return -1;
    if (n > FLAMME_MAX_STACK_FRAMES || stack_id == UINT32_MAX || w->by_node) {
        w->failed = 1;
        errno = EINVAL;
        return -1;
    }
    if (stack_id >= w->smap_cap) {
        size_t cap = w->smap_cap ? w->smap_cap : 1024;
        while (cap <= stack_id)
            cap *= 2;
        uint32_t *m = realloc(w->smap, cap * sizeof *m);
        if (!m)
            goto fail;
        memset(m + w->smap_cap, 0xff, (cap - w->smap_cap) * sizeof *m);
        w->smap = m;
        w->smap_cap = cap;
    }
    if (n > w->last_cap) {
        uint32_t cap = w->last_cap ? w->last_cap : 64;
        while (cap < n)
            cap *= 2;
        uint32_t *f = realloc(w->last_frames, cap * sizeof *f);
        if (f)
            w->last_frames = f;
        uint32_t *nd = f ? realloc(w->last_nodes, cap * sizeof *nd) : NULL;
        if (nd)
            w->last_nodes = nd;
        if (!f || !nd)
            goto fail;
        w->last_cap = cap;
    }
    /* From the root-most frame down to the leaf: the part shared with the
     * last stack is found, not interned again. */
    uint32_t same = 0, lim = n < w->last_n ? n : w->last_n;
    while (same < lim && w->last_frames[same] == frame_ids[n - 1 - same])
        same++;
    for (uint32_t i = same; i < n; i++)
        w->last_frames[i] = frame_ids[n - 1 - i];
    w->last_n = same; /* until the rest has its nodes */
    if (flamme_pw_nodes(w, same ? w->last_nodes[same - 1] : 0, n - same, w->last_frames + same,
                        w->last_nodes + same) != 0)
        return -1;
    w->last_n = n;
    w->smap[stack_id] = n ? w->last_nodes[n - 1] : 0;
    return 0;
fail:
    w->failed = 1;
    errno = ENOMEM;
    return -1;
}

int flamme_pw_sample(flamme_pw *w, uint32_t stack_id, uint32_t tid, uint32_t weight,
                     int32_t domain, uint32_t flags, uint64_t time_ns)
{
    return flamme_pw_sample_serial(w, stack_id, tid, 0, weight, domain, flags, time_ns);
}

int flamme_pw_sample_serial(flamme_pw *w, uint32_t stack_id, uint32_t tid, uint32_t serial,
                            uint32_t weight, int32_t domain, uint32_t flags, uint64_t time_ns)
{
    if (w->failed)
        return -1;
    struct bbuf *b = &w->samples;
    if (bb_reserve(b, 1 + 6 * 10) < 0) {
        w->failed = 1;
        return -1;
    }
    uint8_t tag = (tid != w->s_tid || serial != w->s_serial ? 0x1 : 0) |
                  (domain != w->s_domain ? 0x2 : 0) | (flags != w->s_flags ? 0x4 : 0) |
                  (weight != 1 ? 0x8 : 0);
    b->b[b->len++] = tag;
    if (tag & 0x1) {
        bb_varint(b, tid);
        bb_varint(b, serial);
    }
    if (tag & 0x2)
        bb_varint(b, zigzag((uint64_t)(int64_t)domain));
    if (tag & 0x4)
        bb_varint(b, flags);
    if (tag & 0x8)
        bb_varint(b, weight);
    bb_varint(b, node_of(w, stack_id));
    bb_varint(b, zigzag(time_ns - w->s_time));
    w->s_tid = tid;
    w->s_serial = serial;
    w->s_domain = domain;
    w->s_flags = flags;
    w->s_time = time_ns;
    return b->len >= BATCH_MAX ? close_batches(w) : 0;
}

int flamme_pw_lost(flamme_pw *w, uint32_t tid, uint64_t count)
{
    return rec_tid_u64(w, FLAMME_REC_LOST, tid, count, 0);
}

int flamme_pw_lost_serial(flamme_pw *w, uint32_t tid, uint32_t serial, uint64_t count)
{
    return rec_tid_u64(w, FLAMME_REC_LOST, tid, count, serial);
}

int flamme_pw_gc(flamme_pw *w, uint32_t tid, int32_t domain, uint8_t kind, uint64_t start_ns,
                 uint64_t duration_ns)
{
    uint8_t *p = rec_begin(w, FLAMME_REC_GC, 25);
    if (!p)
        return -1;
    put_u32(p, tid);
    put_u32(p + 4, (uint32_t)domain);
    p[8] = kind;
    put_u64(p + 9, start_ns);
    put_u64(p + 17, duration_ns);
    return 0;
}

int flamme_pw_alloc(flamme_pw *w, const struct flamme_alloc *a)
{
    uint8_t *p = rec_begin(w, FLAMME_REC_ALLOC, 58);
    if (!p)
        return -1;
    uint64_t rate_bits;
    memcpy(&rate_bits, &a->rate, 8);
    put_u32(p, node_of(w, a->stack_id));
    put_u32(p + 4, a->tid);
    put_u32(p + 8, a->serial);
    put_u32(p + 12, (uint32_t)a->domain);
    put_u32(p + 16, a->flags);
    put_u64(p + 20, a->time_ns);
    put_u64(p + 28, a->id);
    put_u32(p + 36, a->n_samples);
    put_u64(p + 40, a->size_words);
    p[48] = a->heap;
    p[49] = a->source;
    put_u64(p + 50, rate_bits);
    return 0;
}

int flamme_pw_alloc_event(flamme_pw *w, uint64_t id, uint8_t event, uint64_t time_ns)
{
    uint8_t *p = rec_begin(w, FLAMME_REC_ALLOC_EVENT, 17);
    if (!p)
        return -1;
    put_u64(p, id);
    p[8] = event;
    put_u64(p + 9, time_ns);
    return 0;
}

int flamme_pw_flush(flamme_pw *w)
{
    if (w->failed || close_batches(w) < 0)
        return -1;
    return flush_chunk(w);
}

/* Compresses and writes the open chunk as it stands. 0 / -1. */
static int flush_chunk(flamme_pw *w)
{
    if (w->failed)
        return -1;
    if (w->raw_len == 0)
        return 0;
    size_t bound = CHUNK_HDR_SIZE + deflateBound(&w->zs, (uLong)w->raw_len);
    if (bound > w->out_cap) {
        /* Grown, not freed and allocated again: through the flamme
         * library glibc serves it, and its free of a mapped block would
         * raise the program's mmap threshold (agent/bigheap.c). */
        uint8_t *n = realloc(w->out, bound);
        if (!n) {
            w->failed = 1;
            return -1;
        }
        w->out = n;
        w->out_cap = bound;
    }
    if (deflateReset(&w->zs) != Z_OK)
        goto fail;
    w->zs.next_in = w->raw;
    w->zs.avail_in = (uInt)w->raw_len;
    w->zs.next_out = w->out + CHUNK_HDR_SIZE;
    w->zs.avail_out = (uInt)(bound - CHUNK_HDR_SIZE);
    if (deflate(&w->zs, Z_FINISH) != Z_STREAM_END)
        goto fail;
    size_t zlen = bound - CHUNK_HDR_SIZE - w->zs.avail_out;
    put_u32(w->out, FLAMME_CHUNK_MAGIC);
    put_u32(w->out + 4, (uint32_t)w->raw_len);
    put_u32(w->out + 8, (uint32_t)zlen);
    put_u32(w->out + 12, (uint32_t)crc32(0L, w->raw, (uInt)w->raw_len));
    if ((w->guard && w->guard(&w->fd) != 0) || write_all(w->fd, w->out, CHUNK_HDR_SIZE + zlen) < 0)
        goto fail;
    w->raw_len = 0;
    w->named_len = 0;
    return 0;
fail:
    w->failed = 1;
    return -1;
}

int flamme_pw_fd(const flamme_pw *w)
{
    return w->fd;
}

int flamme_pw_end(flamme_pw *w, uint64_t samples, uint64_t lost, uint64_t end_ns,
                  uint32_t threads)
{
    uint8_t *p = rec_begin(w, FLAMME_REC_END, 28);
    if (p) {
        put_u64(p, samples);
        put_u64(p + 8, lost);
        put_u64(p + 16, end_ns);
        put_u32(p + 24, threads);
    }
    return flamme_pw_flush(w);
}

int flamme_pw_close(flamme_pw *w, uint64_t samples, uint64_t lost, uint64_t end_ns,
                    uint32_t threads)
{
    if (!w)
        return -1;
    flamme_pw_end(w, samples, lost, end_ns, threads);
    if (w->fd >= 0 && close(w->fd) < 0 && errno != EINTR)
        w->failed = 1;
    int rc = w->failed ? -1 : 0;
    if (w->zs_ready)
        deflateEnd(&w->zs);
    if (w->raw)
        munmap(w->raw, w->raw_cap);
    free(w->out);
    flamme_itab_free(&w->tree);
    free(w->tkey);
    free(w->smap);
    free(w->last_frames);
    free(w->last_nodes);
    free(w->nodes.b);
    free(w->samples.b);
    free(w);
    return rc;
}

/* -------------------------------------------------------------- reader */

/* Grows *arr (elements of size elem) so that index n fits; doubling keeps
 * loading amortized O(1) per record. Returns 0 / -1. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    if (c <= n)
        c = n + 1;
    if (c > SIZE_MAX / elem)
        return -1;
    void *a = realloc(*arr, c * elem);
    if (!a)
        return -1;
    *arr = a;
    *cap = c;
    return 0;
}

/* A stack node of a 2.x file: (parent, frame), its depth, and the stack
 * of the profile it became once a sample or ALLOC named it. */
struct lnode {
    uint32_t parent, frame, depth, stack; /* stack: UINT32_MAX until named */
};

/* Loader state kept beside the profile while decoding. */
struct loader {
    struct flamme_profile *p;
    size_t cap_frames, cap_stacks, cap_samples, cap_threads, cap_info, cap_gc, cap_allocs;
    struct flamme_alloc_event_rec *ev; /* ALLOC_EVENTs, matched at the end */
    size_t nev, cap_ev;
    struct flamme_itab tids; /* (tid, serial) -> index in p->threads */
    uint8_t *has_thread_rec;/* per thread: a THREAD record was seen */
    uint64_t dropped;       /* records dropped for undefined / non-dense ids */
    int have_sample_time;
    int oom;
    const char *limit;      /* set with -3: which limit of profile.h the file broke */
    uint16_t major;         /* the file's: 1 (STACK, SAMPLE) or 2 (STACK_NODES, SAMPLES) */
    uint64_t start_ns;      /* header's start_monotonic_ns: SAMPLES' first time base */
    uint64_t file_len;
    struct lnode *nodes;    /* 2.x; node 0 (the empty stack) from the start */
    size_t nnodes, cap_nodes;
    uint64_t node_frames;   /* frames of the stacks built from nodes, added up */
};

static uint64_t tid_hash(uint32_t tid, uint32_t serial)
{
    /* keyed: tids come from the file */
    return flamme_table_hash_u64((uint64_t)serial << 32 | tid);
}

static uint64_t thread_hash(const void *ctx, uint32_t i)
{
    const struct flamme_thread *t = &((const struct flamme_profile *)ctx)->threads[i];
    return tid_hash(t->tid, t->serial);
}

/* key: uint32_t[2] = {tid, serial} */
static int thread_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    const struct flamme_thread *t = &((const struct flamme_profile *)ctx)->threads[i];
    const uint32_t *k = key;
    return t->tid == k[0] && t->serial == k[1];
}

/* Returns the index of thread (tid, serial), creating an UNKNOWN one
 * (start_ns = t) if absent; (size_t)-1 on allocation failure. */
static size_t thread_index(struct loader *L, uint32_t tid, uint32_t serial, uint64_t t)
{
    struct flamme_profile *p = L->p;
    if (flamme_itab_reserve(&L->tids, p->nthreads, 64, thread_hash, p) < 0)
        return (size_t)-1;
    uint32_t key[2] = {tid, serial};
    uint32_t *slot = flamme_itab_probe(&L->tids, tid_hash(tid, serial), thread_eq, p, key, sizeof key);
    if (*slot)
        return *slot - 1;
    size_t cap = L->cap_threads;
    if (grow((void **)&p->threads, &L->cap_threads, p->nthreads, sizeof *p->threads) < 0)
        return (size_t)-1;
    if (L->cap_threads != cap) {
        uint8_t *f = realloc(L->has_thread_rec, L->cap_threads);
        if (!f)
            return (size_t)-1;
        L->has_thread_rec = f;
    }
    char *name = strdup("");
    if (!name)
        return (size_t)-1;
    size_t i = p->nthreads++;
    p->threads[i] = (struct flamme_thread){ .tid = tid, .serial = serial, .kind = FLAMME_THREAD_UNKNOWN,
                                            .domain = -1, .start_ns = t, .name = name };
    L->has_thread_rec[i] = 0;
    *slot = (uint32_t)(i + 1);
    return i;
}

/* Bounded cursor over one record body. */
struct cur {
    const uint8_t *p;
    size_t left;
};

static int cur_u8(struct cur *c, uint8_t *v)
{
    if (c->left < 1)
        return -1;
    *v = c->p[0];
    c->p++, c->left--;
    return 0;
}

static int cur_u32(struct cur *c, uint32_t *v)
{
    if (c->left < 4)
        return -1;
    *v = get_u32(c->p);
    c->p += 4, c->left -= 4;
    return 0;
}

static int cur_u64(struct cur *c, uint64_t *v)
{
    if (c->left < 8)
        return -1;
    *v = get_u64(c->p);
    c->p += 8, c->left -= 8;
    return 0;
}

/* Reads a varint (at most 10 bytes, fitting a u64). Returns 0 / -1. */
static int cur_varint(struct cur *c, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        uint8_t b;
        if (cur_u8(c, &b) < 0 || (shift == 63 && b > 1))
            return -1;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static int cur_varint32(struct cur *c, uint32_t *v)
{
    uint64_t x;
    if (cur_varint(c, &x) < 0 || x > UINT32_MAX)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

static uint64_t unzigzag(uint64_t v)
{
    return v >> 1 ^ (uint64_t)-(int64_t)(v & 1);
}

/* Reads a str into a new NUL-terminated copy. Returns 0, -1 when the body is
 * too short, -2 on allocation failure. Embedded NULs end the C string early;
 * that is the only lossy case. */
static int cur_str(struct cur *c, char **out)
{
    uint32_t n;
    if (cur_u32(c, &n) < 0 || n > c->left)
        return -1;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return -2;
    memcpy(s, c->p, n);
    s[n] = 0;
    c->p += n, c->left -= n;
    *out = s;
    return 0;
}

/* Every frame's file starts as this shared "" (most frames of a profile
 * without FRAME_LINE records have none); only strings read from a record are
 * owned by the frame and freed. */
static char no_file[1];

static void free_file(char *f)
{
    if (f != no_file)
        free(f);
}

/* The profile's stack id of 2.x node `node`, building the stack (its frames
 * up the tree) the first time it is named. Returns 0, 1 when no such node
 * is defined, -2 on allocation failure, -3 past the frames limit. */
static int node_stack(struct loader *L, uint64_t node, uint32_t *sid)
{
    struct flamme_profile *p = L->p;
    if (node >= L->nnodes)
        return 1;
    struct lnode *nd = &L->nodes[node];
    if (nd->stack == UINT32_MAX) {
        uint32_t n = nd->depth;
        if ((L->node_frames += n) > FLAMME_MAX_STACK_FRAMES_TOTAL(L->file_len)) {
            L->limit = "stacks of more than 16 Mi + 4096 frames per byte of the file in all";
            return -3;
        }
        if (p->nstacks >= UINT32_MAX - 1)
            return -2;
        uint32_t *fr = malloc(n ? (size_t)n * 4 : 1);
        if (!fr || grow((void **)&p->stacks, &L->cap_stacks, p->nstacks, sizeof *p->stacks) < 0) {
            free(fr);
            return -2;
        }
        uint64_t x = node;
        for (uint32_t k = 0; k < n; k++, x = L->nodes[x].parent)
            fr[k] = L->nodes[x].frame;
        p->stacks[p->nstacks] = (struct flamme_stack){ n, fr };
        nd->stack = (uint32_t)p->nstacks++;
    }
    *sid = nd->stack;
    return 0;
}

/* Adds sample s (its stack already checked): its thread, end_ns.
 * Returns 0 / -2 (allocation). */
static int add_sample(struct loader *L, struct flamme_sample *s)
{
    struct flamme_profile *p = L->p;
    size_t ti = thread_index(L, s->tid, s->serial, s->time_ns);
    if (ti == (size_t)-1)
        return -2;
    s->thread = (uint32_t)ti; /* renumbered when threads are sorted */
    if (grow((void **)&p->samples, &L->cap_samples, p->nsamples, sizeof *p->samples) < 0)
        return -2;
    p->samples[p->nsamples++] = *s;
    if (!p->complete && (!L->have_sample_time || s->time_ns > p->end_ns))
        p->end_ns = s->time_ns; /* the latest sample, until END says otherwise */
    L->have_sample_time = 1;
    return 0;
}

/* STACK_NODES (2.x): defines nodes first, first + 1, ... Returns 0 (applied,
 * or ignored as doc/format.md says), -1 malformed, -2, -3. */
static int apply_nodes(struct loader *L, struct cur c)
{
    uint64_t first, count;
    if (cur_varint(&c, &first) || cur_varint(&c, &count))
        return -1;
    if (count > c.left / 2) /* two bytes at least a node */
        return -1;
    if (first != L->nnodes) {
        L->dropped++;
        return 0;
    }
    for (uint64_t i = 0; i < count; i++) {
        uint64_t up;
        uint32_t frame;
        if (cur_varint(&c, &up) || cur_varint32(&c, &frame))
            return -1;
        uint64_t id = L->nnodes;
        if (up == 0 || up > id || frame >= L->p->nframes || id >= UINT32_MAX - 1) {
            L->dropped++;
            return 0;
        }
        uint32_t depth = L->nodes[id - up].depth + 1;
        if (depth > FLAMME_MAX_STACK_FRAMES) {
            L->limit = "a stack of more than 1048576 frames";
            return -3;
        }
        if (grow((void **)&L->nodes, &L->cap_nodes, L->nnodes, sizeof *L->nodes) < 0)
            return -2;
        L->nodes[L->nnodes++] = (struct lnode){ (uint32_t)(id - up), frame, depth, UINT32_MAX };
    }
    return 0;
}

/* SAMPLES (2.x): a run of samples, each coded against the one before. */
static int apply_samples(struct loader *L, struct cur c)
{
    struct flamme_sample s = { .domain = -1, .time_ns = L->start_ns };
    while (c.left > 0) {
        uint8_t tag;
        uint64_t node, v;
        cur_u8(&c, &tag);
        if (tag & 0xf0)
            return -1;
        if ((tag & 0x1) && (cur_varint32(&c, &s.tid) || cur_varint32(&c, &s.serial)))
            return -1;
        if (tag & 0x2) {
            if (cur_varint(&c, &v) || (int64_t)unzigzag(v) != (int32_t)unzigzag(v))
                return -1;
            s.domain = (int32_t)unzigzag(v);
        }
        if ((tag & 0x4) && cur_varint32(&c, &s.flags))
            return -1;
        s.weight = 1;
        if ((tag & 0x8) && cur_varint32(&c, &s.weight))
            return -1;
        if (cur_varint(&c, &node) || cur_varint(&c, &v))
            return -1;
        s.time_ns += unzigzag(v);
        int r = node_stack(L, node, &s.stack_id);
        if (r < 0)
            return r;
        if (r > 0)
            L->dropped++;
        else if (add_sample(L, &s) < 0)
            return -2;
    }
    return 0;
}

/* Decodes one record. Returns 0 (applied or dropped), -1 if the body is too
 * short for the type (corrupt), -2 on allocation failure, -3 past a limit
 * (L->limit says which). */
static int apply_record(struct loader *L, uint8_t type, const uint8_t *body, size_t len)
{
    struct flamme_profile *p = L->p;
    struct cur c = { body, len };
    int r;
    switch (type) {
    case FLAMME_REC_INFO: {
        char *k = NULL, *v = NULL;
        if ((r = cur_str(&c, &k)) < 0 || (r = cur_str(&c, &v)) < 0) {
            free(k);
            return r;
        }
        if (grow((void **)&p->info, &L->cap_info, p->ninfo, sizeof *p->info) < 0) {
            free(k);
            free(v);
            return -2;
        }
        p->info[p->ninfo++] = (struct flamme_kv){ k, v };
        return 0;
    }
    case FLAMME_REC_THREAD: {
        uint32_t tid, dom;
        uint8_t kind;
        uint64_t t;
        char *name;
        if (cur_u32(&c, &tid) || cur_u8(&c, &kind) || cur_u32(&c, &dom) || cur_u64(&c, &t))
            return -1;
        if ((r = cur_str(&c, &name)) < 0)
            return r;
        uint32_t serial = 0; /* 1.4; absent before */
        cur_u32(&c, &serial);
        size_t i = thread_index(L, tid, serial, t);
        if (i == (size_t)-1) {
            free(name);
            return -2;
        }
        struct flamme_thread *th = &p->threads[i];
        if (!L->has_thread_rec[i]) {
            /* The first THREAD record gives the start, even if samples of
             * this thread came earlier. */
            th->start_ns = t;
            L->has_thread_rec[i] = 1;
        }
        th->kind = kind;
        th->domain = (int32_t)dom;
        free(th->name);
        th->name = name;
        return 0;
    }
    case FLAMME_REC_THREAD_END: {
        uint32_t tid;
        uint64_t t;
        if (cur_u32(&c, &tid) || cur_u64(&c, &t))
            return -1;
        uint32_t serial = 0;
        cur_u32(&c, &serial);
        size_t i = thread_index(L, tid, serial, t);
        if (i == (size_t)-1)
            return -2;
        p->threads[i].end_ns = t;
        return 0;
    }
    case FLAMME_REC_FRAME: {
        uint32_t id;
        uint64_t addr, off;
        char *fn = NULL, *mod = NULL;
        if (cur_u32(&c, &id) || cur_u64(&c, &addr) || cur_u64(&c, &off))
            return -1;
        if ((r = cur_str(&c, &fn)) < 0 || (r = cur_str(&c, &mod)) < 0) {
            free(fn);
            return r;
        }
        if (id > p->nframes) { /* would leave an undefined gap */
            free(fn);
            free(mod);
            L->dropped++;
            return 0;
        }
        if (id == p->nframes) {
            if (grow((void **)&p->frames, &L->cap_frames, p->nframes, sizeof *p->frames) < 0) {
                free(fn);
                free(mod);
                return -2;
            }
            p->nframes++;
        } else { /* redefinition: the later one wins, source position included */
            free(p->frames[id].function);
            free(p->frames[id].module);
            free_file(p->frames[id].file);
        }
        p->frames[id] = (struct flamme_frame){ addr, off, fn, mod, no_file, 0 };
        return 0;
    }
    case FLAMME_REC_FRAME_LINE: {
        uint32_t id, line;
        char *file = NULL;
        if (cur_u32(&c, &id) || cur_u32(&c, &line))
            return -1;
        if ((r = cur_str(&c, &file)) < 0)
            return r;
        if (id >= p->nframes) { /* position of a frame never defined */
            free(file);
            L->dropped++;
            return 0;
        }
        free_file(p->frames[id].file);
        p->frames[id].file = file;
        p->frames[id].line = line;
        return 0;
    }
    case FLAMME_REC_STACK_NODES:
        return L->major >= 2 ? apply_nodes(L, c) : 0;
    case FLAMME_REC_SAMPLES:
        return L->major >= 2 ? apply_samples(L, c) : 0;
    case FLAMME_REC_STACK: {
        uint32_t id, n;
        if (L->major >= 2) /* 1.x only: skipped like an unknown record */
            return 0;
        if (cur_u32(&c, &id) || cur_u32(&c, &n))
            return -1;
        if (n > c.left / 4) /* check before allocating n frames */
            return -1;
        if (n > FLAMME_MAX_STACK_FRAMES) {
            L->limit = "a stack of more than 1048576 frames";
            return -3;
        }
        if (id > p->nstacks) {
            L->dropped++;
            return 0;
        }
        for (uint32_t k = 0; k < n; k++)
            if (get_u32(c.p + 4 * (size_t)k) >= p->nframes) {
                L->dropped++;
                return 0;
            }
        uint32_t *fr = malloc(n ? (size_t)n * 4 : 1);
        if (!fr)
            return -2;
        for (uint32_t k = 0; k < n; k++)
            fr[k] = get_u32(c.p + 4 * (size_t)k);
        if (id == p->nstacks) {
            if (grow((void **)&p->stacks, &L->cap_stacks, p->nstacks, sizeof *p->stacks) < 0) {
                free(fr);
                return -2;
            }
            p->nstacks++;
        } else {
            free(p->stacks[id].frames);
        }
        p->stacks[id] = (struct flamme_stack){ n, fr };
        return 0;
    }
    case FLAMME_REC_SAMPLE: {
        struct flamme_sample s;
        uint32_t dom;
        if (L->major >= 2)
            return 0;
        if (cur_u32(&c, &s.stack_id) || cur_u32(&c, &s.tid) || cur_u32(&c, &s.weight) ||
            cur_u32(&c, &dom) || cur_u32(&c, &s.flags) || cur_u64(&c, &s.time_ns))
            return -1;
        s.domain = (int32_t)dom;
        s.serial = 0;
        cur_u32(&c, &s.serial);
        if (s.stack_id >= p->nstacks) {
            L->dropped++;
            return 0;
        }
        return add_sample(L, &s);
    }
    case FLAMME_REC_LOST: {
        uint32_t tid;
        uint64_t n;
        if (cur_u32(&c, &tid) || cur_u64(&c, &n))
            return -1;
        uint32_t serial = 0;
        cur_u32(&c, &serial);
        size_t i = thread_index(L, tid, serial, 0);
        if (i == (size_t)-1)
            return -2;
        p->threads[i].lost += n;
        p->lost += n;
        return 0;
    }
    case FLAMME_REC_END: {
        uint64_t ns, nl, t;
        uint32_t nt;
        if (cur_u64(&c, &ns) || cur_u64(&c, &nl) || cur_u64(&c, &t) || cur_u32(&c, &nt))
            return -1;
        p->complete = 1;
        p->end_ns = t;
        return 0;
    }
    case FLAMME_REC_EXIT: {
        uint8_t how;
        uint32_t code;
        uint64_t t;
        char *detail = NULL;
        if (cur_u8(&c, &how) || cur_u32(&c, &code) || cur_u64(&c, &t))
            return -1;
        if ((r = cur_str(&c, &detail)) < 0)
            return r;
        free(p->exit_detail);
        p->exit_how = how;
        p->exit_code = (int32_t)code;
        p->exit_detail = detail;
        return 0;
    }
    case FLAMME_REC_SEGMENT: {
        uint32_t seq;
        uint64_t from, until, period;
        if (cur_u32(&c, &seq) || cur_u64(&c, &from) || cur_u64(&c, &until) || cur_u64(&c, &period))
            return -1;
        p->segment_seq = seq;
        p->segment_from_ns = from;
        p->segment_until_ns = until;
        p->segment_period_ns = period;
        return 0;
    }
    case FLAMME_REC_GC: {
        struct flamme_gc_event g;
        uint32_t dom;
        if (cur_u32(&c, &g.tid) || cur_u32(&c, &dom) || cur_u8(&c, &g.kind) ||
            cur_u64(&c, &g.start_ns) || cur_u64(&c, &g.duration_ns))
            return -1;
        g.domain = (int32_t)dom;
        if (grow((void **)&p->gc, &L->cap_gc, p->ngc, sizeof *p->gc) < 0)
            return -2;
        p->gc[p->ngc++] = g;
        return 0;
    }
    case FLAMME_REC_ALLOC: {
        struct flamme_alloc a;
        uint32_t dom;
        uint64_t rate_bits;
        memset(&a, 0, sizeof a);
        if (cur_u32(&c, &a.stack_id) || cur_u32(&c, &a.tid) || cur_u32(&c, &a.serial) ||
            cur_u32(&c, &dom) || cur_u32(&c, &a.flags) || cur_u64(&c, &a.time_ns) ||
            cur_u64(&c, &a.id) || cur_u32(&c, &a.n_samples) || cur_u64(&c, &a.size_words) ||
            cur_u8(&c, &a.heap) || cur_u8(&c, &a.source) || cur_u64(&c, &rate_bits))
            return -1;
        a.domain = (int32_t)dom;
        memcpy(&a.rate, &rate_bits, 8);
        if (L->major >= 2 && (r = node_stack(L, a.stack_id, &a.stack_id)) != 0) {
            if (r < 0)
                return r;
            L->dropped++;
            return 0;
        }
        if (a.stack_id >= p->nstacks) {
            L->dropped++;
            return 0;
        }
        size_t ti = thread_index(L, a.tid, a.serial, a.time_ns);
        if (ti == (size_t)-1)
            return -2;
        a.thread = (uint32_t)ti;
        if (grow((void **)&p->allocs, &L->cap_allocs, p->nallocs, sizeof *p->allocs) < 0)
            return -2;
        p->allocs[p->nallocs++] = a;
        return 0;
    }
    case FLAMME_REC_ALLOC_EVENT: {
        struct flamme_alloc_event_rec e;
        if (cur_u64(&c, &e.id) || cur_u8(&c, &e.event) || cur_u64(&c, &e.time_ns))
            return -1;
        if (grow((void **)&L->ev, &L->cap_ev, L->nev, sizeof *L->ev) < 0)
            return -2;
        L->ev[L->nev++] = e;
        return 0;
    }
    default: /* a newer minor version's record: skipped by body_len */
        return 0;
    }
}

/* Decodes the records of one intact chunk payload. Returns 0, -1 if a record
 * is malformed (decoding of the file stops there), -2 on allocation failure. */
static int apply_payload(struct loader *L, const uint8_t *raw, size_t len)
{
    size_t off = 0;
    while (off < len) {
        if (len - off < REC_HDR_SIZE)
            return -1;
        uint8_t type = raw[off];
        uint32_t blen = get_u32(raw + off + 1);
        off += REC_HDR_SIZE;
        if (blen > len - off)
            return -1;
        int r = apply_record(L, type, raw + off, blen);
        if (r < 0)
            return r;
        off += blen;
    }
    return 0;
}

/* Reads all of fd into a new buffer. Returns 0 / -1 (errno). */
static int read_file(int fd, uint8_t **out, size_t *outlen)
{
    struct stat st;
    size_t cap = (fstat(fd, &st) == 0 && st.st_size > 0) ? (size_t)st.st_size + 1 : 65536;
    size_t len = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -1;
    for (;;) {
        if (len == cap) {
            uint8_t *n = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!n) {
                free(buf);
                errno = ENOMEM;
                return -1;
            }
            buf = n;
            cap *= 2;
        }
        ssize_t k = read(fd, buf + len, cap - len);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            free(buf);
            return -1;
        }
        if (k == 0)
            break;
        len += (size_t)k;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

int flamme_is_profile(const void *buf, size_t len)
{
    return len >= 8 && memcmp(buf, FLAMME_MAGIC, 8) == 0;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int cmp_thread(const void *a, const void *b)
{
    const struct flamme_thread *x = a, *y = b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->serial < y->serial ? -1 : x->serial > y->serial;
}

static int cmp_thread_ix(const void *a, const void *b, void *threads)
{
    const struct flamme_thread *t = threads;
    return cmp_thread(&t[*(const uint32_t *)a], &t[*(const uint32_t *)b]);
}

/* Sorts the threads by (tid, serial) and renumbers the samples' thread
 * indices to match. Returns 0 / -1 (allocation). */
static int sort_threads(struct flamme_profile *p)
{
    if (p->nthreads < 2)
        return 0;
    struct flamme_thread *t = p->threads;
    uint32_t *was = malloc(p->nthreads * sizeof *was), *now = malloc(p->nthreads * sizeof *now);
    if (!was || !now) {
        free(was);
        free(now);
        return -1;
    }
    /* sort a permutation, then apply it to the threads and samples */
    for (size_t i = 0; i < p->nthreads; i++)
        was[i] = (uint32_t)i;
    struct flamme_thread *copy = malloc(p->nthreads * sizeof *copy);
    if (!copy) {
        free(was);
        free(now);
        return -1;
    }
    memcpy(copy, t, p->nthreads * sizeof *copy);
    qsort_r(was, p->nthreads, sizeof *was, cmp_thread_ix, copy);
    for (size_t i = 0; i < p->nthreads; i++) {
        t[i] = copy[was[i]];
        now[was[i]] = (uint32_t)i;
    }
    for (size_t i = 0; i < p->nsamples; i++)
        p->samples[i].thread = now[p->samples[i].thread];
    for (size_t i = 0; i < p->nallocs; i++)
        p->allocs[i].thread = now[p->allocs[i].thread];
    free(copy);
    free(was);
    free(now);
    return 0;
}

/* Decodes the chunks of buf[off..len) into L->p. Returns 0, -1 on
 * allocation failure, -3 past a limit (L->limit); the file's damage only
 * sets p->truncated. */
static int decode_chunks(struct loader *L, const uint8_t *buf, size_t len, size_t off)
{
    struct flamme_profile *p = L->p;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK)
        return -1;
    uint8_t *raw = NULL;
    size_t raw_cap = 0;
    uint64_t inflated = 0;
    int rc = 0;
    while (off < len) {
        if (len - off < CHUNK_HDR_SIZE || get_u32(buf + off) != FLAMME_CHUNK_MAGIC) {
            p->truncated = 1;
            break;
        }
        uint32_t raw_len = get_u32(buf + off + 4), zlen = get_u32(buf + off + 8);
        uint32_t crc = get_u32(buf + off + 12);
        off += CHUNK_HDR_SIZE;
        if (zlen > len - off || raw_len > MAX_CHUNK_RAW) {
            p->truncated = 1;
            break;
        }
        if ((inflated += raw_len) > FLAMME_MAX_INFLATE(len)) {
            L->limit = "chunks that inflate to more than 64 MiB + 256 times the file's size";
            rc = -3;
            break;
        }
        if (raw_len > raw_cap) {
            uint8_t *n = realloc(raw, raw_len);
            if (!n) {
                rc = -1;
                break;
            }
            raw = n;
            raw_cap = raw_len;
        }
        inflateReset(&zs);
        zs.next_in = (Bytef *)(buf + off);
        zs.avail_in = zlen;
        zs.next_out = raw;
        zs.avail_out = raw_len;
        int zr = inflate(&zs, Z_FINISH);
        /* The stream must end exactly at zlen and yield exactly raw_len. */
        if (zr != Z_STREAM_END || zs.avail_in != 0 || zs.avail_out != 0 ||
            (uint32_t)crc32(0L, raw, raw_len) != crc) {
            if (zr == Z_MEM_ERROR) {
                rc = -1;
                break;
            }
            p->truncated = 1;
            break;
        }
        off += zlen;
        int r = apply_payload(L, raw, raw_len);
        if (r == -2 || r == -3) {
            rc = r == -2 ? -1 : -3;
            break;
        }
        if (r < 0) {
            p->truncated = 1;
            break;
        }
    }
    inflateEnd(&zs);
    free(raw);
    return rc;
}

static int cmp_alloc_ix(const void *a, const void *b, void *allocs)
{
    const struct flamme_alloc *v = allocs;
    uint64_t x = v[*(const uint32_t *)a].id, y = v[*(const uint32_t *)b].id;
    return x < y ? -1 : x > y;
}

int flamme_alloc_match_events(struct flamme_alloc *allocs, size_t nallocs,
                              const struct flamme_alloc_event_rec *ev, size_t nev,
                              struct flamme_alloc_event_rec **left, size_t *nleft)
{
    if (!nev)
        return 0;
    if (nallocs > UINT32_MAX)
        return -1;
    uint32_t *ix = malloc((nallocs ? nallocs : 1) * sizeof *ix);
    if (!ix)
        return -1;
    for (size_t i = 0; i < nallocs; i++)
        ix[i] = (uint32_t)i;
    qsort_r(ix, nallocs, sizeof *ix, cmp_alloc_ix, allocs);
    size_t cap = left ? *nleft : 0;
    for (size_t k = 0; k < nev; k++) {
        const struct flamme_alloc_event_rec *e = &ev[k];
        size_t lo = 0, hi = nallocs;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (allocs[ix[mid]].id < e->id)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == nallocs || allocs[ix[lo]].id != e->id) {
            if (!left)
                continue;
            if (*nleft == cap) {
                cap = cap ? 2 * cap : 64;
                struct flamme_alloc_event_rec *n = realloc(*left, cap * sizeof *n);
                if (!n) {
                    free(ix);
                    return -1;
                }
                *left = n;
            }
            (*left)[(*nleft)++] = *e;
            continue;
        }
        struct flamme_alloc *a = &allocs[ix[lo]];
        if (e->event == FLAMME_ALLOC_PROMOTED)
            a->promoted_ns = e->time_ns;
        else if (e->event == FLAMME_ALLOC_DIED_MINOR || e->event == FLAMME_ALLOC_DIED_MAJOR)
            a->died_ns = e->time_ns ? e->time_ns : 1;
    }
    free(ix);
    return 0;
}

/* Gives each ALLOC the times of its ALLOC_EVENTs (matched by id: an event
 * may precede its ALLOC in the file); events of ids no ALLOC has are kept
 * in p->alloc_orphans (a block of an earlier segment). 0 / -1 (allocation). */
static int match_alloc_events(struct loader *L)
{
    struct flamme_profile *p = L->p;
    return flamme_alloc_match_events(p->allocs, p->nallocs, L->ev, L->nev, &p->alloc_orphans,
                                     &p->nalloc_orphans);
}

int flamme_profile_load(const char *path, struct flamme_profile *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    uint8_t *buf;
    size_t len;
    int r = read_file(fd, &buf, &len);
    int e = errno;
    close(fd);
    if (r < 0)
        return fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
    if (!flamme_is_profile(buf, len)) {
        free(buf);
        return fail(err, errlen, "%s: not a flamme profile", path);
    }
    if (len < 14) {
        free(buf);
        return fail(err, errlen, "%s: truncated profile header (%zu bytes)", path, len);
    }
    uint16_t major = get_u16(buf + 8), minor = get_u16(buf + 10);
    if (major > FLAMME_VERSION_MAJOR) {
        free(buf);
        return fail(err, errlen,
                    "%s: profile format %u.x is newer than this flamme (%u.x); upgrade flamme",
                    path, (unsigned)major, (unsigned)FLAMME_VERSION_MAJOR);
    }
    if (major < FLAMME_VERSION_MAJOR_OLDEST) {
        free(buf);
        return fail(err, errlen, "%s: profile format %u.%u is not supported", path,
                    (unsigned)major, (unsigned)minor);
    }
    uint32_t hsize = len >= 16 ? get_u32(buf + 12) : 0;
    if (len < FLAMME_HEADER_SIZE || hsize > len) {
        free(buf);
        return fail(err, errlen, "%s: truncated profile header (%zu bytes)", path, len);
    }
    if (hsize < FLAMME_HEADER_SIZE) {
        free(buf);
        return fail(err, errlen, "%s: bad profile header size %u", path, (unsigned)hsize);
    }
    decode_header(buf, &p->hdr);

    struct loader L = { .p = p, .major = major, .start_ns = p->hdr.start_monotonic_ns,
                        .file_len = len };
    if (major >= 2) { /* node 0, the empty stack */
        L.nodes = malloc(64 * sizeof *L.nodes);
        if (!L.nodes) {
            free(buf);
            return fail(err, errlen, "%s: out of memory while loading", path);
        }
        L.cap_nodes = 64;
        L.nodes[L.nnodes++] = (struct lnode){ 0, 0, 0, UINT32_MAX };
    }
    r = decode_chunks(&L, buf, len, hsize);
    free(buf);
    free(L.nodes);
    flamme_itab_free(&L.tids);
    free(L.has_thread_rec);
    if (r == 0 && match_alloc_events(&L) != 0)
        r = -1;
    free(L.ev);
    if (r == -3) {
        flamme_profile_free(p);
        return fail(err, errlen, "%s: not a profile flamme writes: it holds %s", path, L.limit);
    }
    if (r < 0) {
        flamme_profile_free(p);
        return fail(err, errlen, "%s: out of memory while loading", path);
    }
    p->file_bytes = len;
    p->nfiles = 1;
    if (sort_threads(p) != 0) {
        flamme_profile_free(p);
        return fail(err, errlen, "%s: out of memory while loading", path);
    }
    if (L.dropped)
        fprintf(stderr, "%s: warning: %llu records used undefined ids and were ignored\n", path,
                (unsigned long long)L.dropped);
    return 0;
}

void flamme_profile_free(struct flamme_profile *p)
{
    for (size_t i = 0; i < p->nframes; i++) {
        free(p->frames[i].function);
        free(p->frames[i].module);
        free_file(p->frames[i].file);
    }
    for (size_t i = 0; i < p->nstacks; i++)
        free(p->stacks[i].frames);
    for (size_t i = 0; i < p->nthreads; i++)
        free(p->threads[i].name);
    for (size_t i = 0; i < p->ninfo; i++) {
        free(p->info[i].key);
        free(p->info[i].value);
    }
    free(p->frames);
    free(p->stacks);
    free(p->samples);
    free(p->threads);
    free(p->info);
    free(p->gc);
    free(p->allocs);
    free(p->alloc_orphans);
    free(p->exit_detail);
    memset(p, 0, sizeof *p);
}

const struct flamme_thread *flamme_profile_thread(const struct flamme_profile *p, uint32_t tid)
{
    size_t lo = 0, hi = p->nthreads; /* sorted by (tid, serial) after load */
    while (lo < hi) { /* the first thread with tid >= the one asked */
        size_t mid = lo + (hi - lo) / 2;
        if (p->threads[mid].tid < tid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nthreads && p->threads[lo].tid == tid ? &p->threads[lo] : NULL;
}

int flamme_profile_sort_threads(struct flamme_profile *p)
{
    return sort_threads(p);
}

const char *flamme_profile_info(const struct flamme_profile *p, const char *key)
{
    for (size_t i = p->ninfo; i-- > 0;) /* the last INFO for a key wins */
        if (strcmp(p->info[i].key, key) == 0)
            return p->info[i].value;
    return NULL;
}
