/*
 * writer/symbols.c — symbolizer for the running process (see writer/symbols.h).
 *
 * Owns: the process's list of executable mappings (/proc/self/maps) and one
 * parsed symbol table per mapped ELF file. Called by the writer thread only,
 * once per distinct return address (the dedup layer makes that rare), never
 * from a signal handler: it allocates and opens files.
 *
 * How an address is named:
 *  1. find the executable mapping containing it (binary search; on a miss
 *     /proc/self/maps is re-read, at most once per 100 ms, for dlopen);
 *  2. parse that mapping's ELF lazily on first use: .symtab and .dynsym
 *     symbols that lie in executable sections (.dynsym only at addresses
 *     .symtab lacks), sorted by address once, with
 *     FUNC/IFUNC preferred over NOTYPE/OBJECT at the same address (OCaml's
 *     caml_startup.code_begin aliases caml_program);
 *  3. map the address to an ELF vaddr with the load bias computed from the
 *     PT_LOAD header that contains the mapping's file offset;
 *  4. a sized symbol covering the vaddr names it. Otherwise, inside .text
 *     only, the nearest preceding symbol names it if that symbol has no size
 *     (hand-written asm without .size) and is not an OCaml code_begin /
 *     code_end marker. An address in a gap after a sized symbol (a stripped
 *     static function, e.g. in Debian's libc) stays module-only: naming it
 *     after its neighbour would be a confident lie.
 *
 * A large executable's symbols, once parsed, are kept between processes
 * (load_kept, store_kept; writer/cfi_cache.h).
 *
 * Images are read through writer/elf.c (pread into private buffers, never a
 * kept mapping, every offset checked). The file is opened
 * through /proc/self/map_files/<range> when possible, which yields the very
 * inode that is mapped even if the path now names another file ("(deleted)");
 * otherwise by path, and only if its inode still matches /proc/self/maps.
 * The vDSO is parsed from memory (getauxval(AT_SYSINFO_EHDR)). A file with
 * no .symtab (Debian's libc) also gets the .symtab of its separate debug
 * file, /usr/lib/debug/.build-id/xx/yyyy.debug, when one is installed
 * (libc6-dbg): glibc's thread roots start_thread and __libc_start_call_main
 * are static functions.
 */
#include "writer/symbols.h"
#include "common/bulk.h"
#include "common/fds.h"
#include "writer/cfi_cache.h"
#include "writer/elf.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REFRESH_MIN_NS 100000000ull /* re-read maps on a miss at most every 100 ms */
#define COVER_WALK_MAX 256           /* nested sized symbols searched backwards */
#define MAX_STRTABS 4 /* .symtab, .dynsym, a debug file's .symtab, PLT names */
#define PLT_SLOT (MAX_STRTABS - 1)
#define PLT_ENTRY 16 /* x86_64 .plt / .plt.sec entry size */
#define SYM_CHUNK 2048 /* symbols read at a time (48 KiB) */

struct sym {
    uint64_t addr, size;
    const char *name;
    uint8_t info; /* st_info: ranks it among aliases (sym_rank) */
};

enum mod_state { MOD_UNPARSED, MOD_OK, MOD_FAILED };

struct module {
    char *path;      /* as shown in maps, without " (deleted)" */
    uint64_t inode;
    int is_vdso;
    enum mod_state state;
    struct sym *syms; /* sorted by addr, one per address */
    int syms_in_blob; /* syms lies inside strbufs[0] (load_kept, a common/bulk.h
                       * block): not freed apart */
    uint64_t *maxend; /* maxend[i] = max end of sized syms[0..i] */
    size_t nsyms;
    uint64_t text_lo, text_hi; /* .text vaddr range, 0/0 if unknown */
    Elf64_Phdr *phdrs;
    size_t nphdrs;
    char *strbufs[MAX_STRTABS]; /* string tables the names point into (none for the vDSO) */
};

struct mapping {
    uint64_t start, end, file_off;
    struct module *mod;
    int bias_known;
    uint64_t bias; /* runtime address - ELF vaddr */
};

struct flamme_symtab {
    struct mapping *maps;
    size_t nmaps;
    struct module **mods;
    size_t nmods, capmods;
    uint64_t last_refresh_ns;
    uint64_t parse_ns; /* CPU time reading modules' symbols (ensure_parsed) */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ symbols */

static int is_code_marker(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || (name[n - 1] != 'n' && name[n - 1] != 'd'))
        return 0; /* the suffixes below end so: most names are out at once */
    static const char *const sfx[] = { ".code_begin", ".code_end", "__code_begin", "__code_end" };
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        size_t k = strlen(sfx[i]);
        if (n >= k && strcmp(name + n - k, sfx[i]) == 0)
            return 1;
    }
    return 0;
}

