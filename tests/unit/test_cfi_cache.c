/*
 * tests/unit/test_cfi_cache.c — writer/cfi_cache.c through the builder
 * (flamme_cfi_add_module): libc's rows, built, kept in a fresh cache
 * directory and read back at another load address, must be the rows built
 * from the file; a table changed on disk is what the next process reads (so
 * the test knows the cache was read at all); a table that fails a check
 * (bad rule kind, wrong size) or belongs to a file that changed since is
 * not used; a small file's rows are not kept; a full directory drops its
 * least recently used tables, by count and by size; root makes no
 * directory in another user's.
 */
#include "tests/unit/check.h"
#include "common/cfi_tables.h"
#include "writer/cfi_build.h"
#include "writer/cfi_cache.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOT 0x100000000ull /* each add at its own 4 GiB-aligned range */

static char dir[] = "/tmp/flamme_test_rows_XXXXXX";
static char libc_path[1024];

/* The published module covering addr, or NULL. */
static const struct cfi_mod *module_at(uint64_t addr)
{
    struct cfi_set *s = atomic_load(&flamme_cfi_published);
    for (size_t i = 0; s && i < s->n; i++)
        if (s->mod[i]->lo <= addr && addr < s->mod[i]->hi)
            return s->mod[i];
    return NULL;
}

/* Adds libc at slot k (bias = lo: the same range in the file's own
 * addresses whatever k, as ASLR moves a library between processes). */
static const struct cfi_mod *add_libc(unsigned k)
{
    uint64_t lo = SLOT * k;
    long n = flamme_cfi_add_module(libc_path, lo, lo, lo + 0xffffffffull);
    return n > 0 ? module_at(lo) : NULL;
}

/* Same offsets, and the same rule at each row (whatever its id). */
static int same_rows(const struct cfi_mod *a, const struct cfi_mod *b)
{
    if (!a || !b || a->n != b->n || memcmp(a->off, b->off, a->n * sizeof *a->off))
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->rid[i] >= a->nrules || b->rid[i] >= b->nrules ||
            memcmp(&a->rules[a->rid[i]], &b->rules[b->rid[i]], sizeof(struct rule)))
            return 0;
    return 1;
}

/* The one table in the directory (its path in out). Returns how many there are. */
static int tables(char *out, size_t cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".rows")) {
            n++;
            snprintf(out, cap, "%s/%s", dir, e->d_name);
        }
    if (d)
        closedir(d);
    return n;
}

static void poke(const char *path, off_t at, uint8_t v)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, &v, 1, at) == 1);
    close(fd);
}

