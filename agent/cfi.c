/*
 * agent/cfi.c — the walker's side of the .eh_frame unwind rows (see
 * agent/cfi.h): finding the row that covers a pc. Runs in the SIGPROF
 * handler on any thread: no malloc, no locks, no stdio; two binary searches
 * over immutable arrays that writer/cfi_build.c publishes
 * (common/cfi_tables.h).
 */
#include "agent/cfi.h"
#include "common/cfi_tables.h"

/* ------------------------------------------------------------ lookup */

/* The module of s covering pc and the index of its row there (the last
 * one starting at or before pc), or NULL. */
static const struct cfi_mod *find_row(const struct cfi_set *s, uint64_t pc, uint32_t *idx)
{
    if (!s || s->n == 0)
        return NULL;
    size_t lo = 0, hi = s->n; /* first module with lo > pc */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->mod[mid]->lo <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct cfi_mod *m = s->mod[lo - 1];
    if (pc >= m->hi || m->n == 0)
        return NULL;
    uint32_t off = (uint32_t)(pc - m->lo);
    size_t a = 0, b = m->n; /* first row with off > pc's */
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (m->off[mid] <= off)
            a = mid + 1;
        else
            b = mid;
    }
    if (a == 0)
        return NULL;
    *idx = (uint32_t)(a - 1);
    return m;
}

/* Fills *row from row idx of m. Returns 1, or 0 for a gap. */
static int fill_row(const struct cfi_mod *m, uint32_t idx, struct flamme_cfi_row *row)
{
    const struct rule *r = &m->rules[m->rid[idx]]; /* rid < nrules: built or checked so */
    if (r->reg == RULE_GAP)
        return 0;
    row->pc = m->lo + m->off[idx];
    row->dwreg = r->dwreg;
    row->cfa_off = r->cfa_off;
    row->nderef = 0;
    row->mid_add = 0;
    row->cfa_add = 0;
    if (r->reg == RULE_DEREF) {
        row->cfa_reg = r->dwreg == FLAMME_DW_RSP   ? FLAMME_CFA_DEREF_RSP
                       : r->dwreg == FLAMME_DW_RBP ? FLAMME_CFA_DEREF_RBP
                                                   : FLAMME_CFA_DEREF_REG;
        row->nderef = r->deref & 3;
        row->mid_add = r->deref >> 2;
        row->cfa_add = r->cfa_add;
    } else if (r->reg == RULE_REG) {
        row->cfa_reg = r->dwreg == FLAMME_DW_RSP   ? FLAMME_CFA_RSP
                       : r->dwreg == FLAMME_DW_RBP ? FLAMME_CFA_RBP
                                                   : FLAMME_CFA_REG;
    } else {
        row->cfa_reg = FLAMME_CFA_UNKNOWN;
    }
    for (int i = 0; i < FLAMME_CFI_NSAVED; i++)
        row->save[i] = r->save[i] == SAVE_SLOT_LOST ? FLAMME_SAVE_LOST : 8 * (int32_t)r->save[i];
    row->rbp_off = row->save[0] == FLAMME_SAVE_LOST ? 0 : row->save[0];
    return 1;
}

int flamme_cfi_lookup_sigsafe(uint64_t pc, struct flamme_cfi_row *row)
{
    /* Pairs with the release store in publish() (writer/cfi_build.c). */
    const struct cfi_set *s = atomic_load_explicit(&flamme_cfi_published, memory_order_acquire);
    uint32_t idx = 0;
    const struct cfi_mod *m = find_row(s, pc, &idx);
    return m ? fill_row(m, idx, row) : 0;
}

int flamme_cfi_lookup_cached_sigsafe(struct flamme_cfi_cache *c, uint64_t pc,
                                     struct flamme_cfi_row *row)
{
    if (!c)
        return flamme_cfi_lookup_sigsafe(pc, row);
    /* Pairs with the release store in publish() (writer/cfi_build.c). */
    const struct cfi_set *s = atomic_load_explicit(&flamme_cfi_published, memory_order_acquire);
    if (c->set != s) {
        /* Another set: rows of a module gone or added would be stale. Sets
         * are never freed while sampling, so the pointer names one set. */
        for (size_t i = 0; i < FLAMME_CFI_CACHE; i++)
            c->e[i].pc = 0;
        c->set = s;
    }
    struct flamme_cfi_cache_entry *e =
        &c->e[(pc * 0x9E3779B97F4A7C15ull) >> (64 - FLAMME_CFI_CACHE_BITS)];
    if (e->pc != pc || pc == 0) {
        uint32_t idx = 0;
        const struct cfi_mod *m = find_row(s, pc, &idx);
        e->found = m ? fill_row(m, idx, &e->row) : 0;
        e->pc = pc;
    }
    if (e->found)
        *row = e->row;
    return e->found;
}
