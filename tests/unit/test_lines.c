/*
 * tests/unit/test_lines.c — writer/lines.c: source positions from DWARF
 * .debug_line. This binary is built with -g, so it looks itself up: the
 * address of a function defined here must map to this file and to the line
 * recorded inside that function. Garbage, a truncated copy of this binary
 * and an ELF file without .debug_line must give NULL, never a crash. The
 * index kept between processes gives the same positions, is what a later
 * open reads, and a damaged one is built again; so do the rows kept
 * between processes, which a later open reads instead of running units.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "writer/cfi_cache.h"
#include "writer/lines.h"

#include <dirent.h>

static char dir[256];
static int marked_line;

/* Not inlined and kept out of line so that its address is its own code. */
__attribute__((noinline, used)) int lines_target(int x)
{
    marked_line = __LINE__ + 1;
    return x * 3 + marked_line;
}

static int find_bias(struct dl_phdr_info *info, size_t size, void *data)
{
    /* The first object visited is the executable itself. */
    *(uintptr_t *)data = (uintptr_t)info->dlpi_addr;
    return 1;
}

/* The address of fn in this executable's own virtual address space. */
static uint64_t file_vaddr(const void *fn)
{
    uintptr_t bias = 0;
    dl_iterate_phdr(find_bias, &bias);
    return (uint64_t)((uintptr_t)fn - bias);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0 && (a == b || s[a - b - 1] == '/');
}

TEST(own_function_maps_to_this_file_and_line)
{
    lines_target(1);
    flamme_lines *l = flamme_lines_open("/proc/self/exe");
    CHECK(l != NULL);
    if (!l)
        return;
    uint64_t start = file_vaddr((const void *)lines_target);
    /* Every instruction of the function's first bytes lies between its
     * opening line and the line after the marked one. */
    int found = 0, near = 0;
    for (uint64_t a = start; a < start + 16; a++) {
        const char *file = NULL;
        uint32_t line = 0;
        if (!flamme_lines_lookup(l, a, &file, &line))
            continue;
        found++;
        CHECK(ends_with(file, "test_lines.c"));
        CHECK((int)line >= marked_line - 3 && (int)line <= marked_line + 1);
        if ((int)line >= marked_line - 2 && (int)line <= marked_line + 2)
            near++;
    }
    CHECK(found > 0 && near > 0);
    /* A function of another file (libflamme_core.a's) maps to that file. */
    const char *file = NULL;
    uint32_t line = 0;
    CHECK(flamme_lines_lookup(l, file_vaddr((const void *)flamme_lines_open), &file, &line) == 1);
    CHECK(file && ends_with(file, "lines.c") && !ends_with(file, "test_lines.c") && line > 0);
    /* Below the first row nothing is known. */
    CHECK(flamme_lines_lookup(l, 0, &file, &line) == 0);
    flamme_lines_close(l);
}

static void spit(const char *p, const void *b, size_t len)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, b, len) == (ssize_t)len);
    close(fd);
}

static uint8_t *slurp(const char *p, size_t *len)
{
    int fd = open(p, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return NULL;
    uint8_t *b = malloc((size_t)st.st_size);
    size_t done = 0;
    while (b && done < (size_t)st.st_size) {
        ssize_t r = read(fd, b + done, (size_t)st.st_size - done);
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    close(fd);
    *len = done;
    return b;
}

TEST(bad_files_give_null)
{
    char path[512];
    CHECK(flamme_lines_open("/nonexistent/file") == NULL);
    CHECK(flamme_lines_open("/proc/self") == NULL); /* a directory */
    snprintf(path, sizeof path, "%s/garbage", dir);
    uint8_t junk[4096];
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < sizeof junk; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        junk[i] = (uint8_t)x;
    }
    spit(path, junk, sizeof junk);
    CHECK(flamme_lines_open(path) == NULL);
    memcpy(junk, "\x7f" "ELF\x02\x01\x01", 7); /* an ELF header over garbage */
    spit(path, junk, sizeof junk);
    CHECK(flamme_lines_open(path) == NULL);
    spit(path, "", 0);
    CHECK(flamme_lines_open(path) == NULL);
}

/* Writes the test binary to dir/out with every NUL-terminated string
 * `name` (a section's name) spoiled in place, so that the section is not
 * found. Returns how many were, or -1 when the binary is unreadable. */
static int self_without(const char *name, const char *out, char *path, size_t pathsz)
{
    size_t len = 0, n = strlen(name) + 1; /* with its NUL: not .debug_line_str */
    uint8_t *b = slurp("/proc/self/exe", &len);
    if (!b)
        return -1;
    int renamed = 0;
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(b + i, name, n) == 0) {
            b[i + 1] = 'X';
            renamed++;
        }
    snprintf(path, pathsz, "%s/%s", dir, out);
    spit(path, b, len);
    free(b);
    return renamed;
}

