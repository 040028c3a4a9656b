/*
 * writer/cfi_ocaml.c — the call sites of an image's OCaml frame tables and
 * the runtime's unannounced stack switches (see writer/cfi_ocaml.h). Their
 * layout and code are runtime_hooks' (frametable.c, switch_rows.c), reached
 * through struct flamme_frame_sites_ops; here only the ELF side: which
 * symbols, and reading link-time addresses of the file.
 * Who: writer/cfi_build.c under its build lock (writer thread or agent
 * start-up); allocates, reads the file. Never a signal handler.
 */
#include "writer/cfi_ocaml.h"

#include <stdlib.h>
#include <string.h>

#define WIN_BYTES (64u << 10)     /* file bytes read at a time */
#define STRTAB_MAX (256u << 20)   /* a larger symbol string table is refused */

/* Link-time addresses of the image read through a window of its file. */
struct win {
    const struct flamme_elf *el;
    uint8_t *buf;
    uint64_t base, len; /* the window holds [base, base + len) */
};

/* flamme_image_read_fn: from the file bytes of the PT_LOAD segment holding
 * addr (not its zero-filled tail). A read may not cross a segment's end. */
static int win_read(void *p, uint64_t addr, void *dst, size_t len)
{
    struct win *w = p;
    if (len > WIN_BYTES || addr + len < addr)
        return -1;
    if (addr < w->base || addr + len > w->base + w->len) {
        const struct flamme_elf *el = w->el;
        size_t i = 0;
        for (; i < el->phnum; i++) {
            const Elf64_Phdr *ph = &el->ph[i];
            if (ph->p_type == PT_LOAD && addr >= ph->p_vaddr && addr - ph->p_vaddr < ph->p_filesz)
                break;
        }
        if (i == el->phnum)
            return -1;
        const Elf64_Phdr *ph = &el->ph[i];
        uint64_t off = ph->p_offset + (addr - ph->p_vaddr);
        uint64_t n = ph->p_filesz - (addr - ph->p_vaddr);
        if (n > WIN_BYTES)
            n = WIN_BYTES;
        if (off >= el->size)
            return -1;
        if (n > el->size - off)
            n = el->size - off;
        w->len = 0;
        if (n < len || flamme_elf_read(el, off, w->buf, n) != 0)
            return -1;
        w->base = addr;
        w->len = n;
    }
    memcpy(dst, w->buf + (addr - w->base), len);
    return 0;
}

static int sym_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[2] < y[2] ? -1 : x[2] > y[2];
}

#define KIND_TABLE 0 /* a frame table (data) */
#define KIND_SWITCH 1 /* a runtime function with an unannounced stack switch */

/* What table_symbol gathers in one pass: the data symbols `table` takes and
 * the function symbols `func` takes (either NULL: none), as (address,
 * size, KIND_*). */
struct tables {
    int (*table)(const char *name);
    int (*func)(const char *name);
    const char *str; /* the symbol table's names */
    uint64_t str_size;
    uint64_t (*v)[3];
    size_t n, cap;
};

/* flamme_elf_each_symbol's fn: keeps a defined symbol of a kind asked for
 * (OCaml declares its frame tables without a type: NOTYPE) whose name its
 * predicate takes. Returns 0, or -1 when out of memory. */
static int table_symbol(void *p, const Elf64_Sym *y)
{
    struct tables *t = p;
    int type = ELF64_ST_TYPE(y->st_info);
    if (y->st_shndx == SHN_UNDEF || y->st_shndx >= SHN_LORESERVE || y->st_name >= t->str_size)
        return 0;
    const char *name = t->str + y->st_name;
    uint64_t kind;
    if ((type == STT_OBJECT || type == STT_NOTYPE) && t->table && t->table(name))
        kind = KIND_TABLE;
    else if (type == STT_FUNC && t->func && t->func(name))
        kind = KIND_SWITCH;
    else
        return 0;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        uint64_t(*nv)[3] = realloc(t->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n][0] = y->st_value;
    t->v[t->n][1] = y->st_size;
    t->v[t->n++][2] = kind;
    return 0;
}

