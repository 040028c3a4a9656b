/*
 * tests/unit/test_elf.c — writer/elf.c, the ELF reader under the symbolizer,
 * the line tables and the unwind-row builder, on images built here in
 * memory: a well-formed one is read back (sections by name, build-ids of 2
 * to 64 bytes, the load bias), and every truncation and a set of corrupt
 * offsets and sizes give a clear failure or an absent part, never a read
 * outside the image (mk/elf.mk also runs this built with AddressSanitizer,
 * each image in a heap block of exactly its size).
 */
#include "tests/unit/check.h"
#include "writer/elf.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Layout of the test image: header, one PT_LOAD, names, a build-id note,
 * a .text of 64 bytes, then the section headers. */
enum { SEC_NULL, SEC_SHSTR, SEC_NOTE, SEC_TEXT, NSEC };
static const char names[] = "\0.shstrtab\0.note.gnu.build-id\0.text";
enum { NM_SHSTR = 1, NM_NOTE = 11, NM_TEXT = 30 };

struct image {
    uint8_t *buf;
    size_t size;
    size_t note_off; /* where the note header is */
};

/* Builds the image with an idlen-byte build-id (bytes 0x10, 0x11, ...). */
static struct image build(size_t idlen)
{
    size_t off_ph = sizeof(Elf64_Ehdr), off_names = off_ph + sizeof(Elf64_Phdr);
    size_t off_note = (off_names + sizeof names + 7) & ~(size_t)7;
    size_t note_size = sizeof(Elf64_Nhdr) + 4 + ((idlen + 3) & ~(size_t)3);
    size_t off_text = (off_note + note_size + 15) & ~(size_t)15;
    size_t off_sh = off_text + 64;
    size_t size = off_sh + NSEC * sizeof(Elf64_Shdr);
    struct image im = { calloc(1, size), size, off_note };
    if (!im.buf)
        abort();
    Elf64_Ehdr eh = { .e_type = ET_DYN, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
                      .e_phoff = off_ph, .e_shoff = off_sh, .e_ehsize = sizeof eh,
                      .e_phentsize = sizeof(Elf64_Phdr), .e_phnum = 1,
                      .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = NSEC, .e_shstrndx = SEC_SHSTR };
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    memcpy(im.buf, &eh, sizeof eh);
    Elf64_Phdr ph = { .p_type = PT_LOAD, .p_flags = PF_R | PF_X, .p_offset = 0,
                      .p_vaddr = 0x400000, .p_filesz = off_sh, .p_memsz = off_sh };
    memcpy(im.buf + off_ph, &ph, sizeof ph);
    memcpy(im.buf + off_names, names, sizeof names);
    Elf64_Nhdr nh = { 4, (Elf64_Word)idlen, NT_GNU_BUILD_ID };
    memcpy(im.buf + off_note, &nh, sizeof nh);
    memcpy(im.buf + off_note + sizeof nh, "GNU", 4);
    for (size_t i = 0; i < idlen; i++)
        im.buf[off_note + sizeof nh + 4 + i] = (uint8_t)(0x10 + i);
    memset(im.buf + off_text, 0xc3, 64);
    Elf64_Shdr sh[NSEC] = {
        [SEC_SHSTR] = { .sh_name = NM_SHSTR, .sh_type = SHT_STRTAB, .sh_offset = off_names,
                        .sh_size = sizeof names },
        [SEC_NOTE] = { .sh_name = NM_NOTE, .sh_type = SHT_NOTE, .sh_flags = SHF_ALLOC,
                       .sh_offset = off_note, .sh_size = note_size, .sh_addralign = 4 },
        [SEC_TEXT] = { .sh_name = NM_TEXT, .sh_type = SHT_PROGBITS,
                       .sh_flags = SHF_ALLOC | SHF_EXECINSTR, .sh_addr = 0x400000 + off_text,
                       .sh_offset = off_text, .sh_size = 64 },
    };
    memcpy(im.buf + off_sh, sh, sizeof sh);
    return im;
}

/* The image's first n bytes in a heap block of exactly n bytes. */
static uint8_t *exact_copy(const struct image *im, size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    if (!p)
        abort();
    memcpy(p, im->buf, n);
    return p;
}

/* Everything e offers, used the way the writer uses it. Returns the
 * build-id length. */