/* An ELF file whose .debug_line is gone. */
TEST(no_debug_line_gives_null)
{
    char path[512];
    CHECK(self_without(".debug_line", "nolines", path, sizeof path) >= 1);
    CHECK(flamme_lines_open(path) == NULL);
}

static int exec_segment(struct dl_phdr_info *info, size_t size, void *data)
{
    uint64_t *range = data;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD && (info->dlpi_phdr[i].p_flags & PF_X)) {
            range[0] = info->dlpi_phdr[i].p_vaddr;
            range[1] = info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz;
            break;
        }
    return 1; /* the executable only */
}

/* Where .debug_aranges says each unit's code lies, and where running every
 * line program finds it (a file without that section: clang's, or this
 * binary with the section renamed in place), must give the same position
 * wherever both give one. The ranges end where a function does, so the
 * padding before the next function (which a sequence's last row covers)
 * may have a position only without them: a few bytes in a hundred. */
TEST(aranges_and_line_programs_agree)
{
    char path[512];
    /* gcc -g writes it (lines.c names it too, in .rodata) */
    CHECK(self_without(".debug_aranges", "noaranges", path, sizeof path) >= 1);
    flamme_lines *with = flamme_lines_open("/proc/self/exe"), *without = flamme_lines_open(path);
    CHECK(with != NULL && without != NULL);
    uint64_t range[2] = { 0, 0 };
    dl_iterate_phdr(exec_segment, range);
    CHECK(range[1] > range[0]);
    size_t found = 0, differ = 0, padding = 0;
    for (uint64_t a = range[0]; with && without && a < range[1]; a++) {
        const char *f1 = NULL, *f2 = NULL;
        uint32_t l1 = 0, l2 = 0;
        int k1 = flamme_lines_lookup(with, a, &f1, &l1), k2 = flamme_lines_lookup(without, a, &f2, &l2);
        found += k1;
        if (!k1 && k2) {
            padding++;
        } else if (k1 != k2 || (k1 && (strcmp(f1, f2) != 0 || l1 != l2))) {
            if (differ++ < 5)
                printf("  info: at 0x%llx: %s:%u from .debug_aranges, %s:%u without\n",
                       (unsigned long long)a, k1 ? f1 : "-", k1 ? l1 : 0, k2 ? f2 : "-",
                       k2 ? l2 : 0);
        }
    }
    uint64_t code = range[1] - range[0];
    printf("  info: %zu of %llu code bytes have a position, %zu differ, %zu only without"
           " .debug_aranges\n", found, (unsigned long long)code, differ, padding);
    CHECK(found > code / 4 && differ == 0 && padding <= code / 50);
    flamme_lines_close(with);
    flamme_lines_close(without);
}

/* This binary cut at many lengths and with bytes flipped inside its
 * .debug_line: open either fails or gives a table whose lookups work. */