TEST(rows_kept_and_read_back)
{
    flamme_cfi_cache_configure(NULL);
    const struct cfi_mod *built = add_libc(1);
    CHECK(built != NULL && built->n >= FLAMME_CFI_CACHE_MIN_ROWS);
    flamme_cfi_cache_configure(dir);
    char table[1200];
    CHECK(tables(table, sizeof table) == 0);
    const struct cfi_mod *first = add_libc(2); /* built again, and kept */
    CHECK(tables(table, sizeof table) == 1);
    const struct cfi_mod *again = add_libc(3); /* read back */
    CHECK(same_rows(built, first));
    CHECK(same_rows(built, again));
    CHECK(again && again->lo == 3 * SLOT && again->hi == 3 * SLOT + 0xffffffffull);
    struct stat st;
    CHECK(stat(table, &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    struct stat dst;
    CHECK(stat(dir, &dst) == 0 && (dst.st_mode & 0777) == 0700);
    if (!built || built->n < 2)
        return;

    /* The file ends with the rule ids, then the distinct rules. */
    CHECK(built->nrules > 1 && built->nrules < built->n);
    off_t rules = (off_t)(st.st_size - (off_t)built->nrules * (off_t)sizeof(struct rule));
    off_t rids = rules - (off_t)built->n * (off_t)sizeof(uint16_t);
    uint16_t last_id = first->rid[built->n - 1];
    off_t last = rules + (off_t)last_id * (off_t)sizeof(struct rule);

    /* The last row's rule, its first save slot changed to another valid
     * value on disk: the next load has it, so the rows really come from
     * the file. */
    int8_t was = first->rules[last_id].save[0];
    poke(table, last + (off_t)offsetof(struct rule, save), (uint8_t)(was == 3 ? 4 : 3));
    const struct cfi_mod *changed = add_libc(4);
    CHECK(changed && changed->n == built->n &&
          changed->rules[changed->rid[built->n - 1]].save[0] == (was == 3 ? 4 : 3));

    /* A rule kind the builder never makes: the table is not used, the rows
     * are built from libc and written again. */
    poke(table, last + (off_t)offsetof(struct rule, reg), 7);
    CHECK(same_rows(built, add_libc(5)));
    CHECK(same_rows(built, add_libc(6)));

    /* A rule id past the rules (the handler indexes without checking): not
     * used either. */
    poke(table, rids + (off_t)(built->n - 1) * 2, 0xff);
    poke(table, rids + (off_t)(built->n - 1) * 2 + 1, 0xff);
    CHECK(same_rows(built, add_libc(11)));
    CHECK(same_rows(built, add_libc(12)));

    /* Cut short: not used either. */
    CHECK(truncate(table, st.st_size - 1) == 0);
    CHECK(same_rows(built, add_libc(7)));
    CHECK(stat(table, &st) == 0 &&
          st.st_size == rules + (off_t)built->nrules * (off_t)sizeof(struct rule));
}

/* A file that changed since its table was written (here: its change time,
 * through a copy renamed over itself) gets a table of its own. */
TEST(changed_file_is_built_again)
{
    flamme_cfi_cache_configure(dir);
    char copy[1100], cmd[2400], table[1200];
    snprintf(copy, sizeof copy, "%s/libc-copy.so", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", libc_path, copy);
    CHECK(system(cmd) == 0);
    int before = tables(table, sizeof table);
    CHECK(flamme_cfi_add_module(copy, 8 * SLOT, 8 * SLOT, 8 * SLOT + 0xffffffffull) > 0);
    CHECK(tables(table, sizeof table) == before + 1);
    CHECK(flamme_cfi_add_module(copy, 9 * SLOT, 9 * SLOT, 9 * SLOT + 0xffffffffull) > 0);
    CHECK(tables(table, sizeof table) == before + 1); /* read back, not written again */
    sleep(1); /* a new modification time for sure, whatever the clock's grain */
    snprintf(cmd, sizeof cmd, "touch '%s'", copy);
    CHECK(system(cmd) == 0);
    CHECK(flamme_cfi_add_module(copy, 10 * SLOT, 10 * SLOT, 10 * SLOT + 0xffffffffull) > 0);
    CHECK(tables(table, sizeof table) == before + 2);
    CHECK(same_rows(module_at(8 * SLOT), module_at(10 * SLOT)));
    unlink(copy);
}

/* A small library's rows are too few to be worth a file: glibc's libdl,
 * a stub since 2.34 (a few rows; the test binary's own, which this used,
 * pass FLAMME_CFI_CACHE_MIN_ROWS in the sanitizer build once each lazy
 * PLT entry has rows: ASan interposes hundreds of functions). */
TEST(small_tables_not_kept)
{
    flamme_cfi_cache_configure(dir);
    char table[1200];
    int before = tables(table, sizeof table);
    long rows = flamme_cfi_add_module("/lib/x86_64-linux-gnu/libdl.so.2", 11 * SLOT, 11 * SLOT,
                                      11 * SLOT + 0xffffffffull);
    CHECK(rows > 0 && rows < FLAMME_CFI_CACHE_MIN_ROWS);
    CHECK(tables(table, sizeof table) == before);
}

/* More tables than FLAMME_CFI_CACHE_MAX_FILES: the oldest go, the one just
 * used stays. Stand-ins with old times fill the directory. */
TEST(full_cache_drops_least_recently_used)
{
    flamme_cfi_cache_configure(dir);
    char path[1200];
    for (int i = 0; i < FLAMME_CFI_CACHE_MAX_FILES + 5; i++) {
        snprintf(path, sizeof path, "%s/%016x.rows", dir, 0xabc000 + i);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        if (f)
            fclose(f);
        struct timespec t[2] = { { 1000000 + i, 0 }, { 1000000 + i, 0 } };
        utimensat(AT_FDCWD, path, t, 0);
    }
    /* Another range of libc (not its table yet): built and written, which
     * makes the directory too full. */
    CHECK(flamme_cfi_add_module(libc_path, 12 * SLOT + 4096, 12 * SLOT, 12 * SLOT + 0xffffffffull) > 0);
    int n = tables(path, sizeof path);
    CHECK(n <= FLAMME_CFI_CACHE_MAX_FILES * 3 / 4 + 1 && n >= FLAMME_CFI_CACHE_MAX_FILES * 3 / 4);
    snprintf(path, sizeof path, "%s/%016x.rows", dir, 0xabc000);
    CHECK(access(path, F_OK) != 0); /* the oldest went */
    snprintf(path, sizeof path, "%s/%016x.rows", dir, 0xabc000 + FLAMME_CFI_CACHE_MAX_FILES + 4);
    CHECK(access(path, F_OK) == 0); /* the newest stand-in stayed */
}

/* Tables of more than FLAMME_CFI_CACHE_MAX_BYTES in all: the oldest go
 * until three quarters of it are left. Stand-ins of 8 MiB each (sparse
 * files: their size, not disk) make 160 MiB. */
TEST(full_cache_keeps_its_size)
{
    flamme_cfi_cache_configure(dir);
    char path[1200];
    for (int i = 0; i < 20; i++) {
        snprintf(path, sizeof path, "%s/%016x.rows", dir, 0xbbb000 + i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && ftruncate(fd, 8 << 20) == 0);
        close(fd);
        struct timespec t[2] = { { 2000000 + i, 0 }, { 2000000 + i, 0 } };
        utimensat(AT_FDCWD, path, t, 0);
    }
    uint64_t total = 0;
    int real[2] = { 0, 0 }; /* tables not stand-ins, before and after */
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            CHECK(flamme_cfi_add_module(libc_path, 14 * SLOT + 8192, 14 * SLOT,
                                        14 * SLOT + 0xffffffffull) > 0);
        total = 0;
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (!strstr(e->d_name, ".rows") || stat(path, &st) != 0)
                continue;
            total += (uint64_t)st.st_size;
            real[pass] += strncmp(e->d_name, "0000000000abc", 13) != 0 &&
                          strncmp(e->d_name, "0000000000bbb", 13) != 0;
        }
        if (d)
            closedir(d);
    }
    CHECK(total <= FLAMME_CFI_CACHE_MAX_BYTES / 4 * 3);
    CHECK(real[1] == real[0] + 1); /* the table just written, and every newer one, stayed */
    snprintf(path, sizeof path, "%s/%016x.rows", dir, 0xbbb000);
    CHECK(access(path, F_OK) != 0); /* the oldest went */
}

/* Run by root with another user's HOME (sudo): no directory of root's is
 * made inside that user's directory. Needs root (to own a directory by
 * another user); skipped otherwise. */
TEST(no_directories_in_others_homes)
{
    if (geteuid() != 0) {
        printf("  (not root; skipped)\n");
        return;
    }
    char home[1100], rows[1200];
    snprintf(home, sizeof home, "%s/someone", dir);
    CHECK(mkdir(home, 0755) == 0 && chown(home, 65534, 65534) == 0);
    snprintf(rows, sizeof rows, "%s/.cache/flamme/rows", home);
    flamme_cfi_cache_configure(rows);
    CHECK(flamme_cfi_add_module(libc_path, 13 * SLOT, 13 * SLOT, 13 * SLOT + 0xffffffffull) > 0);
    snprintf(rows, sizeof rows, "%s/.cache", home);
    CHECK(access(rows, F_OK) != 0);
    flamme_cfi_cache_configure(dir);
}

int main(void)
{
    Dl_info info;
    if (!dladdr((void *)&printf, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, libc_path) || !mkdtemp(dir)) {
        fprintf(stderr, "cannot find libc or make a directory\n");
        return 1;
    }
    RUN(rows_kept_and_read_back);
    RUN(changed_file_is_built_again);
    RUN(small_tables_not_kept);
    RUN(full_cache_drops_least_recently_used);
    RUN(full_cache_keeps_its_size);
    RUN(no_directories_in_others_homes);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE();
}