/* Rank of a symbol among aliases at one address: functions first, then
 * sized ones, then global over weak over local, then fewer leading '_'
 * (memcpy over __memcpy). */
static int sym_rank(const struct sym *s)
{
    int type = ELF64_ST_TYPE(s->info), bind = ELF64_ST_BIND(s->info);
    int r = (type == STT_FUNC || type == STT_GNU_IFUNC) ? 0 : 32;
    if (s->size == 0)
        r += 16;
    if (is_code_marker(s->name))
        r += 8;
    r += bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 2 : 4;
    if (s->name[0] == '_')
        r += 1;
    return r;
}

/* 1 if x names an address better than y (sym_rank, then the name). Ranked
 * here, for aliases only: ranking each of the OCaml compiler's 62,000
 * symbols as it was read (a strlen each) was a tenth of reading them. */
static int sym_better(const struct sym *x, const struct sym *y)
{
    int rx = sym_rank(x), ry = sym_rank(y);
    if (rx != ry)
        return rx < ry;
    return strcmp(x->name, y->name) < 0;
}

static int sym_addr_cmp(const void *a, const void *b)
{
    const struct sym *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

#define RADIX_BITS 11

/* Sorts a[0..n) by address, in any order among equal ones: a radix sort,
 * as many 11-bit passes as the largest address needs (3 for a 16 MB
 * executable's vaddrs). glibc's qsort with a comparison by address, rank
 * and name was a third of the time to read the OCaml compiler's 62,000
 * symbols. Falls back to qsort when out of memory. */
static void sort_by_addr(struct sym *a, size_t n)
{
    uint64_t max = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i].addr > max)
            max = a[i].addr;
    struct sym *tmp = malloc(n * sizeof *tmp);
    size_t *count = malloc(((size_t)1 << RADIX_BITS) * sizeof *count);
    if (!tmp || !count) {
        free(tmp);
        free(count);
        qsort(a, n, sizeof *a, sym_addr_cmp);
        return;
    }
    struct sym *src = a, *dst = tmp;
    for (unsigned shift = 0; shift < 64 && (max >> shift) != 0; shift += RADIX_BITS) {
        const uint64_t mask = ((uint64_t)1 << RADIX_BITS) - 1;
        memset(count, 0, ((size_t)1 << RADIX_BITS) * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[(src[i].addr >> shift) & mask]++;
        size_t sum = 0;
        for (size_t d = 0; d < ((size_t)1 << RADIX_BITS); d++) {
            size_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i].addr >> shift) & mask]++] = src[i];
        struct sym *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
    free(tmp);
    free(count);
}

/* 1 if the entry can name code: defined in an executable section, of a
 * type a function can have, with a name. */
static int code_sym(const Elf64_Shdr *sh, size_t shnum, const Elf64_Sym *es, uint64_t strsize)
{
    int type = ELF64_ST_TYPE(es->st_info);
    if (es->st_shndx == SHN_UNDEF || es->st_shndx >= shnum || es->st_name >= strsize)
        return 0;
    if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE && type != STT_OBJECT)
        return 0;
    return (sh[es->st_shndx].sh_flags & SHF_EXECINSTR) != 0;
}