TEST(damaged_copies_never_crash)
{
    size_t len = 0;
    uint8_t *b = slurp("/proc/self/exe", &len);
    CHECK(b != NULL);
    if (!b)
        return;
    char path[512];
    snprintf(path, sizeof path, "%s/damaged", dir);
    for (size_t cut = 64; cut < len; cut += len / 37 + 1) {
        spit(path, b, cut);
        flamme_lines *l = flamme_lines_open(path);
        const char *f;
        uint32_t line;
        flamme_lines_lookup(l, 0x1000, &f, &line);
        flamme_lines_close(l);
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int opened = 0;
    for (int round = 0; round < 200; round++) {
        uint8_t *c = malloc(len);
        memcpy(c, b, len);
        for (int k = 0; k < 64; k++) { /* flips anywhere past the ELF header */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            c[64 + x % (len - 64)] ^= (uint8_t)(x >> 32);
        }
        spit(path, c, len);
        flamme_lines *l = flamme_lines_open(path);
        if (l) {
            opened++;
            const char *f;
            uint32_t line;
            for (uint64_t a = 0; a < 0x40000; a += 0x101)
                if (flamme_lines_lookup(l, a, &f, &line))
                    CHECK(f != NULL && strlen(f) < 4096);
        }
        flamme_lines_close(l);
        free(c);
    }
    CHECK(opened > 0); /* most flips miss the line program: those still open */
    free(b);
}

/* The position of lines_target in l: 1 if it is in this file, near the
 * marked line. */
static int finds_target(flamme_lines *l)
{
    const char *file = NULL;
    uint32_t line = 0;
    return flamme_lines_lookup(l, file_vaddr((const void *)lines_target), &file, &line) == 1 &&
           ends_with(file, "test_lines.c") && (int)line >= marked_line - 3 &&
           (int)line <= marked_line + 1;
}

/* Two copies of this test program in dir, named after tag: the one to
 * open (copy) and the one to rename over it (other). Returns 1, or 0. */
static int two_copies(const char *tag, char *copy, size_t csz, char *other, size_t osz)
{
    lines_target(1);
    snprintf(copy, csz, "%s/%s-copy", dir, tag);
    snprintf(other, osz, "%s/%s-other", dir, tag);
    size_t len = 0;
    uint8_t *b = slurp("/proc/self/exe", &len);
    CHECK(b != NULL && len > 0);
    if (!b)
        return 0;
    spit(copy, b, len);
    spit(other, b, len);
    free(b);
    return 1;
}

/* A large .debug_line is read from the file when a unit is first looked
 * up, through a descriptor the table keeps (flamme_lines_whole_max lowered
 * to 0 here; a smaller one is copied at open). A program that closes every
 * descriptor (a daemon) meanwhile must not cost it its positions; a file
 * renamed over the path meanwhile (here a copy of the same bytes, so that
 * only the identity check can tell) is not read. */
TEST(units_read_after_the_program_closed_every_descriptor)
{
    uint64_t whole_max = flamme_lines_whole_max;
    flamme_lines_whole_max = 0;
    char copy[300], other[310];
    if (!two_copies("self", copy, sizeof copy, other, sizeof other))
        return;
    flamme_lines *l = flamme_lines_open(copy);
    flamme_lines *gone = flamme_lines_open(copy);
    CHECK(l != NULL && gone != NULL);
    if (!l || !gone)
        return;
    /* What a daemon does: every descriptor past stderr closed. */
    CHECK(syscall(SYS_close_range, 3u, ~0u, 0u) == 0);
    CHECK(finds_target(l));
    CHECK(rename(other, copy) == 0);
    CHECK(!finds_target(gone));
    flamme_lines_close(l);
    flamme_lines_close(gone);
    flamme_lines_whole_max = whole_max;
}

/* A .debug_line copied whole at open is the file that was opened: units
 * run after the path was renamed over (a rebuild) still give that file's
 * positions, and no descriptor is needed for them. */
TEST(copied_line_programs_outlive_a_replaced_file)
{
    char copy[300], other[310];
    if (!two_copies("whole", copy, sizeof copy, other, sizeof other))
        return;
    flamme_lines *l = flamme_lines_open(copy);
    CHECK(l != NULL);
    if (!l)
        return;
    CHECK(rename(other, copy) == 0);
    CHECK(syscall(SYS_close_range, 3u, ~0u, 0u) == 0);
    CHECK(finds_target(l));
    flamme_lines_close(l);
}

/* A line program whose header names its directories and file through
 * .debug_str (DW_FORM_strp), which a table copies only the first time a
 * unit needs it: the OCaml compilers never do, so no other test reaches
 * it. Written here by hand (DWARF 5, one sequence over strp_target, line
 * 42), assembled into a library at test time. */
static const char strp_asm[] =
    "	.text\n"
    "	.globl strp_target\n"
    "	.type strp_target, @function\n"
    "strp_target:\n"
    "	.rept 16\n"
    "	nop\n"
    "	.endr\n"
    "	ret\n"
    "	.size strp_target, .-strp_target\n"
    "	.section .debug_str,\"MS\",@progbits,1\n"
    ".Ls_dir:	.string \"/src/proj\"\n"
    ".Ls_sub:	.string \"/src/proj/lib\"\n"
    ".Ls_file:	.string \"strp_file.ml\"\n"
    "	.section .debug_line,\"\",@progbits\n"
    "	.long .Lend - .Lver\n"
    ".Lver:	.short 5\n"
    "	.byte 8, 0\n"
    "	.long .Lhend - .Lhstart\n"
    ".Lhstart:\n"
    "	.byte 1, 1, 1, -5, 14, 13\n"
    "	.byte 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1\n"
    "	.byte 1\n"
    "	.uleb128 1, 0x0e\n"
    "	.uleb128 2\n"
    "	.long .Ls_dir, .Ls_sub\n"
    "	.byte 2\n"
    "	.uleb128 1, 0x0e, 2, 0x0b\n"
    "	.uleb128 1\n"
    "	.long .Ls_file\n"
    "	.byte 1\n"
    ".Lhend:\n"
    "	.byte 0, 9, 2\n"
    "	.quad strp_target\n"
    "	.byte 4\n"
    "	.uleb128 0\n"
    "	.byte 3\n"
    "	.sleb128 41\n"
    "	.byte 1\n"
    "	.byte 2\n"
    "	.uleb128 17\n"
    "	.byte 0, 1, 1\n"
    ".Lend:\n";

TEST(file_names_from_debug_str)
{
    char src[300], so[300], cmd[800];
    snprintf(src, sizeof src, "%s/strp.s", dir);
    snprintf(so, sizeof so, "%s/libstrp.so", dir);
    spit(src, strp_asm, sizeof strp_asm - 1);
    snprintf(cmd, sizeof cmd, "cc -shared -nostdlib -o '%s' '%s'", so, src);
    int built = system(cmd) == 0;
    CHECK(built);
    void *h = built ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *f = h ? dlsym(h, "strp_target") : NULL;
    Dl_info di;
    CHECK(f != NULL && dladdr(f, &di) != 0);
    flamme_lines *l = flamme_lines_open(so);
    CHECK(l != NULL);
    if (!f || !l)
        return;
    uint64_t at = (uint64_t)((const char *)f - (const char *)di.dli_fbase);
    const char *file = NULL;
    uint32_t line = 0;
    CHECK(flamme_lines_lookup(l, at + 4, &file, &line) == 1);
    /* Under the compilation directory: shown relative to it. */
    CHECK_STR(file, "lib/strp_file.ml");
    CHECK(line == 42);
    CHECK(flamme_lines_lookup(l, at + 17, &file, &line) == 0); /* past the sequence */
    flamme_lines_close(l);
    dlclose(h);
}

/* The one file in directory d (a path into out), or 0 when there is not
 * exactly one. */
static int only_file(const char *d, char *out, size_t len)
{
    DIR *dh = opendir(d);
    struct dirent *de;
    int n = 0;
    while (dh && (de = readdir(dh)))
        if (de->d_name[0] != '.' && n++ == 0)
            snprintf(out, len, "%s/%s", d, de->d_name);
    if (dh)
        closedir(dh);
    return n == 1;
}

/* Lookups of a and b differ at how many code bytes of this executable. */
static size_t differences(flamme_lines *a, flamme_lines *b, size_t *found)
{
    uint64_t range[2] = { 0, 0 };
    dl_iterate_phdr(exec_segment, range);
    size_t differ = 0;
    *found = 0;
    for (uint64_t at = range[0]; a && b && at < range[1]; at++) {
        const char *f1 = NULL, *f2 = NULL;
        uint32_t l1 = 0, l2 = 0;
        int k1 = flamme_lines_lookup(a, at, &f1, &l1), k2 = flamme_lines_lookup(b, at, &f2, &l2);
        *found += k1;
        differ += k1 != k2 || (k1 && (strcmp(f1, f2) != 0 || l1 != l2));
    }
    return differ;
}

TEST(kept_index_gives_the_same_positions)
{
    char cache[300], kept[600];
    snprintf(cache, sizeof cache, "%s/kept", dir);
    flamme_cfi_cache_configure(cache);
    uint64_t min0 = flamme_lines_kept_min;
    flamme_lines_kept_min = 0; /* this binary's .debug_line is small */
    flamme_lines *built = flamme_lines_open("/proc/self/exe");
    CHECK(built != NULL && only_file(cache, kept, sizeof kept));
    flamme_lines *read = flamme_lines_open("/proc/self/exe");
    size_t found = 0;
    CHECK(read != NULL && differences(built, read, &found) == 0 && found > 1000);
    flamme_lines_close(read);
    /* What a later open uses is the kept index: with every sequence moved
     * to the first unit (still well formed) most positions change. */
    size_t len = 0;
    uint8_t *b = slurp(kept, &len);
    const size_t hdr = 128; /* writer/cfi_cache.c's header */
    uint64_t nunits = 0, nseqs = 0;
    CHECK(b && len > hdr + 24);
    if (!b || len <= hdr + 24) {
        free(b);
        return;
    }
    memcpy(&nunits, b + hdr + 8, 8);
    memcpy(&nseqs, b + hdr + 16, 8);
    CHECK(len == hdr + 24 + 24 * nunits + 24 * nseqs && nunits > 1);
    uint8_t *moved = malloc(len);
    memcpy(moved, b, len);
    for (uint64_t i = 0; len == hdr + 24 + 24 * nunits + 24 * nseqs && i < nseqs; i++)
        memset(moved + hdr + 24 + 24 * nunits + 24 * i + 16, 0, 8);
    spit(kept, moved, len);
    read = flamme_lines_open("/proc/self/exe");
    CHECK(read != NULL && differences(built, read, &found) > found / 2);
    flamme_lines_close(read);
    /* Damaged ones are built again: a unit outside .debug_line, sequences
     * out of order, a short file. */
    for (int how = 0; how < 3; how++) {
        memcpy(moved, b, len);
        size_t n = len;
        if (how == 0)
            memset(moved + hdr + 24, 0xff, 8);
        else if (how == 1 && nseqs > 1)
            memset(moved + hdr + 24 + 24 * nunits + 24 * (nseqs - 1), 0, 8);
        else
            n = len - 8;
        spit(kept, moved, n);
        read = flamme_lines_open("/proc/self/exe");
        CHECK(read != NULL && differences(built, read, &found) == 0);
        flamme_lines_close(read);
    }
    free(moved);
    free(b);
    flamme_lines_close(built);
    flamme_lines_kept_min = min0;
    flamme_cfi_cache_configure(NULL);
}

/* The one file in directory d whose first bytes are magic (a path into
 * out), or 0 when there is not exactly one. */
static int kept_file(const char *d, const char *magic, char *out, size_t len)
{
    DIR *dh = opendir(d);
    struct dirent *de;
    int n = 0;
    while (dh && (de = readdir(dh))) {
        char p[600], m[8] = { 0 };
        snprintf(p, sizeof p, "%s/%s", d, de->d_name);
        FILE *f = de->d_name[0] != '.' ? fopen(p, "rb") : NULL;
        if (f && fread(m, 1, sizeof m, f) == sizeof m && memcmp(m, magic, strlen(magic) + 1) == 0 &&
            n++ == 0)
            snprintf(out, len, "%s", p);
        if (f)
            fclose(f);
    }
    if (dh)
        closedir(dh);
    return n == 1;
}

TEST(kept_rows_give_the_same_positions)
{
    char cache[300], rows[600];
    snprintf(cache, sizeof cache, "%s/keptrows", dir);
    flamme_cfi_cache_configure(cache);
    uint64_t min0 = flamme_lines_kept_min;
    flamme_lines_kept_min = 0;
    /* A first process runs every unit (differences looks up every code
     * byte) and keeps their rows. */
    flamme_lines *ran = flamme_lines_open("/proc/self/exe");
    flamme_lines *ref = flamme_lines_open("/proc/self/exe");
    size_t found = 0;
    CHECK(ran && ref && differences(ran, ref, &found) == 0 && found > 1000);
    size_t units = flamme_lines_units_run(ran);
    printf("  info: %zu units run\n", units);
    CHECK(units > 1);
    flamme_lines_keep(ran);
    flamme_lines_close(ran);
    CHECK(kept_file(cache, "FLMLROW", rows, sizeof rows));
    /* A later one reads them back: the same positions, no unit run. */
    flamme_lines *back = flamme_lines_open("/proc/self/exe");
    CHECK(back != NULL && differences(ref, back, &found) == 0 && found > 1000);
    CHECK(flamme_lines_units_run(back) == 0);
    flamme_lines_close(back);
    /* Damaged rows are run again, with the same positions: the file cut
     * short, the head's file count lowered, its unit count changed (every
     * unit run again); the last unit's last row running past its bytes
     * (that unit alone, read from .debug_line by itself). */
    size_t len = 0;
    uint8_t *b = slurp(rows, &len);
    const size_t hdr = 128; /* writer/cfi_cache.c's header */
    CHECK(b && len > hdr + 48);
    for (int how = 0; b && len > hdr + 48 && how < 4; how++) {
        uint8_t *d = malloc(len);
        memcpy(d, b, len);
        size_t n = len;
        uint64_t v;
        if (how == 0) {
            n = len - 3;
        } else if (how < 3) {
            memcpy(&v, d + hdr + (how == 1 ? 24 : 8), 8);
            v = how == 1 ? v / 2 : v + 1;
            memcpy(d + hdr + (how == 1 ? 24 : 8), &v, 8);
        } else {
            d[len - 1] |= 0x80;
        }
        spit(rows, d, n);
        free(d);
        back = flamme_lines_open("/proc/self/exe");
        CHECK(back != NULL && differences(ref, back, &found) == 0 && found > 1000);
        size_t again = flamme_lines_units_run(back);
        CHECK(how < 3 ? again == units : again == 1);
        flamme_lines_close(back);
    }
    free(b);
    flamme_lines_close(ref);
    flamme_lines_kept_min = min0;
    flamme_cfi_cache_configure(NULL);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/flamme-test-lines-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(own_function_maps_to_this_file_and_line);
    RUN(bad_files_give_null);
    RUN(no_debug_line_gives_null);
    RUN(aranges_and_line_programs_agree);
    RUN(damaged_copies_never_crash);
    RUN(units_read_after_the_program_closed_every_descriptor);
    RUN(copied_line_programs_outlive_a_replaced_file);
    RUN(file_names_from_debug_str);
    RUN(kept_index_gives_the_same_positions);
    RUN(kept_rows_give_the_same_positions);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE();
}
