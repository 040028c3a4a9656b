/*
 * writer/elf.h — the one reader of ELF64 images for writer/: the symbolizer
 * (writer/symbols.c), the line tables (writer/lines.c) and the unwind-row
 * builder (writer/cfi_build.c) all open their files through it.
 *
 * An image is a file descriptor the caller opened (and closes: the
 * descriptor rules of common/fds.h stay with the caller) or bytes in memory
 * (the vDSO). Files are read with pread, never kept mapped: a file truncated
 * on disk under a kept mapping would SIGBUS the profiled program. The input
 * is untrusted: every offset and size taken from the image is checked
 * against the image's size before it is used; a malformed part reads as
 * absent, and nothing here aborts.
 * Who: the writer thread, agent start-up and the tools (allocates, reads
 * files); never a signal handler.
 */
#ifndef FLAMME_WRITER_ELF_H
#define FLAMME_WRITER_ELF_H
#include <elf.h>
#include <stddef.h>
#include <stdint.h>

#define FLAMME_ELF_BUILD_ID_MAX 64 /* longer GNU build-ids are not used */

struct flamme_elf {
    int fd;             /* -1 for an image in memory */
    const uint8_t *mem; /* the image when fd < 0 */
    uint64_t size;      /* bytes of the image (the file's size at open) */
    Elf64_Ehdr eh;
    Elf64_Shdr *sh; /* section headers; NULL (shnum 0) when absent or malformed */
    size_t shnum;
    char *shstr; /* section names, NUL-terminated; NULL when unreadable */
    uint64_t shstr_size;
    Elf64_Phdr *ph; /* program headers; NULL (phnum 0) when there are none.
                     * A caller may take it (set ph to NULL) and free it. */
    size_t phnum;
};

/* Opens the ELF64 little-endian image in the regular file on fd (which stays
 * open and the caller's). Section and program headers are read and checked
 * here. Returns 0, or -1 (e left empty) if fd is not such a file or its
 * program header table is malformed. */
int flamme_elf_open_fd(struct flamme_elf *e, int fd);

/* Same for size bytes at mem (kept by the caller while e is used). */
int flamme_elf_open_mem(struct flamme_elf *e, const void *mem, uint64_t size);

/* Frees what open allocated (never closes the descriptor). */
void flamme_elf_close(struct flamme_elf *e);

/* Copies len bytes at image offset off to dst. Returns 0, or -1 when the
 * range is outside the image or the file cannot be read. */
int flamme_elf_read(const struct flamme_elf *e, uint64_t off, void *dst, uint64_t len);

/* Reads exactly len bytes at offset off of fd (pread, retried when
 * interrupted or short). Returns 0, or -1 (an error, or the end of the
 * file first). */
int flamme_pread_full(int fd, void *dst, size_t len, uint64_t off);

/* Returns a malloc'd copy of [off, off + len) followed by a NUL, or NULL
 * (outside the image, longer than max, unreadable, or no memory). */
char *flamme_elf_copy(const struct flamme_elf *e, uint64_t off, uint64_t len, uint64_t max);

/* Name of section sh ("" when unknown). */
const char *flamme_elf_section_name(const struct flamme_elf *e, const Elf64_Shdr *sh);

/* The first section named name that has bytes in the image (not NOBITS,
 * non-empty), or NULL. */
const Elf64_Shdr *flamme_elf_section(const struct flamme_elf *e, const char *name);

/* The first symbol table of this type (SHT_SYMTAB or SHT_DYNSYM) with
 * ELF64 entries, or NULL. */
const Elf64_Shdr *flamme_elf_symtab(const struct flamme_elf *e, uint32_t type);

/* Calls fn(ctx, sym) for each symbol of the table tab, read a chunk at a
 * time; a chunk that cannot be read ends the walk (as the table's end).
 * Returns 0; fn's first nonzero return, which stops the walk; or -1 when
 * out of memory. */
int flamme_elf_each_symbol(const struct flamme_elf *e, const Elf64_Shdr *tab,
                           int (*fn)(void *ctx, const Elf64_Sym *sym), void *ctx);

/* The GNU build-id (NT_GNU_BUILD_ID note of any SHT_NOTE section): copies
 * it to id (FLAMME_ELF_BUILD_ID_MAX bytes) and returns its length, or 0 when
 * there is none, or it is shorter than 2 or longer than the maximum. */
size_t flamme_elf_build_id(const struct flamme_elf *e, uint8_t *id);

/* The same, from the notes buf[0..len) of one note section or PT_NOTE
 * segment (e.g. a loaded object's own, in memory). */
size_t flamme_elf_notes_build_id(const uint8_t *buf, uint64_t len, uint8_t *id);

/* Load bias of an executable mapping that starts at runtime address start
 * and file offset off: found with the executable PT_LOAD whose
 * (page-rounded) file range holds off. Returns 0 and sets *bias, or -1. */
int flamme_elf_exec_bias(const Elf64_Phdr *ph, size_t phnum, uint64_t start, uint64_t off,
                         uint64_t *bias);

#endif