/* 1 if an address is among have[0..nhave), sorted by address. */
static int addr_known(const struct sym *have, size_t nhave, uint64_t addr)
{
    size_t lo = 0, hi = nhave;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (have[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nhave && have[lo].addr == addr;
}

/* Appends the code symbols among es[0..n) (load_symsec), but none at an
 * address among (*arr)[0..nhave) (sorted by address; nhave may be 0; read
 * through *arr each time, which moves as it grows). Returns 0, or -1 on
 * allocation failure. */
static int load_syms(struct module *m, const Elf64_Shdr *sh, size_t shnum, const Elf64_Sym *es,
                     uint64_t n, const char *strtab, uint64_t strsize, struct sym **arr,
                     size_t *cap, size_t nhave)
{
    for (uint64_t i = 0; i < n; i++) {
        if (!code_sym(sh, shnum, &es[i], strsize) ||
            (nhave && addr_known(*arr, nhave, es[i].st_value)))
            continue;
        const char *name = strtab + es[i].st_name;
        if (!name[0])
            continue;
        if (m->nsyms == *cap) {
            size_t nc = *cap ? *cap * 2 : 1024;
            struct sym *na = realloc(*arr, nc * sizeof *na);
            if (!na)
                return -1;
            *arr = na;
            *cap = nc;
        }
        (*arr)[m->nsyms++] = (struct sym){ es[i].st_value, es[i].st_size, name, es[i].st_info };
    }
    return 0;
}

/* 1 if symbol table section ss (nsym entries, read through es, chunk
 * entries at a time) has a code symbol at an address not among have[0..nhave)
 * (sorted by address), or when that cannot be told (out of memory); 0 if
 * none, or the section is unreadable. Its addresses are sorted and merged
 * with have: searching have for each was most of the time to read the OCaml
 * compiler's symbols. */
static int new_addrs(const struct flamme_elf *e, const Elf64_Shdr *ss, uint64_t nsym, Elf64_Sym *es,
                     uint64_t chunk, uint64_t strsize, const struct sym *have, size_t nhave)
{
    struct sym *a = malloc(nsym * sizeof *a);
    if (!a)
        return 1;
    size_t n = 0;
    for (uint64_t at = 0; at < nsym; at += chunk) {
        uint64_t k = nsym - at < chunk ? nsym - at : chunk;
        if (flamme_elf_read(e, ss->sh_offset + at * sizeof *es, es, k * sizeof *es) != 0) {
            free(a);
            return 0; /* unreadable: load_symsec skips it whole too */
        }
        for (uint64_t i = 0; i < k; i++)
            if (es[i].st_name != 0 && code_sym(e->sh, e->shnum, &es[i], strsize))
                a[n++].addr = es[i].st_value;
    }
    sort_by_addr(a, n);
    size_t j = 0;
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) {
        while (j < nhave && have[j].addr < a[i].addr)
            j++;
        found = j == nhave || have[j].addr != a[i].addr;
    }
    free(a);
    return found;
}

/* Appends the code symbols of one symbol table section (SYMTAB or DYNSYM).
 * Names point into a copy of its string table, kept in m->strbufs[slot].
 * known: the symbols already in *arr are sorted by address, and this
 * section adds none at their addresses (a .dynsym beside its file's
 * .symtab, which holds the same symbols again); its string table is then
 * copied only if some symbol is left to add (the OCaml compiler exports
 * every symbol: 0.7 MB read for nothing). Returns 0, or -1 on allocation
 * failure; a malformed section is skipped (returns 0). */
static int load_symsec(struct module *m, const struct flamme_elf *e, size_t idx, int slot,
                       struct sym **arr, size_t *cap, int known)
{
    const Elf64_Shdr *sh = e->sh, *ss = &e->sh[idx];
    size_t shnum = e->shnum;
    if (ss->sh_entsize != sizeof(Elf64_Sym) || ss->sh_link >= shnum)
        return 0;
    const Elf64_Shdr *strsh = &sh[ss->sh_link];
    uint64_t nsym = ss->sh_size / sizeof(Elf64_Sym);
    uint64_t strsize = strsh->sh_size;
    if (nsym == 0 || ss->sh_size > e->size || strsize == 0)
        return 0;
    size_t kept = m->nsyms;
    const struct sym *have = known ? *arr : NULL;
    /* Read a chunk at a time into one buffer: the OCaml compiler's 1.5 MB
     * table read whole was as many fresh pages to fault in. */
    uint64_t chunk = nsym < SYM_CHUNK ? nsym : SYM_CHUNK;
    Elf64_Sym *es = malloc(chunk * sizeof *es);
    if (!es)
        return -1;
    int more = !known || !kept || new_addrs(e, ss, nsym, es, chunk, strsize, have, kept);
    if (more)
        m->strbufs[slot] = flamme_elf_copy(e, strsh->sh_offset, strsize, e->size);
    if (!m->strbufs[slot]) {
        free(es);
        return 0;
    }
    const char *strtab = m->strbufs[slot];
    for (uint64_t at = 0; at < nsym; at += chunk) {
        uint64_t k = nsym - at < chunk ? nsym - at : chunk;
        if (flamme_elf_read(e, ss->sh_offset + at * sizeof *es, es, k * sizeof *es) != 0) {
            m->nsyms = kept; /* a section unreadable in part is skipped whole */
            break;
        }
        if (load_syms(m, sh, shnum, es, k, strtab, strsize, arr, cap, known ? kept : 0) != 0) {
            free(es);
            return -1;
        }
    }
    free(es);
    return 0;
}

/* Symbols being collected for one module, from its file and maybe a
 * separate debug file. */
struct symacc {
    struct sym *arr;
    size_t cap;
    int slot;          /* next m->strbufs slot */
    int have_symtab;   /* a .symtab was found */
    size_t sorted;     /* arr[0..sorted) is sorted by address */
    /* /usr/lib/debug/.build-id/xx/yyyy.debug for the longest id
     * flamme_elf_build_id returns, or "" */
    char debug_path[sizeof "/usr/lib/debug/.build-id/xx/.debug" + 2 * FLAMME_ELF_BUILD_ID_MAX];
};

/* Sets acc->debug_path to where Debian/Fedora debug packages put the .symtab
 * matching e's GNU build-id (left "" when e has none). */
static void debug_path_of(const struct flamme_elf *e, struct symacc *acc)
{
    uint8_t id[FLAMME_ELF_BUILD_ID_MAX];
    size_t n = flamme_elf_build_id(e, id);
    if (n == 0)
        return;
    char *o = acc->debug_path, *end = acc->debug_path + sizeof acc->debug_path;
    o += snprintf(o, (size_t)(end - o), "/usr/lib/debug/.build-id/%02x/", id[0]);
    for (size_t i = 1; i < n && end - o > 2; i++)
        o += snprintf(o, (size_t)(end - o), "%02x", id[i]);
    snprintf(o, (size_t)(end - o), ".debug");
}

/* Names the PLT entries ("malloc@plt"): they have no symbol, yet a sample
 * can land in one on its way to a library. Entry i of .plt.sec (or entry
 * i+1 of .plt, after the resolver stub) jumps through the GOT slot of
 * .rela.plt's i-th relocation, whose symbol is in .dynsym. Best effort:
 * returns 0 when the sections are missing or odd, -1 on allocation failure. */
static int load_plt(struct module *m, const struct flamme_elf *e, struct symacc *acc)
{
    const Elf64_Shdr *sh = e->sh, *plt = NULL, *plt_sec = NULL, *rela = NULL;
    size_t shnum = e->shnum;
    for (size_t i = 0; i < shnum; i++) {
        const char *n = flamme_elf_section_name(e, &sh[i]);
        if (!strcmp(n, ".plt"))
            plt = &sh[i];
        else if (!strcmp(n, ".plt.sec"))
            plt_sec = &sh[i];
        else if (!strcmp(n, ".rela.plt") && sh[i].sh_type == SHT_RELA)
            rela = &sh[i];
    }
    if (!rela || !(plt || plt_sec) || rela->sh_entsize != sizeof(Elf64_Rela) ||
        rela->sh_link >= shnum || rela->sh_size > e->size)
        return 0;
    const Elf64_Shdr *dsym = &sh[rela->sh_link];
    if (dsym->sh_entsize != sizeof(Elf64_Sym) || dsym->sh_link >= shnum)
        return 0;
    const Elf64_Shdr *dstr = &sh[dsym->sh_link];
    uint64_t nrel = rela->sh_size / sizeof(Elf64_Rela);
    uint64_t nsym = dsym->sh_size / sizeof(Elf64_Sym);
    if (!plt_sec && plt->sh_size < PLT_ENTRY)
        return 0;
    uint64_t base = plt_sec ? plt_sec->sh_addr : plt->sh_addr + PLT_ENTRY;
    uint64_t room = plt_sec ? plt_sec->sh_size : plt->sh_size - PLT_ENTRY;
    if (nrel == 0 || nrel > room / PLT_ENTRY || dstr->sh_size == 0 || dstr->sh_size > e->size)
        return 0;
    Elf64_Rela *rel = malloc(rela->sh_size);
    char *names = malloc(nrel * 64);
    int rc = 0;
    if (!rel || !names) {
        rc = -1;
        goto out;
    }
    if (flamme_elf_read(e, rela->sh_offset, rel, rela->sh_size) != 0)
        goto out;
    size_t used = 0;
    for (uint64_t i = 0; i < nrel; i++) {
        uint64_t si = ELF64_R_SYM(rel[i].r_info);
        Elf64_Sym es;
        if (si == 0 || si >= nsym ||
            flamme_elf_read(e, dsym->sh_offset + si * sizeof es, &es, sizeof es) != 0 ||
            es.st_name >= dstr->sh_size)
            continue;
        /* Each name is read alone: .dynstr can be large (0.7 MB in an OCaml
         * program, which exports every symbol) for a few hundred entries. */
        char nm[60];
        uint64_t want = dstr->sh_size - es.st_name < sizeof nm - 1 ? dstr->sh_size - es.st_name
                                                                    : sizeof nm - 1;
        if (flamme_elf_read(e, dstr->sh_offset + es.st_name, nm, want) != 0)
            continue;
        nm[want] = '\0';
        int len = snprintf(names + used, 64, "%s@plt", nm);
        if (len <= 4 || len >= 64)
            continue;
        if (m->nsyms == acc->cap) {
            size_t nc = acc->cap ? acc->cap * 2 : 1024;
            struct sym *na = realloc(acc->arr, nc * sizeof *na);
            if (!na) {
                rc = -1;
                goto out;
            }
            acc->arr = na;
            acc->cap = nc;
        }
        acc->arr[m->nsyms++] = (struct sym){ base + i * PLT_ENTRY, PLT_ENTRY, names + used,
                                             ELF64_ST_INFO(STB_LOCAL, STT_FUNC) };
        used += (size_t)len + 1;
    }
    m->strbufs[PLT_SLOT] = names;
    names = NULL;
out:
    free(rel);
    free(names);
    return rc;
}

/* Collects the symbols of one image's sections. main_file: also .dynsym,
 * the .text range, PLT names and the build-id; otherwise (a debug file)
 * only .symtab. Missing or malformed section headers are not an error (the
 * module is then module-only). Returns 0, or -1 on allocation failure. */
static int load_sections(struct module *m, const struct flamme_elf *e, int main_file,
                         struct symacc *acc)
{
    if (main_file) {
        for (size_t i = 0; i < e->shnum; i++) {
            if ((e->sh[i].sh_flags & SHF_EXECINSTR) &&
                strcmp(flamme_elf_section_name(e, &e->sh[i]), ".text") == 0) {
                m->text_lo = e->sh[i].sh_addr;
                m->text_hi = e->sh[i].sh_addr + e->sh[i].sh_size;
            }
        }
        debug_path_of(e, acc);
        if (e->fd >= 0 && load_plt(m, e, acc) != 0)
            return -1;
    }
    /* .symtab first, then (main file) .dynsym for what .symtab lacks. */
    int rc = 0;
    for (size_t i = 0; i < e->shnum && acc->slot < PLT_SLOT && rc == 0; i++) {
        if (e->sh[i].sh_type == SHT_SYMTAB) {
            acc->have_symtab = 1;
            rc = load_symsec(m, e, i, acc->slot++, &acc->arr, &acc->cap, 0);
        }
    }
    for (size_t i = 0; main_file && i < e->shnum && acc->slot < PLT_SLOT && rc == 0; i++) {
        if (e->sh[i].sh_type == SHT_DYNSYM) {
            if (m->nsyms)
                sort_by_addr(acc->arr, m->nsyms);
            acc->sorted = m->nsyms;
            rc = load_symsec(m, e, i, acc->slot++, &acc->arr, &acc->cap, m->nsyms != 0);
        }
    }
    return rc;
}

/* Adds the .symtab of the separate debug file (libc6-dbg and the like): its
 * static functions (start_thread, __libc_start_call_main) are otherwise
 * nameless. Returns 0 (also when there is none), or -1 on allocation failure. */
static int load_debug_file(struct module *m, struct symacc *acc)
{
    struct flamme_fd_id fid;
    int fd = flamme_open_high(acc->debug_path, O_RDONLY, &fid);
    if (fd < 0)
        return 0;
    int rc = 0;
    struct flamme_elf de;
    if (flamme_elf_open_fd(&de, fd) == 0) {
        rc = load_sections(m, &de, 0, acc);
        flamme_elf_close(&de);
    }
    flamme_close_checked(fd, &fid);
    return rc;
}

/* Sets m->maxend from m->syms (maxend[i]: the largest end of a sized
 * symbol among syms[0..i]). Returns 0, or -1 when out of memory. */
static int make_maxend(struct module *m)
{
    m->maxend = flamme_bulk_alloc((m->nsyms ? m->nsyms : 1) * sizeof *m->maxend);
    if (!m->maxend)
        return -1;
    uint64_t me = 0;
    for (size_t i = 0; i < m->nsyms; i++) {
        if (m->syms[i].size && m->syms[i].addr + m->syms[i].size > me)
            me = m->syms[i].addr + m->syms[i].size;
        m->maxend[i] = me;
    }
    return 0;
}

/* ------------------------------------------------------------ kept symbols */

/* A large file's symbols, as parse_elf leaves them, are kept between
 * processes (writer/cfi_cache.h, kind "FLMSYMS") like its unwind tables:
 * the OCaml compiler's took 2.4 ms to read from its sections each time, and
 * libc's with its debug file (libc6-dbg: 3,700 functions, named from a
 * 4 MB file) about 7 ms in a short compile that sampled a libc frame.
 * Layout: struct kept_head, nsyms struct kept_sym (by address, one per
 * address), then the names, each ending in NUL. A kept_sym is the size of
 * a struct sym and becomes one in place: a separate array of them was
 * 664 KB of fresh pages for the OCaml compiler's 20,761 symbols, each page
 * a page fault (the blob grows by 166 KB instead). */
#define KEPT_KIND "FLMSYMS"
#define KEPT_MIN_SYMS 2048

struct kept_head {
    uint64_t nsyms, text_lo, text_hi, names_len;
};

struct kept_sym {
    uint64_t addr, size;
    uint64_t name; /* offset in the names */
    uint64_t info;
};

_Static_assert(sizeof(struct kept_sym) == sizeof(struct sym) && _Alignof(struct sym) <= 8 &&
                   sizeof(struct kept_head) % 8 == 0,
               "kept symbols become symbols in place, aligned in a 16-aligned blob");

/* Fills m's symbols (and its maxend, strbufs[0], .text range) from what
 * was kept for the file of st. Returns 0, or -1 when nothing usable was
 * kept (missing, or failing a check: sizes, names inside and ended,
 * addresses strictly increasing). */
static int load_kept(struct module *m, const struct stat *st)
{
    size_t len = 0;
    uint8_t *blob = flamme_kept_load(KEPT_KIND, st, &len);
    if (!blob)
        return -1;
    struct kept_head h;
    if (len < sizeof h)
        goto bad;
    memcpy(&h, blob, sizeof h);
    const struct kept_sym *ks = (const struct kept_sym *)(const void *)(blob + sizeof h);
    struct sym *syms = (struct sym *)(void *)(blob + sizeof h); /* over ks, entry by entry */
    const char *names;
    if (h.nsyms == 0 || h.nsyms > len / sizeof *ks || h.names_len == 0 || h.names_len > len ||
        len != sizeof h + h.nsyms * sizeof *ks + h.names_len || h.text_lo > h.text_hi)
        goto bad;
    names = (const char *)(blob + sizeof h + h.nsyms * sizeof *ks);
    if (names[h.names_len - 1] != '\0')
        goto bad;
    for (uint64_t i = 0; i < h.nsyms; i++) {
        struct kept_sym k;
        memcpy(&k, &ks[i], sizeof k);
        if (k.name >= h.names_len || (i && k.addr <= syms[i - 1].addr) || k.info > 0xff)
            goto bad;
        syms[i] = (struct sym){ k.addr, k.size, names + k.name, (uint8_t)k.info };
    }
    m->syms = syms;
    m->nsyms = h.nsyms;
    if (make_maxend(m) != 0) {
        m->syms = NULL;
        m->nsyms = 0;
        goto bad;
    }
    m->syms_in_blob = 1;
    m->text_lo = h.text_lo;
    m->text_hi = h.text_hi;
    m->strbufs[0] = (char *)blob;
    return 0;
bad:
    flamme_bulk_free(blob);
    return -1;
}

/* Keeps m's symbols for the file of st (load_kept). Best effort. */
static void store_kept(const struct module *m, const struct stat *st)
{
    uint64_t names_len = 0;
    for (size_t i = 0; i < m->nsyms; i++)
        names_len += strlen(m->syms[i].name) + 1;
    if (names_len > UINT32_MAX)
        return;
    struct kept_head h = { m->nsyms, m->text_lo, m->text_hi, names_len };
    size_t head = sizeof h + m->nsyms * sizeof(struct kept_sym);
    uint8_t *a = malloc(head);
    char *names = malloc(names_len);
    if (a && names) {
        memcpy(a, &h, sizeof h);
        uint64_t at = 0;
        for (size_t i = 0; i < m->nsyms; i++) {
            const struct sym *y = &m->syms[i];
            struct kept_sym k = { y->addr, y->size, at, y->info };
            memcpy(a + sizeof h + i * sizeof k, &k, sizeof k);
            size_t n = strlen(y->name) + 1;
            memcpy(names + at, y->name, n);
            at += n;
        }
        flamme_kept_store(KEPT_KIND, st, a, head, names, names_len);
    }
    free(a);
    free(names);
}

/* Takes the program headers and parses the symbols of image e into m, or
 * reads what was kept of them (load_kept). Returns 0, or -1 on allocation
 * failure (m is then module-only). */
static int parse_elf(struct module *m, struct flamme_elf *e)
{
    m->phdrs = e->ph;
    m->nphdrs = e->phnum;
    e->ph = NULL;

    struct stat st;
    int keep = e->fd >= 0 && fstat(e->fd, &st) == 0 && S_ISREG(st.st_mode);
    if (keep && load_kept(m, &st) == 0)
        return 0;

    struct symacc acc = { 0 };
    int rc = load_sections(m, e, 1, &acc);
    if (rc == 0 && !acc.have_symtab && acc.debug_path[0] && e->fd >= 0)
        rc = load_debug_file(m, &acc);
    struct sym *arr = acc.arr;
    if (rc != 0) {
        free(arr);
        m->nsyms = 0;
        return -1;
    }

    /* Sort once; keep the best-ranked symbol per address. */
    if (m->nsyms && acc.sorted != m->nsyms)
        sort_by_addr(arr, m->nsyms); /* whole: few symbols came after the sort, if any */
    size_t k = 0;
    for (size_t i = 0; i < m->nsyms; i++)
        if (k == 0 || arr[k - 1].addr != arr[i].addr)
            arr[k++] = arr[i];
        else if (sym_better(&arr[i], &arr[k - 1]))
            arr[k - 1] = arr[i];
    m->nsyms = k;
    m->syms = arr;
    if (make_maxend(m) != 0)
        return -1;
    /* Only a file with its own .symtab: a debug file's symbols may come
     * (libc6-dbg installed) or go without this file changing. */
    if (keep && acc.have_symtab && k >= KEPT_MIN_SYMS)
        store_kept(m, &st);
    return 0;
}

/* Opens the file behind mapping mp: first via map_files (exact inode, works
 * for deleted files), then by path if the inode still matches.
 * Returns an fd, or -1. */
static int open_mapped(const struct mapping *mp, struct flamme_fd_id *fid)
{
    char mf[64];
    snprintf(mf, sizeof mf, "/proc/self/map_files/%llx-%llx", (unsigned long long)mp->start,
             (unsigned long long)mp->end);
    int fd = flamme_open_high(mf, O_RDONLY, fid);
    if (fd >= 0)
        return fd;
    if (mp->mod->path[0] != '/')
        return -1;
    fd = flamme_open_high(mp->mod->path, O_RDONLY, fid);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != mp->mod->inode || !S_ISREG(st.st_mode)) {
        flamme_close_checked(fd, fid);
        return -1;
    }
    return fd;
}

