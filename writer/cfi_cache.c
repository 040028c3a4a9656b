/*
 * writer/cfi_cache.c — unwind rows kept on disk between processes (see
 * writer/cfi_cache.h).
 *
 * Owns: the cache directory's name and the tables' file format, which is
 * private to one build of flamme (its build-id is in every header, so a
 * table is never read by another build and the format needs no version):
 *   header (struct hdr), then n uint32 offsets, n uint16 rule ids, and
 *   nrules struct rule (common/cfi_tables.h).
 * File names are a hash of the header's key; the header itself is compared
 * whole, so two keys with one hash only replace each other's table. Other
 * per-file tables (flamme_kept_load/store) use the same header with their
 * kind as magic, no range, and bytes as payload.
 * Called by writer/cfi_build.c under its build lock, and by
 * writer/symbols.c from the writer thread; nothing here is shared but the
 * directory's name and the build-id, set before either runs.
 */
#include "writer/cfi_cache.h"

#include "common/bulk.h"
#include "common/fds.h"
#include "common/outfile.h"
#include "writer/elf.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUILDER_ID_MAX 20 /* a GNU build-id (SHA-1) */
#define SUFFIX ".rows"

struct hdr {
    char magic[8];
    uint8_t builder[BUILDER_ID_MAX]; /* this flamme's build-id, zero-padded */
    uint32_t builder_len;
    uint64_t dev, ino, size;
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    uint64_t link_lo, len;
    uint32_t switch_only, rule_size;
    uint64_t n;
    uint64_t nrules; /* rows: the distinct rules; 0 in other tables */
};

_Static_assert(sizeof(struct hdr) == 128 && offsetof(struct hdr, n) == 112,
              "no padding: headers are compared and hashed byte for byte");

static const char magic[8] = "FLMROWS";
static char cache_dir[PATH_MAX - 64];
static uint8_t builder[BUILDER_ID_MAX];
static uint32_t builder_len;

/* Finds the build-id note of the loaded object that holds this code. */
static int find_builder(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t self = (uintptr_t)data;
    int mine = 0;
    for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t at = info->dlpi_addr + ph->p_vaddr;
        mine = ph->p_type == PT_LOAD && self >= at && self - at < ph->p_memsz;
    }
    for (int i = 0; mine && i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint8_t id[FLAMME_ELF_BUILD_ID_MAX];
        size_t n = ph->p_type != PT_NOTE ? 0
                   : flamme_elf_notes_build_id(
                         (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz, id);
        if (n >= 8 && n <= BUILDER_ID_MAX) {
            memcpy(builder, id, n);
            builder_len = (uint32_t)n;
            return 1;
        }
    }
    return mine;
}

void flamme_cfi_cache_configure(const char *dir)
{
    if (dir && builder_len && strcmp(dir, cache_dir) == 0)
        return; /* unchanged (a start after a stop): no window where it is off */
    cache_dir[0] = '\0';
    builder_len = 0;
    if (!dir || !dir[0] || strlen(dir) >= sizeof cache_dir)
        return;
    /* Without a build-id (a build linked without one) no table could be
     * told from another build's: no cache. */
    dl_iterate_phdr(find_builder, (void *)(uintptr_t)&flamme_cfi_cache_configure);
    if (builder_len)
        snprintf(cache_dir, sizeof cache_dir, "%s", dir);
}

static void make_hdr(const struct flamme_cfi_key *k, struct hdr *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, magic, sizeof h->magic);
    memcpy(h->builder, builder, builder_len);
    h->builder_len = builder_len;
    h->dev = (uint64_t)k->st->st_dev;
    h->ino = (uint64_t)k->st->st_ino;
    h->size = (uint64_t)k->st->st_size;
    h->mtime_s = k->st->st_mtim.tv_sec;
    h->mtime_ns = k->st->st_mtim.tv_nsec;
    h->ctime_s = k->st->st_ctim.tv_sec;
    h->ctime_ns = k->st->st_ctim.tv_nsec;
    h->link_lo = k->link_lo;
    h->len = k->len;
    h->switch_only = (uint32_t)k->switch_only;
    h->rule_size = sizeof(struct rule);
}

