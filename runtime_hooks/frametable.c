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

#include <pthread.h>
#include <stdlib.h>

#define FD_DEBUG 1u
#define FD_ALLOC 2u
#define FD_RETURN_TO_C 0xFFFFu

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

static uintptr_t align(uintptr_t p, uintptr_t a)
{
    return (p + a - 1) & ~(a - 1);
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
        uintptr_t d = (uintptr_t)(tbl + 1);
        for (int64_t j = 0; j < len; j++) {
            uintptr_t ret = *(const uintptr_t *)d;
            uint16_t data = *(const uint16_t *)(d + 8), live = *(const uint16_t *)(d + 10);
            ++*ndescr;
            if (fret)
                fret(ret);
            if (data == FD_RETURN_TO_C) {
                d = align(d + 12, 8);
                continue;
            }
            uintptr_t p = d + 12 + 2 * (uintptr_t)live;
            unsigned nallocs = 0;
            if (data & FD_ALLOC) {
                nallocs = *(const uint8_t *)p;
                p += nallocs + 1;
            }
            if (data & FD_DEBUG) {
                p = align(p, 4);
                unsigned ninfo = (data & FD_ALLOC) ? nallocs : 1;
                for (unsigned k = 0; k < ninfo; k++, p += 4) {
                    uint32_t rel = *(const uint32_t *)p;
                    if (rel && (data & FD_ALLOC)) {
                        if (fn)
                            fn(ret, p + rel);
                        n++;
                    }
                }
            }
            d = align(p, 8);
        }
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