/* Parses mp's module on first use; the outcome is remembered either way. */
static void ensure_parsed(struct mapping *mp)
{
    struct module *m = mp->mod;
    if (m->state != MOD_UNPARSED)
        return;
    m->state = MOD_FAILED;
    struct flamme_elf e;
    if (m->is_vdso) {
        uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
        if (base && base >= mp->start && base < mp->end &&
            flamme_elf_open_mem(&e, (const void *)base, mp->end - base) == 0) {
            if (parse_elf(m, &e) == 0)
                m->state = MOD_OK;
            flamme_elf_close(&e);
        }
        return;
    }
    struct flamme_fd_id fid;
    int fd = open_mapped(mp, &fid);
    if (fd < 0)
        return;
    if (flamme_elf_open_fd(&e, fd) == 0) {
        if (parse_elf(m, &e) == 0)
            m->state = MOD_OK;
        flamme_elf_close(&e);
    }
    flamme_close_checked(fd, &fid);
}

/* Load bias of a mapping. Returns 0 and sets mp->bias, or -1. */
static int compute_bias(struct mapping *mp)
{
    if (mp->bias_known)
        return 0;
    const struct module *m = mp->mod;
    if (m->is_vdso) {
        /* In memory: the image starts at AT_SYSINFO_EHDR, not at a file
         * offset; its first PT_LOAD places it. */
        for (size_t i = 0; i < m->nphdrs; i++) {
            const Elf64_Phdr *ph = &m->phdrs[i];
            if (ph->p_type != PT_LOAD)
                continue;
            mp->bias = (uint64_t)getauxval(AT_SYSINFO_EHDR) + ph->p_offset - ph->p_vaddr;
            mp->bias_known = 1;
            return 0;
        }
        return -1;
    }
    if (flamme_elf_exec_bias(m->phdrs, m->nphdrs, mp->start, mp->file_off, &mp->bias) != 0)
        return -1;
    mp->bias_known = 1;
    return 0;
}

