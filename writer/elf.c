/*
 * writer/elf.c — the one ELF64 image reader of writer/ (see writer/elf.h).
 *
 * Owns: an opened image's header, section headers, section names and
 * program headers, read once at open, each table checked against the
 * image's size. Called by writer/symbols.c, writer/lines.c and
 * writer/cfi_build.c on the writer thread (or at agent start-up, or in the
 * tools); allocates, so never from a signal handler.
 */
#include "writer/elf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHNUM_MAX 65535         /* e_shnum is 16 bits; extended numbering is not read */
#define SHSTR_MAX (16ull << 20) /* a larger section-name table is not believed */
#define NOTE_MAX (64u << 10)    /* a larger note section is not searched */

int flamme_elf_read(const struct flamme_elf *e, uint64_t off, void *dst, uint64_t len)
{
    if (off > e->size || len > e->size - off)
        return -1;
    if (e->fd < 0) {
        memcpy(dst, e->mem + off, (size_t)len);
        return 0;
    }
    return flamme_pread_full(e->fd, dst, (size_t)len, off);
}

int flamme_pread_full(int fd, void *dst, size_t len, uint64_t off)
{
    for (size_t done = 0; done < len;) {
        ssize_t r = pread(fd, (char *)dst + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1; /* error, or the file shrank */
        done += (size_t)r;
    }
    return 0;
}

char *flamme_elf_copy(const struct flamme_elf *e, uint64_t off, uint64_t len, uint64_t max)
{
    if (len > max || len > e->size)
        return NULL;
    char *buf = malloc((size_t)len + 1);
    if (!buf)
        return NULL;
    if (flamme_elf_read(e, off, buf, len) != 0) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* Reads the section headers and their names; a missing or malformed table
 * leaves shnum 0 (not an error: stripped files have none). Returns 0, or -1
 * when out of memory. */
static int load_shdrs(struct flamme_elf *e)
{
    const Elf64_Ehdr *eh = &e->eh;
    size_t n = eh->e_shnum;
    if (n == 0 || n > SHNUM_MAX || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shstrndx >= n)
        return 0;
    if (eh->e_shoff > e->size || n * sizeof(Elf64_Shdr) > e->size - eh->e_shoff)
        return 0;
    e->sh = malloc(n * sizeof *e->sh);
    if (!e->sh)
        return -1;
    if (flamme_elf_read(e, eh->e_shoff, e->sh, n * sizeof *e->sh) != 0) {
        free(e->sh);
        e->sh = NULL;
        return 0;
    }
    e->shnum = n;
    const Elf64_Shdr *ss = &e->sh[eh->e_shstrndx];
    if (ss->sh_type != SHT_NOBITS && ss->sh_size > 0) {
        e->shstr = flamme_elf_copy(e, ss->sh_offset, ss->sh_size, SHSTR_MAX);
        if (e->shstr)
            e->shstr_size = ss->sh_size;
    }
    return 0;
}

/* Checks the identification, then reads both header tables. */
static int open_image(struct flamme_elf *e)
{
    if (flamme_elf_read(e, 0, &e->eh, sizeof e->eh) != 0 ||
        memcmp(e->eh.e_ident, ELFMAG, SELFMAG) != 0 || e->eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        e->eh.e_ident[EI_DATA] != ELFDATA2LSB)
        return -1;
    size_t n = e->eh.e_phnum;
    if (n) {
        if (n == PN_XNUM || e->eh.e_phentsize != sizeof(Elf64_Phdr) || e->eh.e_phoff > e->size ||
            n * sizeof(Elf64_Phdr) > e->size - e->eh.e_phoff ||
            !(e->ph = malloc(n * sizeof *e->ph)))
            return -1;
        if (flamme_elf_read(e, e->eh.e_phoff, e->ph, n * sizeof *e->ph) != 0)
            return -1;
        e->phnum = n;
    }
    return load_shdrs(e);
}

int flamme_elf_open_fd(struct flamme_elf *e, int fd)
{
    memset(e, 0, sizeof *e);
    e->fd = -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0)
        return -1;
    e->fd = fd;
    e->size = (uint64_t)st.st_size;
    if (open_image(e) != 0) {
        flamme_elf_close(e);
        return -1;
    }
    return 0;
}

int flamme_elf_open_mem(struct flamme_elf *e, const void *mem, uint64_t size)
{
    memset(e, 0, sizeof *e);
    e->fd = -1;
    e->mem = mem;
    e->size = mem ? size : 0;
    if (open_image(e) != 0) {
        flamme_elf_close(e);
        return -1;
    }
    return 0;
}

void flamme_elf_close(struct flamme_elf *e)
{
    free(e->sh);
    free(e->shstr);
    free(e->ph);
    int fd = e->fd;
    memset(e, 0, sizeof *e);
    e->fd = fd; /* the caller's, for its own close */
}

const char *flamme_elf_section_name(const struct flamme_elf *e, const Elf64_Shdr *sh)
{
    if (!e->shstr || sh->sh_name >= e->shstr_size)
        return "";
    return e->shstr + sh->sh_name; /* the copy ends with a NUL */
}

const Elf64_Shdr *flamme_elf_section(const struct flamme_elf *e, const char *name)
{
    for (size_t i = 0; i < e->shnum; i++)
        if (e->sh[i].sh_type != SHT_NOBITS && e->sh[i].sh_size > 0 &&
            strcmp(flamme_elf_section_name(e, &e->sh[i]), name) == 0)
            return &e->sh[i];
    return NULL;
}

const Elf64_Shdr *flamme_elf_symtab(const struct flamme_elf *e, uint32_t type)
{
    for (size_t i = 0; i < e->shnum; i++)
        if (e->sh[i].sh_type == type && e->sh[i].sh_entsize == sizeof(Elf64_Sym))
            return &e->sh[i];
    return NULL;
}

int flamme_elf_each_symbol(const struct flamme_elf *e, const Elf64_Shdr *tab,
                           int (*fn)(void *ctx, const Elf64_Sym *sym), void *ctx)
{
    enum { CHUNK = 2048 }; /* symbols read at a time (48 KiB) */
    size_t nsym = (size_t)(tab->sh_size / sizeof(Elf64_Sym));
    Elf64_Sym *buf = malloc(CHUNK * sizeof *buf);
    int rc = buf ? 0 : -1;
    for (size_t at = 0; at < nsym && rc == 0; at += CHUNK) {
        size_t n = nsym - at < CHUNK ? nsym - at : CHUNK;
        if (flamme_elf_read(e, tab->sh_offset + at * sizeof *buf, buf, n * sizeof *buf) != 0)
            break;
        for (size_t k = 0; k < n && rc == 0; k++)
            rc = fn(ctx, &buf[k]);
    }
    free(buf);
    return rc;
}

size_t flamme_elf_notes_build_id(const uint8_t *buf, uint64_t end, uint8_t *id)
{
    uint64_t at = 0;
    while (end - at >= sizeof(Elf64_Nhdr)) {
        Elf64_Nhdr nh;
        memcpy(&nh, buf + at, sizeof nh);
        uint64_t name_at = at + sizeof nh;
        uint64_t desc_at = name_at + (((uint64_t)nh.n_namesz + 3) & ~3ull);
        uint64_t next = desc_at + (((uint64_t)nh.n_descsz + 3) & ~3ull);
        if (desc_at > end || nh.n_descsz > end - desc_at)
            break;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
            memcmp(buf + name_at, "GNU", 4) == 0) {
            if (nh.n_descsz >= 2 && nh.n_descsz <= FLAMME_ELF_BUILD_ID_MAX) {
                memcpy(id, buf + desc_at, nh.n_descsz);
                return nh.n_descsz;
            }
            return 0;
        }
        if (next > end)
            break;
        at = next;
    }
    return 0;
}