/* The table's path for header h (its n ignored). */
static void table_path(const struct hdr *h, char *out, size_t cap)
{
    uint64_t x = 1469598103934665603ull; /* FNV-1a over the key */
    const uint8_t *p = (const uint8_t *)h;
    for (size_t i = 0; i < offsetof(struct hdr, n); i++)
        x = (x ^ p[i]) * 1099511628211ull;
    snprintf(out, cap, "%s/%016llx" SUFFIX, cache_dir, (unsigned long long)x);
}

/* Writes exactly len bytes at offset at (pwrite), retrying short writes
 * and EINTR; reads go through flamme_pread_full (writer/elf.h). Returns
 * 0, or -1. */
static int pwrite_full(int fd, const void *buf, size_t len, off_t at)
{
    for (size_t done = 0; done < len;) {
        ssize_t r = pwrite(fd, (const char *)buf + done, len - done, at + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* 1 if the rows are what the builder makes: offsets strictly increasing
 * inside the range, rule ids naming a rule, known rule kinds, no stray
 * bytes. The handler indexes rules by rid unchecked. */
static int rows_ok(const uint32_t *off, const uint16_t *rid, uint64_t n, uint64_t len,
                   const struct rule *rule, uint64_t nrules)
{
    for (uint64_t i = 0; i < n; i++)
        if (off[i] >= len || (i && off[i] <= off[i - 1]) || rid[i] >= nrules)
            return 0;
    for (uint64_t i = 0; i < nrules; i++) {
        uint8_t reg = rule[i].reg;
        if (rule[i].pad != 0 ||
            (reg != RULE_REG && reg != RULE_DEREF && reg != RULE_UNKNOWN && reg != RULE_GAP))
            return 0;
    }
    return 1;
}

/* Opens the table named by want (its n ignored) if it is a regular file of
 * ours whose header matches want's key, with a payload of per_n bytes per
 * unit of its n (n between 1 and max_n) and per_rule bytes per rule (nrules
 * between 1 and FLAMME_CFI_MAX_RULES; 0 rules when per_rule is 0) and
 * nothing else. Returns the fd (*fid set, *got its header), or -1. */
static int open_table(const struct hdr *want, uint64_t per_n, uint64_t max_n, uint64_t per_rule,
                      struct hdr *got, struct flamme_fd_id *fid)
{
    if (!cache_dir[0])
        return -1;
    char path[PATH_MAX];
    table_path(want, path, sizeof path);
    int fd = flamme_open_high(path, O_RDONLY | O_NOFOLLOW, fid);
    if (fd < 0)
        return -1;
    struct stat fst;
    if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode) || fst.st_uid != geteuid() ||
        flamme_pread_full(fd, got, sizeof *got, 0) != 0 ||
        memcmp(got, want, offsetof(struct hdr, n)) != 0 || got->n == 0 || got->n > max_n ||
        (per_rule ? got->nrules == 0 || got->nrules > FLAMME_CFI_MAX_RULES : got->nrules != 0) ||
        (uint64_t)fst.st_size != sizeof *got + got->n * per_n + got->nrules * per_rule) {
        flamme_close_checked(fd, fid);
        return -1;
    }
    return fd;
}

struct cfi_mod *flamme_cfi_cache_load(const struct flamme_cfi_key *k, uint64_t lo, const char *name)
{
    struct hdr want, got;
    make_hdr(k, &want);
    struct flamme_fd_id fid;
    int fd = open_table(&want, sizeof(uint32_t) + sizeof(uint16_t), k->len, sizeof(struct rule),
                        &got, &fid);
    if (fd < 0)
        return NULL;
    uint32_t *off = flamme_bulk_alloc(got.n * sizeof *off);
    uint16_t *rid = flamme_bulk_alloc(got.n * sizeof *rid);
    struct rule *rule = flamme_bulk_alloc(got.nrules * sizeof *rule);
    struct cfi_mod *m = calloc(1, sizeof *m);
    off_t at_rid = (off_t)(sizeof got + got.n * sizeof *off);
    off_t at_rule = at_rid + (off_t)(got.n * sizeof *rid);
    if (!off || !rid || !rule || !m || !(m->name = strdup(name)) ||
        flamme_pread_full(fd, off, got.n * sizeof *off, sizeof got) != 0 ||
        flamme_pread_full(fd, rid, got.n * sizeof *rid, at_rid) != 0 ||
        flamme_pread_full(fd, rule, got.nrules * sizeof *rule, at_rule) != 0 ||
        !rows_ok(off, rid, got.n, k->len, rule, got.nrules)) {
        if (m)
            free(m->name);
        free(m);
        flamme_bulk_free(off);
        flamme_bulk_free(rid);
        flamme_bulk_free(rule);
        flamme_close_checked(fd, &fid);
        return NULL;
    }
    m->lo = lo;
    m->hi = lo + k->len;
    m->n = got.n;
    m->off = off;
    m->rid = rid;
    m->rules = rule;
    m->nrules = got.nrules;
    m->dev = (uint64_t)k->st->st_dev;
    m->ino = (uint64_t)k->st->st_ino;
    m->switch_only = k->switch_only;
    futimens(fd, NULL); /* recently used: the last a full cache drops */
    flamme_close_checked(fd, &fid);
    return m;
}

/* Makes directory p (0700) if it is missing, only inside a directory of
 * ours (or a sticky one such as /tmp): a program run by root with another
 * user's HOME (sudo) must not leave root's directories there, which that
 * user could not write into.
 * Returns 0 when p exists or was made, else -1. */
static int make_own(char *p)
{
    struct stat st;
    if (lstat(p, &st) == 0)
        return 0;
    char *slash = strrchr(p, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    /* Ours, or open to all as /tmp is (sticky: nobody else can take it away). */
    int ours = lstat(slash == p ? "/" : p, &st) == 0 && S_ISDIR(st.st_mode) &&
               (st.st_uid == geteuid() || (st.st_mode & S_ISVTX));
    *slash = '/';
    return ours && (mkdir(p, 0700) == 0 || errno == EEXIST) ? 0 : -1;
}

/* Creates the directory and its missing parents (make_own), and checks
 * that it is ours and not writable by others. Returns 0, or -1. */
static int ensure_dir(void)
{
    char p[sizeof cache_dir];
    snprintf(p, sizeof p, "%s", cache_dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        int rc = make_own(p);
        *s = '/';
        if (rc != 0)
            return -1;
    }
    struct stat st;
    if (make_own(p) != 0 || lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)))
        return -1;
    return 0;
}