/* Name of vaddr in m, or NULL. */
static const char *find_sym(const struct module *m, uint64_t vaddr)
{
    if (m->nsyms == 0 || vaddr < m->syms[0].addr)
        return NULL;
    size_t lo = 0, hi = m->nsyms; /* last index with addr <= vaddr */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->syms[mid].addr <= vaddr)
            lo = mid;
        else
            hi = mid;
    }
    for (size_t i = lo, steps = 0; steps < COVER_WALK_MAX && m->maxend[i] > vaddr; i--, steps++) {
        const struct sym *s = &m->syms[i];
        if (s->size && vaddr < s->addr + s->size)
            return s->name;
        if (i == 0)
            break;
    }
    const struct sym *p = &m->syms[lo];
    if (p->size == 0 && vaddr >= m->text_lo && vaddr < m->text_hi && !is_code_marker(p->name))
        return p->name;
    return NULL;
}

/* ------------------------------------------------------------ maps */

static struct module *get_module(flamme_symtab *s, const char *path, uint64_t inode)
{
    for (size_t i = 0; i < s->nmods; i++)
        if (s->mods[i]->inode == inode && strcmp(s->mods[i]->path, path) == 0)
            return s->mods[i];
    if (s->nmods == s->capmods) {
        size_t nc = s->capmods ? s->capmods * 2 : 32;
        struct module **nm = realloc(s->mods, nc * sizeof *nm);
        if (!nm)
            return NULL;
        s->mods = nm;
        s->capmods = nc;
    }
    struct module *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return NULL;
    }
    m->inode = inode;
    m->is_vdso = strcmp(path, "[vdso]") == 0;
    s->mods[s->nmods++] = m;
    return m;
}