/* Searches one note section's notes for the GNU build-id. */
static size_t note_build_id(const struct flamme_elf *e, const Elf64_Shdr *sh, uint8_t *id)
{
    if (sh->sh_size < sizeof(Elf64_Nhdr) || sh->sh_size > NOTE_MAX)
        return 0;
    uint8_t *buf = malloc(sh->sh_size);
    size_t got = 0;
    if (buf && flamme_elf_read(e, sh->sh_offset, buf, sh->sh_size) == 0)
        got = flamme_elf_notes_build_id(buf, sh->sh_size, id);
    free(buf);
    return got;
}

size_t flamme_elf_build_id(const struct flamme_elf *e, uint8_t *id)
{
    for (size_t i = 0; i < e->shnum; i++) {
        if (e->sh[i].sh_type != SHT_NOTE)
            continue;
        size_t n = note_build_id(e, &e->sh[i], id);
        if (n)
            return n;
    }
    return 0;
}

int flamme_elf_exec_bias(const Elf64_Phdr *ph, size_t phnum, uint64_t start, uint64_t off,
                         uint64_t *bias)
{
    /* Mappings start on page boundaries; p_align may be larger (2 MiB) and
     * would make a data segment's range swallow the code's offset. */
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < phnum; i++) {
        if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X) &&
            off >= (ph[i].p_offset & ~(page - 1)) && off < ph[i].p_offset + ph[i].p_filesz) {
            *bias = start - off + ph[i].p_offset - ph[i].p_vaddr;
            return 0;
        }
    }
    return -1;
}