/* Adds to t the symbols it accepts among those of el's table of the given
 * type. Returns 0 (also when the table is absent, unreadable or its names
 * too large to copy), or -1 when out of memory. */
static int table_symbols(const struct flamme_elf *el, uint32_t type, struct tables *t)
{
    const Elf64_Shdr *tab = flamme_elf_symtab(el, type);
    if (!tab || tab->sh_link >= el->shnum || el->sh[tab->sh_link].sh_type != SHT_STRTAB)
        return 0;
    const Elf64_Shdr *ss = &el->sh[tab->sh_link];
    char *str = flamme_elf_copy(el, ss->sh_offset, ss->sh_size, STRTAB_MAX);
    if (!str)
        return 0;
    t->str = str;
    t->str_size = ss->sh_size;
    int rc = flamme_elf_each_symbol(el, tab, table_symbol, t) != 0 ? -1 : 0;
    free(str);
    return rc;
}

/* 1 if t holds a symbol of this kind. */
static int has_kind(const struct tables *t, uint64_t kind)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i][2] == kind)
            return 1;
    return 0;
}

/* The symbols of el that t accepts, sorted by address, aliases once. OCaml
 * links its executables with -E: they are dynamic symbols even in a
 * stripped file; the full table, for a kind .dynsym has none of, only
 * then. Returns their number (t->v), or -1 when out of memory. */
static long gather(const struct flamme_elf *el, struct tables *t)
{
    int rc = table_symbols(el, SHT_DYNSYM, t);
    if (rc == 0) {
        struct tables more = *t;
        more.table = t->table && !has_kind(t, KIND_TABLE) ? t->table : NULL;
        more.func = t->func && !has_kind(t, KIND_SWITCH) ? t->func : NULL;
        if (more.table || more.func) {
            rc = table_symbols(el, SHT_SYMTAB, &more);
            t->v = more.v;
            t->n = more.n;
            t->cap = more.cap;
        }
    }
    if (rc != 0) {
        free(t->v);
        t->v = NULL;
        return -1;
    }
    if (t->n)
        qsort(t->v, t->n, sizeof *t->v, sym_cmp);
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (k == 0 || t->v[i][0] != t->v[k - 1][0] || t->v[i][2] != t->v[k - 1][2])
            memcpy(t->v[k++], t->v[i], sizeof *t->v);
    t->n = k;
    return (long)k;
}

int flamme_cfi_ocaml_scan(const struct flamme_elf *el, const struct flamme_frame_sites_ops *ops,
                          flamme_frame_site_fn site, void *site_ctx,
                          int (*span)(void *ctx, const struct flamme_switch_span *s),
                          void *span_ctx)
{
    if (!ops || !el->ph)
        return 0;
    struct tables t = { site && ops->is_table && ops->sites ? ops->is_table : NULL,
                        span && ops->is_switch_fn && ops->switch_span ? ops->is_switch_fn : NULL,
                        NULL, 0, NULL, 0, 0 };
    if (!t.table && !t.func)
        return 0;
    long n = gather(el, &t);
    if (n <= 0)
        return n < 0 ? -1 : 0;
    struct win w = { el, malloc(WIN_BYTES), 0, 0 };
    int rc = w.buf ? 0 : -1;
    for (long i = 0; i < n && rc == 0; i++) {
        if (t.v[i][2] == KIND_TABLE) {
            rc = ops->sites(t.v[i][0], win_read, &w, site, site_ctx) < 0 ? -1 : 0;
        } else {
            struct flamme_switch_span sp;
            if (ops->switch_span(t.v[i][0], t.v[i][1], win_read, &w, &sp))
                rc = span(span_ctx, &sp) != 0 ? -1 : 0;
        }
    }
    free(w.buf);
    free(t.v);
    return rc;
}