struct aged {
    struct timespec at;
    uint64_t size;
    char name[32];
};

static int aged_cmp(const void *a, const void *b)
{
    const struct aged *x = a, *y = b;
    if (x->at.tv_sec != y->at.tv_sec)
        return x->at.tv_sec < y->at.tv_sec ? -1 : 1;
    return (x->at.tv_nsec > y->at.tv_nsec) - (x->at.tv_nsec < y->at.tv_nsec);
}

/* Drops the least recently used tables when there are more than
 * FLAMME_CFI_CACHE_MAX_FILES or FLAMME_CFI_CACHE_MAX_BYTES of them, down to
 * three quarters of each. Only names this module makes are touched. */
static void evict(void)
{
    int dfd = flamme_open_high(cache_dir, O_RDONLY | O_DIRECTORY, NULL);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    struct aged *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len != 16 + sizeof SUFFIX - 1 || strcmp(e->d_name + 16, SUFFIX) != 0 ||
            strspn(e->d_name, "0123456789abcdef") != 16)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 128;
            struct aged *nv = realloc(v, nc * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap = nc;
        }
        v[n].at = st.st_mtim;
        v[n].size = (uint64_t)st.st_size;
        total += v[n].size;
        /* len is 16 + the suffix (checked above), which the name fits. */
        _Static_assert(16 + sizeof SUFFIX <= sizeof v[0].name, "a cache file's name fits");
        memcpy(v[n].name, e->d_name, len + 1);
        n++;
    }
    if (n > FLAMME_CFI_CACHE_MAX_FILES || total > FLAMME_CFI_CACHE_MAX_BYTES) {
        qsort(v, n, sizeof *v, aged_cmp);
        for (size_t i = 0; i < n && (n - i > FLAMME_CFI_CACHE_MAX_FILES * 3 / 4 ||
                                     total > FLAMME_CFI_CACHE_MAX_BYTES / 4 * 3);
             i++) {
            unlinkat(dirfd(d), v[i].name, 0);
            total -= v[i].size;
        }
    }
    free(v);
    closedir(d);
}

