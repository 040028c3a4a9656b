/*
 * runtime_hooks/frametable.c — frame-table index for Memprof callstacks
 * (see frametable.h). The layout is OCaml 5.3's (runtime/caml/
 * frame_descriptors.h, runtime/backtrace_nat.c):
 *   descriptor = u64 retaddr, u16 frame_data, u16 num_live, u16 live_ofs[num_live],
 *     if frame_data & 2 (allocs): u8 num_allocs, u8 len[num_allocs],
 *     if frame_data & 1 (debug): aligned to 4, u32 rel[allocs ? num_allocs : 1]
 *       (each an offset from itself to a debuginfo; 0: none),
 *     then aligned to 8. frame_data 0xFFFF (return to C): header only.
 *   slot value = address | 1; a debuginfo slot has bit 1 set as well.
 */
#include "runtime_hooks/frametable.h"
#include "common/forkchild.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FD_DEBUG 1u
#define FD_ALLOC 2u
#define FD_RETURN_TO_C 0xFFFFu
#define FD_FLAGS 3u /* FRAME_DESCRIPTOR_FLAGS: the frame size is the rest */

struct ent {
    uintptr_t dbg, ret; /* dbg 0: empty */
};

static struct ent *tab;
static size_t mask;
/* Every descriptor's return address (0: empty), for
 * flamme_frametable_is_ocaml_ret. */