static size_t use_all(struct flamme_elf *e)
{
    for (size_t i = 0; i < e->shnum; i++) {
        const Elf64_Shdr *sh = &e->sh[i];
        (void)flamme_elf_section_name(e, sh);
        char *data = flamme_elf_copy(e, sh->sh_offset, sh->sh_size, 1u << 20);
        if (data)
            CHECK(sh->sh_offset + sh->sh_size <= e->size);
        free(data);
    }
    (void)flamme_elf_section(e, ".text");
    uint8_t id[FLAMME_ELF_BUILD_ID_MAX];
    return flamme_elf_build_id(e, id);
}

TEST(well_formed)
{
    static const size_t lens[] = { 2, 20, 40, 41, 64 };
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        struct image im = build(lens[k]);
        struct flamme_elf e;
        CHECK(flamme_elf_open_mem(&e, im.buf, im.size) == 0);
        CHECK(e.shnum == NSEC && e.phnum == 1);
        const Elf64_Shdr *t = flamme_elf_section(&e, ".text");
        CHECK(t == &e.sh[SEC_TEXT]);
        CHECK_STR(flamme_elf_section_name(&e, &e.sh[SEC_NOTE]), ".note.gnu.build-id");
        CHECK(flamme_elf_section(&e, ".debug_line") == NULL);
        uint8_t id[FLAMME_ELF_BUILD_ID_MAX];
        size_t n = flamme_elf_build_id(&e, id);
        CHECK(n == lens[k]);
        CHECK(n >= 2 && id[0] == 0x10 && id[n - 1] == (uint8_t)(0x10 + n - 1));
        /* The mapping of .text's page at 0x7f0000001000, file offset 0. */
        uint64_t bias = 0;
        CHECK(flamme_elf_exec_bias(e.ph, e.phnum, 0x7f0000000000, 0, &bias) == 0);
        CHECK(bias == 0x7f0000000000 - 0x400000);
        CHECK(flamme_elf_exec_bias(e.ph, e.phnum, 0x7f0000000000, im.size + 4096, &bias) == -1);
        flamme_elf_close(&e);
        free(im.buf);
    }
    /* 65 bytes is past the maximum: no build-id rather than a cut one. */
    struct image im = build(65);
    struct flamme_elf e;
    CHECK(flamme_elf_open_mem(&e, im.buf, im.size) == 0);
    uint8_t id[FLAMME_ELF_BUILD_ID_MAX];
    CHECK(flamme_elf_build_id(&e, id) == 0);
    flamme_elf_close(&e);
    free(im.buf);
}

/* Every prefix of the image: the header-less ones fail, the others open
 * with the parts that fit, and nothing is read past the end. */
TEST(truncated)
{
    struct image im = build(20);
    size_t opened = 0, with_sections = 0;
    for (size_t n = 0; n < im.size; n++) {
        uint8_t *p = exact_copy(&im, n);
        struct flamme_elf e;
        if (flamme_elf_open_mem(&e, p, n) == 0) {
            opened++;
            CHECK(n >= sizeof(Elf64_Ehdr) + sizeof(Elf64_Phdr));
            with_sections += e.shnum > 0;
            CHECK(use_all(&e) == 0); /* the section headers are the image's end */
            flamme_elf_close(&e);
        }
        free(p);
    }
    CHECK(opened == im.size - sizeof(Elf64_Ehdr) - sizeof(Elf64_Phdr));
    CHECK(with_sections == 0);
    free(im.buf);
}

/* Header fields pointing outside the image, wrapping sums, and notes whose
 * sizes overrun their section. */
