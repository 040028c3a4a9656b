/*
 * writer/cfi_ocaml.c — the call sites of an image's OCaml frame tables (see
 * writer/cfi_ocaml.h). The tables' layout is runtime_hooks/frametable.c's,
 * reached through struct flamme_frame_sites_ops; here only the ELF side:
 * which symbols, and reading link-time addresses of the file.
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

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What table_symbol gathers: the frame tables' addresses. */
struct tables {
    const struct flamme_frame_sites_ops *ops;
    const char *str; /* the symbol table's names */
    uint64_t str_size;
    uint64_t *v;
    size_t n, cap;
};

/* flamme_elf_each_symbol's fn: keeps a data symbol (OCaml declares its
 * tables without a type: NOTYPE) whose name ops->is_table accepts.
 * Returns 0, or -1 when out of memory. */
static int table_symbol(void *p, const Elf64_Sym *y)
{
    struct tables *t = p;
    int type = ELF64_ST_TYPE(y->st_info);
    if ((type != STT_OBJECT && type != STT_NOTYPE) || y->st_shndx == SHN_UNDEF ||
        y->st_shndx >= SHN_LORESERVE || y->st_name >= t->str_size ||
        !t->ops->is_table(t->str + y->st_name))
        return 0;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        uint64_t *nv = realloc(t->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = y->st_value;
    return 0;
}

/* Adds to t the frame tables among the symbols of el's table of the given
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

long flamme_cfi_ocaml_sites(const struct flamme_elf *el, const struct flamme_frame_sites_ops *ops,
                            flamme_frame_site_fn site, void *ctx)
{
    if (!ops || !ops->is_table || !ops->sites || !el->ph)
        return 0;
    struct tables t = { ops, NULL, 0, NULL, 0, 0 };
    /* OCaml links its executables with -E: the tables are dynamic symbols
     * even in a stripped file. The full table only when those are not. */
    if (table_symbols(el, SHT_DYNSYM, &t) != 0 ||
        (t.n == 0 && table_symbols(el, SHT_SYMTAB, &t) != 0)) {
        free(t.v);
        return -1;
    }
    uint64_t *tables = t.v;
    size_t n = t.n;
    if (n == 0)
        return 0;
    qsort(tables, n, sizeof *tables, u64_cmp);
    struct win w = { el, malloc(WIN_BYTES), 0, 0 };
    long total = w.buf ? 0 : -1;
    for (size_t i = 0; i < n && total >= 0; i++) {
        if (i > 0 && tables[i] == tables[i - 1])
            continue; /* an alias */
        long got = ops->sites(tables[i], win_read, &w, site, ctx);
        total = got < 0 ? -1 : total + got;
    }
    free(w.buf);
    free(tables);
    return total;
}