static uintptr_t *rets;
static size_t rmask;
static int built;
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(uintptr_t dbg)
{
    return (size_t)((dbg >> 2) * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

static uint64_t align(uint64_t p, uint64_t a)
{
    return (p + a - 1) & ~(a - 1);
}

/* One descriptor, as descr_at reads it. */
struct descr {
    uint64_t ret;  /* the call's return address */
    uint64_t next; /* the following descriptor's address */
    uint64_t dbg;  /* (data & FD_DEBUG) the first u32 debuginfo offset's address */
    unsigned ndbg; /* how many of them */
    uint16_t data;
};

/* Reads the descriptor at d through rd. Returns 0, or -1 when rd cannot
 * read it. */
static int descr_at(flamme_image_read_fn rd, void *ctx, uint64_t d, struct descr *o)
{
    uint8_t h[12];
    uint16_t live;
    if (rd(ctx, d, h, sizeof h) != 0)
        return -1;
    memcpy(&o->ret, h, 8);
    memcpy(&o->data, h + 8, 2);
    memcpy(&live, h + 10, 2);
    o->dbg = 0;
    o->ndbg = 0;
    if (o->data == FD_RETURN_TO_C) {
        o->next = align(d + 12, 8);
        return 0;
    }
    uint64_t p = d + 12 + 2 * (uint64_t)live;
    unsigned nallocs = 0;
    if (o->data & FD_ALLOC) {
        uint8_t b;
        if (rd(ctx, p, &b, 1) != 0)
            return -1;
        nallocs = b;
        p += nallocs + 1;
    }
    if (o->data & FD_DEBUG) {
        p = align(p, 4);
        o->dbg = p;
        o->ndbg = (o->data & FD_ALLOC) ? nallocs : 1;
        p += 4 * (uint64_t)o->ndbg;
    }
    o->next = align(p, 8);
    return 0;
}

/* flamme_image_read_fn over this process's memory (the runtime's own
 * tables, trusted). */
static int mem_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
    (void)ctx;
    memcpy(dst, (const void *)(uintptr_t)addr, len);
    return 0;
}

/* Calls fn(ret, dbg) for each allocation debuginfo of each descriptor and
 * returns how many there were; counts the descriptors into *ndescr and
 * calls fret(ret) for each when given. */
static size_t walk(void *const *tables, void (*fn)(uintptr_t ret, uintptr_t dbg), size_t *ndescr,
                   void (*fret)(uintptr_t ret))
{
    size_t n = 0;
    for (size_t t = 0; tables[t]; t++) {
        const int64_t *tbl = tables[t];
        int64_t len = tbl[0];
        uint64_t d = (uintptr_t)(tbl + 1);
        for (int64_t j = 0; j < len; j++) {
            struct descr o;
            descr_at(mem_read, NULL, d, &o);
            ++*ndescr;
            if (fret)
                fret(o.ret);
            for (unsigned k = 0; (o.data & FD_ALLOC) && k < o.ndbg; k++) {
                uintptr_t p = (uintptr_t)(o.dbg + 4 * (uint64_t)k);
                uint32_t rel = *(const uint32_t *)p;
                if (rel) {
                    if (fn)
                        fn(o.ret, p + rel);
                    n++;
                }
            }
            d = o.next;
        }
    }
    return n;
}

int flamme_frametable_is_table_symbol(const char *name)
{
    static const char dot[] = ".frametable", under[] = "__frametable";
    size_t n = strlen(name);
    if (strncmp(name, "caml", 4) != 0)
        return 0;
    return (n > 4 + sizeof dot - 1 && strcmp(name + n - (sizeof dot - 1), dot) == 0) ||
           (n > 4 + sizeof under - 1 && strcmp(name + n - (sizeof under - 1), under) == 0);
}

long flamme_frametable_image_sites(uint64_t table, flamme_image_read_fn rd, void *rctx,
                                   flamme_frame_site_fn site, void *sctx)
{
    int64_t len;
    long n = 0;
    if (rd(rctx, table, &len, sizeof len) != 0)
        return 0;
    /* Each descriptor is at least 16 bytes on: a count the image cannot
     * hold ends at its first unreadable descriptor. */
    uint64_t d = table + 8;
    for (int64_t j = 0; j < len; j++) {
        struct descr o;
        if (descr_at(rd, rctx, d, &o) != 0)
            break;
        if (o.data != FD_RETURN_TO_C) {
            if (site(sctx, o.ret, o.data & ~FD_FLAGS) != 0)
                return -1;
            n++;
        }
        d = o.next;
    }
    return n;
}

static size_t ret_slot(uintptr_t ret)
{
    return (size_t)(ret * 0x9E3779B97F4A7C15ull >> 20) & rmask;
}

static void insert_ret(uintptr_t ret)
{
    size_t i = ret_slot(ret);
    while (rets[i] && rets[i] != ret)
        i = (i + 1) & rmask;
    rets[i] = ret;
}

static void insert(uintptr_t ret, uintptr_t dbg)
{
    size_t i = slot_of(dbg);
    while (tab[i].dbg && tab[i].dbg != dbg)
        i = (i + 1) & mask;
    tab[i] = (struct ent){dbg, ret}; /* a debuginfo shared by two sites: the last */
}

int flamme_frametable_index(void *const *tables)
{
    pthread_mutex_lock(&build_lock);
    int rc = 0;
    if (!built && tables) {
        size_t nd = 0, n = walk(tables, NULL, &nd, NULL), cap = 16, rcap = 16;
        while (cap < 2 * n)
            cap *= 2;
        while (rcap < 2 * nd)
            rcap *= 2;
        tab = calloc(cap, sizeof *tab);
        rets = calloc(rcap, sizeof *rets);
        if (tab && rets) {
            mask = cap - 1;
            rmask = rcap - 1;
            walk(tables, insert, &nd, insert_ret);
        } else {
            free(tab);
            free(rets);
            tab = NULL;
            rets = NULL;
            rc = -1;
        }
        built = 1;
    }
    pthread_mutex_unlock(&build_lock);
    return rc;
}

uintptr_t flamme_frametable_slot_addr(uintptr_t v)
{
    uintptr_t p = v & ~(uintptr_t)3;
    if (!p)
        return 0;
    if (!(v & 2))
        return *(const uintptr_t *)p; /* a frame descriptor: its return address */
    if (!tab)
        return 0;
    for (size_t i = slot_of(p);; i = (i + 1) & mask) {
        if (tab[i].dbg == p)
            return tab[i].ret;
        if (!tab[i].dbg)
            return 0;
    }
}

int flamme_frametable_is_ocaml_ret(uintptr_t pc)
{
    if (!rets || !pc)
        return 0;
    for (size_t i = ret_slot(pc);; i = (i + 1) & rmask) {
        if (rets[i] == pc)
            return 1;
        if (!rets[i])
            return 0;
    }
}

int flamme_frametable_atfork_child(void)
{
    return flamme_mutex_reset_child(&build_lock);
}
