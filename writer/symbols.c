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
 *     symbols that lie in executable sections, sorted by address once, with
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
 * Files are read with pread into private buffers rather than kept mmap'd: if
 * the file is truncated on disk while the program runs, a kept mapping would
 * SIGBUS the profiled process on the next name lookup. The file is opened
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
#include "agent/fds.h"

#include <elf.h>
#include <errno.h>
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
#define ELF_MAX_SECTIONS 65535
#define MAX_STRTABS 4 /* .symtab, .dynsym, a debug file's .symtab, PLT names */
#define PLT_SLOT (MAX_STRTABS - 1)
#define PLT_ENTRY 16 /* x86_64 .plt / .plt.sec entry size */

struct sym {
    uint64_t addr, size;
    const char *name;
    uint8_t rank; /* lower is better among symbols at one address */
};

enum mod_state { MOD_UNPARSED, MOD_OK, MOD_FAILED };

struct module {
    char *path;      /* as shown in maps, without " (deleted)" */
    uint64_t inode;
    int is_vdso;
    enum mod_state state;
    struct sym *syms; /* sorted by addr, one per address */
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
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ ELF parsing */

/* Where an ELF image's bytes come from: a file descriptor or memory. */
struct elf_src {
    int fd;             /* -1 for memory */
    const uint8_t *mem; /* used when fd < 0 */
    uint64_t size;
};

/* Reads len bytes at off into dst. Returns 0, or -1 if out of range / short. */
static int src_read(const struct elf_src *s, uint64_t off, void *dst, size_t len)
{
    if (off > s->size || len > s->size - off)
        return -1;
    if (s->fd < 0) {
        memcpy(dst, s->mem + off, len);
        return 0;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(s->fd, (char *)dst + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* Returns a malloc'd copy of [off, off+len) plus a NUL, or NULL. */
static char *src_dup(const struct elf_src *s, uint64_t off, uint64_t len)
{
    if (len > s->size)
        return NULL;
    char *buf = malloc(len + 1);
    if (!buf)
        return NULL;
    if (src_read(s, off, buf, len) != 0) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

static int is_code_marker(const char *name)
{
    size_t n = strlen(name);
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
static uint8_t sym_rank(const Elf64_Sym *es, const char *name)
{
    int type = ELF64_ST_TYPE(es->st_info), bind = ELF64_ST_BIND(es->st_info);
    int r = (type == STT_FUNC || type == STT_GNU_IFUNC) ? 0 : 32;
    if (es->st_size == 0)
        r += 16;
    if (is_code_marker(name))
        r += 8;
    r += bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 2 : 4;
    if (name[0] == '_')
        r += 1;
    return (uint8_t)r;
}

static int sym_cmp(const void *a, const void *b)
{
    const struct sym *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Appends the code symbols of one symbol table section (SYMTAB or DYNSYM).
 * Names point into a string table that is stored in m->strbufs[slot] (or
 * into the vDSO's memory). Returns 0, or -1 on allocation failure; a
 * malformed section is skipped (returns 0). */
static int load_symsec(struct module *m, const struct elf_src *src, const Elf64_Shdr *sh,
                       size_t shnum, size_t idx, int slot, struct sym **arr, size_t *cap)
{
    const Elf64_Shdr *ss = &sh[idx];
    if (ss->sh_entsize != sizeof(Elf64_Sym) || ss->sh_link >= shnum)
        return 0;
    const Elf64_Shdr *strsh = &sh[ss->sh_link];
    uint64_t nsym = ss->sh_size / sizeof(Elf64_Sym);
    if (nsym == 0 || ss->sh_offset > src->size || ss->sh_size > src->size - ss->sh_offset)
        return 0;
    const char *strtab;
    uint64_t strsize = strsh->sh_size;
    if (src->fd < 0) {
        if (strsh->sh_offset > src->size || strsize > src->size - strsh->sh_offset ||
            strsize == 0 || src->mem[strsh->sh_offset + strsize - 1] != '\0')
            return 0;
        strtab = (const char *)src->mem + strsh->sh_offset;
    } else {
        m->strbufs[slot] = src_dup(src, strsh->sh_offset, strsize);
        if (!m->strbufs[slot])
            return 0;
        strtab = m->strbufs[slot];
    }
    Elf64_Sym *es = malloc(ss->sh_size);
    if (!es)
        return -1;
    if (src_read(src, ss->sh_offset, es, ss->sh_size) != 0) {
        free(es);
        return 0;
    }
    for (uint64_t i = 0; i < nsym; i++) {
        int type = ELF64_ST_TYPE(es[i].st_info);
        if (es[i].st_shndx == SHN_UNDEF || es[i].st_shndx >= shnum || es[i].st_name >= strsize)
            continue;
        if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE && type != STT_OBJECT)
            continue;
        if (!(sh[es[i].st_shndx].sh_flags & SHF_EXECINSTR))
            continue;
        const char *name = strtab + es[i].st_name;
        if (!name[0])
            continue;
        if (m->nsyms == *cap) {
            size_t nc = *cap ? *cap * 2 : 1024;
            struct sym *na = realloc(*arr, nc * sizeof *na);
            if (!na) {
                free(es);
                return -1;
            }
            *arr = na;
            *cap = nc;
        }
        (*arr)[m->nsyms++] = (struct sym){ es[i].st_value, es[i].st_size, name,
                                           sym_rank(&es[i], name) };
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
    char debug_path[128]; /* /usr/lib/debug/.build-id/xx/yyyy.debug, or "" */
};
/* "/usr/lib/debug/.build-id/" + 2 + "/" + 2 * 39 + ".debug" + NUL for a
 * 40-byte id, the longest note_build_id accepts. */
_Static_assert(sizeof(((struct symacc *)0)->debug_path) >= 25 + 2 + 1 + 2 * 39 + 6 + 1,
               "debug_path too small for a 40-byte build-id");

/* Reads and checks the ELF header. Returns 0, or -1 if src is not an ELF64
 * image of this machine's byte order. */
static int read_ehdr(const struct elf_src *src, Elf64_Ehdr *eh)
{
    if (src_read(src, 0, eh, sizeof *eh) != 0 || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
        eh->e_phentsize != sizeof(Elf64_Phdr))
        return -1;
    return 0;
}

/* If section sh is a GNU build-id note, sets acc->debug_path to where
 * Debian/Fedora debug packages put the matching .symtab. */
static void note_build_id(const struct elf_src *src, const Elf64_Shdr *sh, struct symacc *acc)
{
    uint8_t buf[256];
    if (sh->sh_size < sizeof(Elf64_Nhdr) || sh->sh_size > sizeof buf ||
        src_read(src, sh->sh_offset, buf, sh->sh_size) != 0)
        return;
    Elf64_Nhdr nh;
    memcpy(&nh, buf, sizeof nh);
    size_t name_at = sizeof nh, desc_at = name_at + ((nh.n_namesz + 3) & ~3u);
    if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 || memcmp(buf + name_at, "GNU", 4) != 0 ||
        nh.n_descsz < 2 || nh.n_descsz > 40 || desc_at + nh.n_descsz > sh->sh_size)
        return;
    /* Sized for the longest id accepted above (static assert below); each
     * piece is bounded by what is left anyway. */
    char *o = acc->debug_path, *end = acc->debug_path + sizeof acc->debug_path;
    o += snprintf(o, (size_t)(end - o), "/usr/lib/debug/.build-id/%02x/", buf[desc_at]);
    for (size_t i = 1; i < nh.n_descsz && end - o > 2; i++)
        o += snprintf(o, (size_t)(end - o), "%02x", buf[desc_at + i]);
    snprintf(o, (size_t)(end - o), ".debug");
}

/* Names the PLT entries ("malloc@plt"): they have no symbol, yet a sample
 * can land in one on its way to a library. Entry i of .plt.sec (or entry
 * i+1 of .plt, after the resolver stub) jumps through the GOT slot of
 * .rela.plt's i-th relocation, whose symbol is in .dynsym. Best effort:
 * returns 0 when the sections are missing or odd, -1 on allocation failure. */
static int load_plt(struct module *m, const struct elf_src *src, const Elf64_Shdr *sh,
                    size_t shnum, const char *shstr, uint64_t shstr_size, struct symacc *acc)
{
    const Elf64_Shdr *plt = NULL, *plt_sec = NULL, *rela = NULL;
    for (size_t i = 0; i < shnum; i++) {
        if (sh[i].sh_name >= shstr_size)
            continue;
        const char *n = shstr + sh[i].sh_name;
        if (!strcmp(n, ".plt"))
            plt = &sh[i];
        else if (!strcmp(n, ".plt.sec"))
            plt_sec = &sh[i];
        else if (!strcmp(n, ".rela.plt") && sh[i].sh_type == SHT_RELA)
            rela = &sh[i];
    }
    if (!rela || !(plt || plt_sec) || rela->sh_entsize != sizeof(Elf64_Rela) ||
        rela->sh_link >= shnum || rela->sh_size > src->size)
        return 0;
    const Elf64_Shdr *dsym = &sh[rela->sh_link];
    if (dsym->sh_entsize != sizeof(Elf64_Sym) || dsym->sh_link >= shnum)
        return 0;
    const Elf64_Shdr *dstr = &sh[dsym->sh_link];
    uint64_t nrel = rela->sh_size / sizeof(Elf64_Rela);
    uint64_t nsym = dsym->sh_size / sizeof(Elf64_Sym);
    uint64_t base = plt_sec ? plt_sec->sh_addr : plt->sh_addr + PLT_ENTRY;
    uint64_t room = plt_sec ? plt_sec->sh_size : plt->sh_size - PLT_ENTRY;
    if (nrel == 0 || nrel > room / PLT_ENTRY || dstr->sh_size == 0 || dstr->sh_size > src->size)
        return 0;
    Elf64_Rela *rel = malloc(rela->sh_size);
    char *strtab = src_dup(src, dstr->sh_offset, dstr->sh_size);
    char *names = malloc(nrel * 64);
    int rc = 0;
    if (!rel || !strtab || !names) {
        rc = -1;
        goto out;
    }
    if (src_read(src, rela->sh_offset, rel, rela->sh_size) != 0)
        goto out;
    size_t used = 0;
    for (uint64_t i = 0; i < nrel; i++) {
        uint64_t si = ELF64_R_SYM(rel[i].r_info);
        Elf64_Sym es;
        if (si == 0 || si >= nsym ||
            src_read(src, dsym->sh_offset + si * sizeof es, &es, sizeof es) != 0 ||
            es.st_name >= dstr->sh_size)
            continue;
        int len = snprintf(names + used, 64, "%.59s@plt", strtab + es.st_name);
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
        Elf64_Sym fake = { .st_info = ELF64_ST_INFO(STB_LOCAL, STT_FUNC), .st_size = PLT_ENTRY };
        acc->arr[m->nsyms++] = (struct sym){ base + i * PLT_ENTRY, PLT_ENTRY, names + used,
                                             sym_rank(&fake, names + used) };
        used += (size_t)len + 1;
    }
    m->strbufs[PLT_SLOT] = names;
    names = NULL;
out:
    free(rel);
    free(strtab);
    free(names);
    return rc;
}

/* Collects the symbols of one image's section headers. main_file: also
 * .dynsym, the .text range and the build-id; otherwise (a debug file) only
 * .symtab. Missing or malformed section headers are not an error (the
 * module is then module-only). Returns 0, or -1 on allocation failure. */
static int load_sections(struct module *m, const struct elf_src *src, const Elf64_Ehdr *eh,
                         int main_file, struct symacc *acc)
{
    size_t shnum = eh->e_shnum;
    if (shnum == 0 || shnum > ELF_MAX_SECTIONS || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shstrndx >= shnum)
        return 0;
    Elf64_Shdr *sh = malloc(shnum * sizeof *sh);
    if (!sh)
        return -1;
    if (src_read(src, eh->e_shoff, sh, shnum * sizeof *sh) != 0) {
        free(sh);
        return 0;
    }
    if (main_file) {
        const Elf64_Shdr *ss = &sh[eh->e_shstrndx];
        char *shstr = src_dup(src, ss->sh_offset, ss->sh_size);
        for (size_t i = 0; shstr && i < shnum; i++) {
            if (sh[i].sh_name < ss->sh_size && strcmp(shstr + sh[i].sh_name, ".text") == 0 &&
                (sh[i].sh_flags & SHF_EXECINSTR)) {
                m->text_lo = sh[i].sh_addr;
                m->text_hi = sh[i].sh_addr + sh[i].sh_size;
            }
            if (sh[i].sh_type == SHT_NOTE && sh[i].sh_name < ss->sh_size &&
                strcmp(shstr + sh[i].sh_name, ".note.gnu.build-id") == 0)
                note_build_id(src, &sh[i], acc);
        }
        if (shstr && src->fd >= 0 && load_plt(m, src, sh, shnum, shstr, ss->sh_size, acc) != 0) {
            free(shstr);
            free(sh);
            return -1;
        }
        free(shstr);
    }
    int rc = 0;
    for (size_t i = 0; i < shnum && acc->slot < PLT_SLOT && rc == 0; i++) {
        if (sh[i].sh_type == SHT_SYMTAB || (main_file && sh[i].sh_type == SHT_DYNSYM)) {
            acc->have_symtab |= sh[i].sh_type == SHT_SYMTAB;
            rc = load_symsec(m, src, sh, shnum, i, acc->slot++, &acc->arr, &acc->cap);
        }
    }
    free(sh);
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
    struct stat st;
    int rc = 0;
    Elf64_Ehdr eh;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        struct elf_src dsrc = { fd, NULL, (uint64_t)st.st_size };
        if (read_ehdr(&dsrc, &eh) == 0)
            rc = load_sections(m, &dsrc, &eh, 0, acc);
    }
    flamme_close_checked(fd, &fid);
    return rc;
}

/* Parses program headers and symbols of one ELF image into m.
 * Returns 0, or -1 if the image is not a readable ELF64 of this machine's
 * byte order (m is then module-only). */
static int parse_elf(struct module *m, const struct elf_src *src)
{
    Elf64_Ehdr eh;
    if (read_ehdr(src, &eh) != 0)
        return -1;
    m->nphdrs = eh.e_phnum;
    m->phdrs = calloc(eh.e_phnum ? eh.e_phnum : 1, sizeof(Elf64_Phdr));
    if (!m->phdrs || src_read(src, eh.e_phoff, m->phdrs, eh.e_phnum * sizeof(Elf64_Phdr)) != 0)
        return -1;

    struct symacc acc = { 0 };
    int rc = load_sections(m, src, &eh, 1, &acc);
    if (rc == 0 && !acc.have_symtab && acc.debug_path[0] && src->fd >= 0)
        rc = load_debug_file(m, &acc);
    struct sym *arr = acc.arr;
    if (rc != 0) {
        free(arr);
        m->nsyms = 0;
        return -1;
    }

    /* Sort once; keep the best-ranked symbol per address. */
    if (m->nsyms)
        qsort(arr, m->nsyms, sizeof *arr, sym_cmp);
    size_t k = 0;
    for (size_t i = 0; i < m->nsyms; i++)
        if (k == 0 || arr[k - 1].addr != arr[i].addr)
            arr[k++] = arr[i];
    m->nsyms = k;
    m->syms = arr;
    m->maxend = malloc((k ? k : 1) * sizeof *m->maxend);
    if (!m->maxend)
        return -1;
    uint64_t me = 0;
    for (size_t i = 0; i < k; i++) {
        if (arr[i].size && arr[i].addr + arr[i].size > me)
            me = arr[i].addr + arr[i].size;
        m->maxend[i] = me;
    }
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
    if (m->is_vdso) {
        uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
        if (base && base >= mp->start && base < mp->end) {
            struct elf_src src = { -1, (const uint8_t *)base, mp->end - base };
            if (parse_elf(m, &src) == 0)
                m->state = MOD_OK;
        }
        return;
    }
    struct flamme_fd_id fid;
    int fd = open_mapped(mp, &fid);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        struct elf_src src = { fd, NULL, (uint64_t)st.st_size };
        if (parse_elf(m, &src) == 0)
            m->state = MOD_OK;
    }
    flamme_close_checked(fd, &fid);
}

/* Load bias of a mapping: from the PT_LOAD whose file range holds the
 * mapping's offset (page-rounded). Returns 0 and sets mp->bias, or -1. */
static int compute_bias(struct mapping *mp)
{
    if (mp->bias_known)
        return 0;
    const struct module *m = mp->mod;
    uint64_t off = mp->file_off;
    for (size_t i = 0; i < m->nphdrs; i++) {
        const Elf64_Phdr *ph = &m->phdrs[i];
        if (ph->p_type != PT_LOAD)
            continue;
        if (m->is_vdso) {
            /* In memory: the image starts at AT_SYSINFO_EHDR, not at a file offset. */
            mp->bias = (uint64_t)getauxval(AT_SYSINFO_EHDR) + ph->p_offset - ph->p_vaddr;
            mp->bias_known = 1;
            return 0;
        }
        /* Mappings start on page boundaries; p_align may be larger (2 MiB) and
         * would make a data segment's range swallow the code's offset. */
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        uint64_t lo = ph->p_offset & ~(page - 1), hi = ph->p_offset + ph->p_filesz;
        if ((ph->p_flags & PF_X) && off >= lo && off < hi) {
            mp->bias = mp->start - off + ph->p_offset - ph->p_vaddr;
            mp->bias_known = 1;
            return 0;
        }
    }
    return -1;
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
    FILE *f = fopen("/proc/self/maps", "re");
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
    ensure_parsed(mp);
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

void flamme_symtab_free(flamme_symtab *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nmods; i++) {
        struct module *m = s->mods[i];
        free(m->path);
        free(m->syms);
        free(m->maxend);
        free(m->phdrs);
        for (int k = 0; k < MAX_STRTABS; k++)
            free(m->strbufs[k]);
        free(m);
    }
    free(s->mods);
    free(s->maps);
    free(s);
}