TEST(corrupt)
{
    struct image im = build(20);
    Elf64_Ehdr *eh = (Elf64_Ehdr *)im.buf;
    Elf64_Shdr *sh = (Elf64_Shdr *)(im.buf + eh->e_shoff);
    Elf64_Nhdr *nh = (Elf64_Nhdr *)(im.buf + im.note_off);
    struct flamme_elf e;
    uint8_t id[FLAMME_ELF_BUILD_ID_MAX];
    uint8_t *saved = exact_copy(&im, im.size);

#define RESET() memcpy(im.buf, saved, im.size)
#define OPEN_OK() (flamme_elf_open_mem(&e, im.buf, im.size) == 0)

    eh->e_phoff = UINT64_MAX - 8;
    CHECK(!OPEN_OK()); /* a program header table outside the image */
    RESET();
    eh->e_phentsize = 40;
    CHECK(!OPEN_OK());
    RESET();
    eh->e_ident[EI_CLASS] = ELFCLASS32;
    CHECK(!OPEN_OK());
    RESET();

    static const uint64_t bad_shoff[] = { UINT64_MAX, UINT64_MAX - 63, 1u << 30 };
    for (size_t i = 0; i < sizeof bad_shoff / sizeof bad_shoff[0]; i++) {
        eh->e_shoff = bad_shoff[i];
        CHECK(OPEN_OK() && e.shnum == 0 && use_all(&e) == 0);
        flamme_elf_close(&e);
        RESET();
    }
    eh->e_shstrndx = NSEC;
    CHECK(OPEN_OK() && e.shnum == 0);
    flamme_elf_close(&e);
    RESET();

    /* Section names and a section's bytes outside the image. */
    sh[SEC_SHSTR].sh_offset = UINT64_MAX - 4;
    CHECK(OPEN_OK() && e.shnum == NSEC && e.shstr == NULL);
    CHECK(flamme_elf_section(&e, ".text") == NULL);
    CHECK_STR(flamme_elf_section_name(&e, &e.sh[SEC_TEXT]), "");
    flamme_elf_close(&e);
    RESET();
    sh[SEC_TEXT].sh_name = 0xffff;
    CHECK(OPEN_OK() && flamme_elf_section(&e, ".text") == NULL);
    flamme_elf_close(&e);
    RESET();
    sh[SEC_TEXT].sh_size = UINT64_MAX;
    CHECK(OPEN_OK());
    const Elf64_Shdr *t = &e.sh[SEC_TEXT];
    CHECK(flamme_elf_copy(&e, t->sh_offset, t->sh_size, UINT64_MAX) == NULL);
    flamme_elf_close(&e);
    RESET();

    /* Notes: sizes running past the section, or wrapping when rounded. */
    static const Elf64_Word bad_sizes[] = { 0xffffffffu, 0xfffffffdu, 0x1000 };
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        nh->n_namesz = bad_sizes[i];
        CHECK(OPEN_OK() && flamme_elf_build_id(&e, id) == 0);
        flamme_elf_close(&e);
        RESET();
        nh->n_descsz = bad_sizes[i];
        CHECK(OPEN_OK() && flamme_elf_build_id(&e, id) == 0);
        flamme_elf_close(&e);
        RESET();
    }
    sh[SEC_NOTE].sh_size = UINT64_MAX;
    CHECK(OPEN_OK() && flamme_elf_build_id(&e, id) == 0);
    flamme_elf_close(&e);
    RESET();
    CHECK(OPEN_OK() && flamme_elf_build_id(&e, id) == 20);
    flamme_elf_close(&e);
#undef RESET
#undef OPEN_OK
    free(saved);
    free(im.buf);
}

/* A descriptor that is not a regular file is refused; the descriptor is the
 * caller's and stays open. */
TEST(descriptors)
{
    struct flamme_elf e;
    int fd = open("/dev/null", O_RDONLY);
    CHECK(fd >= 0 && flamme_elf_open_fd(&e, fd) == -1);
    CHECK(fcntl(fd, F_GETFD) != -1);
    close(fd);
    fd = open("/", O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0 && flamme_elf_open_fd(&e, fd) == -1);
    close(fd);
    CHECK(flamme_elf_open_fd(&e, -1) == -1);
    /* This test's own executable opens, and closing it leaves fd open. */
    fd = open("/proc/self/exe", O_RDONLY);
    CHECK(fd >= 0 && flamme_elf_open_fd(&e, fd) == 0);
    const Elf64_Shdr *t = flamme_elf_section(&e, ".text");
    CHECK(t && (t->sh_flags & SHF_EXECINSTR));
    flamme_elf_close(&e);
    CHECK(fcntl(fd, F_GETFD) != -1);
    close(fd);
}

int main(void)
{
    RUN(well_formed);
    RUN(truncated);
    RUN(corrupt);
    RUN(descriptors);
    return CHECK_DONE();
}
