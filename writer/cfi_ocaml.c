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
#define SYM_CHUNK 2048            /* symbols read at a time */

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

/* Appends to *v the values of the data symbols of the symbol table of the
 * given type whose names ops->is_table accepts. Returns 0 (also when the
 * table is absent or unreadable), or -1 when out of memory. */
static int table_symbols(const struct flamme_elf *el, uint32_t type,
                         const struct flamme_frame_sites_ops *ops, uint64_t **v, size_t *n,
                         size_t *cap)
{
    const Elf64_Shdr *tab = NULL;
    for (size_t i = 0; i < el->shnum && !tab; i++)
        if (el->sh[i].sh_type == type && el->sh[i].sh_entsize == sizeof(Elf64_Sym))
            tab = &el->sh[i];
    if (!tab || tab->sh_link >= el->shnum || el->sh[tab->sh_link].sh_type != SHT_STRTAB)
        return 0;
    const Elf64_Shdr *ss = &el->sh[tab->sh_link];
    char *str = flamme_elf_copy(el, ss->sh_offset, ss->sh_size, STRTAB_MAX);
    Elf64_Sym *buf = str ? malloc(SYM_CHUNK * sizeof *buf) : NULL;
    int rc = 0;
    size_t nsym = (size_t)(tab->sh_size / sizeof(Elf64_Sym));
    for (size_t at = 0; buf && at < nsym && rc == 0; at += SYM_CHUNK) {
        size_t k = nsym - at < SYM_CHUNK ? nsym - at : SYM_CHUNK;
        if (flamme_elf_read(el, tab->sh_offset + at * sizeof *buf, buf, k * sizeof *buf) != 0)
            break;
        for (size_t j = 0; j < k; j++) {
            const Elf64_Sym *y = &buf[j];
            /* OCaml declares its tables without a type (NOTYPE). */
            int t = ELF64_ST_TYPE(y->st_info);
            if ((t != STT_OBJECT && t != STT_NOTYPE) || y->st_shndx == SHN_UNDEF ||
                y->st_shndx >= SHN_LORESERVE || y->st_name >= ss->sh_size ||
                !ops->is_table(str + y->st_name))
                continue;
            if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 64;
                uint64_t *nv = realloc(*v, nc * sizeof *nv);
                if (!nv) {
                    rc = -1;
                    break;
                }
                *v = nv;
                *cap = nc;
            }
            (*v)[(*n)++] = y->st_value;
        }
    }
    /* A table too large to copy is skipped (no sites), not an error. */
    if (str && !buf)
        rc = -1;
    free(buf);
    free(str);
    return rc;
}

long flamme_cfi_ocaml_sites(const struct flamme_elf *el, const struct flamme_frame_sites_ops *ops,
                            flamme_frame_site_fn site, void *ctx)
{
    uint64_t *tables = NULL;
    size_t n = 0, cap = 0;
    if (!ops || !ops->is_table || !ops->sites || !el->ph)
        return 0;
    /* OCaml links its executables with -E: the tables are dynamic symbols
     * even in a stripped file. The full table only when those are not. */
    if (table_symbols(el, SHT_DYNSYM, ops, &tables, &n, &cap) != 0 ||
        (n == 0 && table_symbols(el, SHT_SYMTAB, ops, &tables, &n, &cap) != 0)) {
        free(tables);
        return -1;
    }
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
