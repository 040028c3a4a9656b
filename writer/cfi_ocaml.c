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
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* What table_symbol gathers: the symbols accept takes, of code (func) or
 * data, as (address, size). */
struct tables {
    int (*accept)(const char *name);
    int func;
    const char *str; /* the symbol table's names */
    uint64_t str_size;
    uint64_t (*v)[2];
    size_t n, cap;
};

/* flamme_elf_each_symbol's fn: keeps a defined symbol of the kind asked
 * (OCaml declares its frame tables without a type: NOTYPE) whose name
 * t->accept takes. Returns 0, or -1 when out of memory. */
static int table_symbol(void *p, const Elf64_Sym *y)
{
    struct tables *t = p;
    int type = ELF64_ST_TYPE(y->st_info);
    int kind = t->func ? type == STT_FUNC : type == STT_OBJECT || type == STT_NOTYPE;
    if (!kind || y->st_shndx == SHN_UNDEF || y->st_shndx >= SHN_LORESERVE ||
        y->st_name >= t->str_size || !t->accept(t->str + y->st_name))
        return 0;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        uint64_t(*nv)[2] = realloc(t->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n][0] = y->st_value;
    t->v[t->n++][1] = y->st_size;
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

/* The symbols of el that t accepts, sorted by address, aliases once. OCaml
 * links its executables with -E: they are dynamic symbols even in a
 * stripped file; the full table only when those have none. Returns their
 * number (t->v), or -1 when out of memory. */
static long gather(const struct flamme_elf *el, struct tables *t)
{
    if (table_symbols(el, SHT_DYNSYM, t) != 0 ||
        (t->n == 0 && table_symbols(el, SHT_SYMTAB, t) != 0)) {
        free(t->v);
        t->v = NULL;
        return -1;
    }
    if (t->n)
        qsort(t->v, t->n, sizeof *t->v, sym_cmp);
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (k == 0 || t->v[i][0] != t->v[k - 1][0])
            memcpy(t->v[k++], t->v[i], sizeof *t->v);
    t->n = k;
    return (long)k;
}

/* Calls fn(ctx, w, symbol) for each symbol of el that t accepts (gather),
 * w a window over el's file, until fn returns -1. Returns the sum of what
 * fn returned, or -1 (out of memory, or fn stopped). */
static long each_symbol(const struct flamme_elf *el, struct tables *t,
                        long (*fn)(void *ctx, struct win *w, const uint64_t sym[2]), void *ctx)
{
    long n = gather(el, t);
    if (n <= 0)
        return n;
    struct win w = { el, malloc(WIN_BYTES), 0, 0 };
    long total = w.buf ? 0 : -1;
    for (long i = 0; i < n && total >= 0; i++) {
        long got = fn(ctx, &w, t->v[i]);
        total = got < 0 ? -1 : total + got;
    }
    free(w.buf);
    free(t->v);
    return total;
}

struct site_walk {
    const struct flamme_frame_sites_ops *ops;
    flamme_frame_site_fn site;
    void *ctx;
};

/* each_symbol's fn for a frame table: its number of sites, or -1. */
static long table_sites(void *p, struct win *w, const uint64_t sym[2])
{
    struct site_walk *s = p;
    return s->ops->sites(sym[0], win_read, w, s->site, s->ctx);
}

long flamme_cfi_ocaml_sites(const struct flamme_elf *el, const struct flamme_frame_sites_ops *ops,
                            flamme_frame_site_fn site, void *ctx)
{
    if (!ops || !ops->is_table || !ops->sites || !el->ph)
        return 0;
    struct tables t = { ops->is_table, 0, NULL, 0, NULL, 0, 0 };
    struct site_walk s = { ops, site, ctx };
    return each_symbol(el, &t, table_sites, &s);
}

struct switch_walk {
    const struct flamme_frame_sites_ops *ops;
    int (*span)(void *ctx, const struct flamme_switch_span *s);
    void *ctx;
};

/* each_symbol's fn for a function ops->is_switch_fn named: 1 when it has
 * a span (handed to span), 0 when not, -1 when span stopped. */
static long switch_spans(void *p, struct win *w, const uint64_t sym[2])
{
    struct switch_walk *s = p;
    struct flamme_switch_span sp;
    if (!s->ops->switch_span(sym[0], sym[1], win_read, w, &sp))
        return 0;
    return s->span(s->ctx, &sp) != 0 ? -1 : 1;
}

long flamme_cfi_ocaml_switches(const struct flamme_elf *el,
                               const struct flamme_frame_sites_ops *ops,
                               int (*span)(void *ctx, const struct flamme_switch_span *s),
                               void *ctx)
{
    if (!ops || !ops->is_switch_fn || !ops->switch_span || !el->ph)
        return 0;
    struct tables t = { ops->is_switch_fn, 1, NULL, 0, NULL, 0, 0 };
    struct switch_walk s = { ops, span, ctx };
    return each_symbol(el, &t, switch_spans, &s);
}