static int map_cmp(const void *a, const void *b)
{
    const struct mapping *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Re-reads /proc/self/maps, keeping executable mappings. Mappings whose
 * module is unchanged keep their computed bias. Returns 0, or -1 (the old
 * list is kept). */
static int read_maps(flamme_symtab *s)
{
    s->last_refresh_ns = now_ns();
    FILE *f = flamme_fopen_high("/proc/self/maps");
    if (!f)
        return -1;
    struct mapping *arr = NULL;
    size_t n = 0, cap = 0;
    char line[4096 + 256];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long start, end, off, inode;
        char perms[8];
        int pathpos = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*s %llu %n", &start, &end, perms, &off, &inode,
                   &pathpos) < 5)
            continue;
        if (strlen(perms) < 3 || perms[2] != 'x')
            continue;
        char *path = pathpos ? line + pathpos : (char *)"";
        path[strcspn(path, "\n")] = '\0';
        size_t pl = strlen(path);
        static const char del[] = " (deleted)";
        if (pl >= sizeof del - 1 && strcmp(path + pl - (sizeof del - 1), del) == 0)
            path[pl - (sizeof del - 1)] = '\0';
        if (!path[0])
            path = (char *)"[anon]";
        struct module *m = get_module(s, path, inode);
        if (!m) {
            rc = -1;
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            struct mapping *na = realloc(arr, nc * sizeof *na);
            if (!na) {
                rc = -1;
                break;
            }
            arr = na;
            cap = nc;
        }
        arr[n] = (struct mapping){ start, end, off, m, 0, 0 };
        for (size_t i = 0; i < s->nmaps; i++)
            if (s->maps[i].start == start && s->maps[i].end == end && s->maps[i].mod == m &&
                s->maps[i].file_off == off)
                arr[n] = s->maps[i];
        n++;
    }
    fclose(f);
    if (rc != 0) {
        free(arr);
        return -1;
    }
    qsort(arr, n, sizeof *arr, map_cmp);
    free(s->maps);
    s->maps = arr;
    s->nmaps = n;
    return 0;
}