struct piece {
    const void *p;
    size_t len;
};

/* Writes header h and the payload's np pieces (some may be empty) as h's
 * table, then keeps the directory's size. Best effort. */
static void write_table(const struct hdr *h, const struct piece *v, int np)
{
    if (ensure_dir() != 0)
        return;
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    table_path(h, path, sizeof path);
    int fd = flamme_out_open(path, tmp, sizeof tmp);
    if (fd < 0)
        return;
    struct flamme_fd_id fid;
    fd = flamme_fd_high_path(fd, tmp, O_WRONLY, &fid);
    if (fd < 0) {
        flamme_out_abort(tmp);
        return;
    }
    struct hdr copy = *h;
    int ok = pwrite_full(fd, &copy, sizeof copy, 0) == 0;
    off_t at = sizeof copy;
    for (int i = 0; ok && i < np; at += (off_t)v[i].len, i++)
        ok = pwrite_full(fd, v[i].p, v[i].len, at) == 0;
    flamme_close_checked(fd, &fid);
    if (!ok) {
        flamme_out_abort(tmp);
        return;
    }
    if (flamme_out_commit(tmp, path) == 0)
        evict();
}

void flamme_cfi_cache_store(const struct flamme_cfi_key *k, const struct cfi_mod *m)
{
    if (!cache_dir[0] || m->n < FLAMME_CFI_CACHE_MIN_ROWS)
        return;
    struct hdr h;
    make_hdr(k, &h);
    h.n = m->n;
    h.nrules = m->nrules;
    const struct piece v[] = { { m->off, m->n * sizeof *m->off },
                               { m->rid, m->n * sizeof *m->rid },
                               { m->rules, m->nrules * sizeof *m->rules } };
    write_table(&h, v, 3);
}

/* A blob's header: the file's, with kind as its magic and no range. */
static void blob_hdr(const char *kind, const struct stat *st, struct hdr *h)
{
    struct flamme_cfi_key k = { st, 0, 0, 0 };
    make_hdr(&k, h);
    memset(h->magic, 0, sizeof h->magic);
    memcpy(h->magic, kind, strnlen(kind, sizeof h->magic - 1));
    h->rule_size = 0;
}

void *flamme_kept_load(const char *kind, const struct stat *st, size_t *len)
{
    struct hdr want, got;
    blob_hdr(kind, st, &want);
    struct flamme_fd_id fid;
    int fd = open_table(&want, 1, FLAMME_KEPT_MAX_BLOB, 0, &got, &fid);
    if (fd < 0)
        return NULL;
    void *data = flamme_bulk_alloc(got.n);
    if (data && flamme_pread_full(fd, data, got.n, sizeof got) == 0) {
        *len = got.n;
        futimens(fd, NULL);
    } else {
        flamme_bulk_free(data);
        data = NULL;
    }
    flamme_close_checked(fd, &fid);
    return data;
}

int flamme_kept_on(void)
{
    return cache_dir[0] != '\0';
}

void flamme_kept_store(const char *kind, const struct stat *st, const void *a, size_t alen,
                       const void *b, size_t blen)
{
    if (!cache_dir[0] || alen + blen == 0 || alen + blen > FLAMME_KEPT_MAX_BLOB)
        return;
    struct hdr h;
    blob_hdr(kind, st, &h);
    h.n = alen + blen;
    const struct piece v[] = { { a, alen }, { b, blen } };
    write_table(&h, v, 2);
}