static struct mapping *find_map(flamme_symtab *s, uint64_t addr)
{
    size_t lo = 0, hi = s->nmaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->maps[mid].end <= addr)
            lo = mid + 1;
        else if (s->maps[mid].start > addr)
            hi = mid;
        else
            return &s->maps[mid];
    }
    return NULL;
}

/* ------------------------------------------------------------ API */

flamme_symtab *flamme_symtab_new(void)
{
    flamme_symtab *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (read_maps(s) != 0) {
        flamme_symtab_free(s);
        return NULL;
    }
    return s;
}

uint64_t flamme_symtab_parse_ns(const flamme_symtab *s)
{
    return s ? s->parse_ns : 0;
}

void flamme_symtab_refresh(flamme_symtab *s)
{
    read_maps(s);
}

int flamme_symtab_lookup(flamme_symtab *s, uint64_t addr, const char **function,
                         const char **module, uint64_t *offset)
{
    *function = "";
    *module = "";
    *offset = 0;
    struct mapping *mp = find_map(s, addr);
    if (!mp && now_ns() - s->last_refresh_ns >= REFRESH_MIN_NS) {
        read_maps(s);
        mp = find_map(s, addr);
    }
    if (!mp) {
        *offset = addr;
        return -1;
    }
    if (mp->mod->state == MOD_UNPARSED) {
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        ensure_parsed(mp);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        s->parse_ns += (uint64_t)((b.tv_sec - a.tv_sec) * 1000000000ll + (b.tv_nsec - a.tv_nsec));
    }
    *module = mp->mod->path;
    if (mp->mod->state != MOD_OK || compute_bias(mp) != 0) {
        *offset = addr - mp->start + mp->file_off;
        return 0;
    }
    uint64_t vaddr = addr - mp->bias;
    *offset = vaddr;
    const char *name = find_sym(mp->mod, vaddr);
    if (!name)
        return 0;
    *function = name;
    return 1;
}

const char *flamme_symtab_module(flamme_symtab *s, uint64_t addr)
{
    struct mapping *mp = find_map(s, addr);
    if (!mp && now_ns() - s->last_refresh_ns >= REFRESH_MIN_NS) {
        read_maps(s);
        mp = find_map(s, addr);
    }
    return mp ? mp->mod->path : "";
}

void flamme_symtab_free(flamme_symtab *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nmods; i++) {
        struct module *m = s->mods[i];
        free(m->path);
        if (!m->syms_in_blob)
            free(m->syms);
        flamme_bulk_free(m->maxend);
        free(m->phdrs);
        for (int k = 0; k < MAX_STRTABS; k++)
            if (k == 0 && m->syms_in_blob)
                flamme_bulk_free(m->strbufs[k]);
            else
                free(m->strbufs[k]);
        free(m);
    }
    free(s->mods);
    free(s->maps);
    free(s);
}
