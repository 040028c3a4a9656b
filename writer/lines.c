/*
 * writer/lines.c — source positions from an ELF file's DWARF .debug_line.
 *
 * Owns: the line table of one file. Opening it finds where each unit's
 * code lies: from .debug_aranges (the address ranges of each compilation
 * unit, whose first entry in .debug_info names its line program), and for
 * a unit no range names, by running its
 * line-number program (DWARF 2 to 5) once without keeping rows. The first
 * lookup in a unit runs that unit's program into rows (address, file,
 * line) sorted by address, where an end_sequence row marks a gap; a lookup
 * is two binary searches. A profile hits few of a large program's units:
 * for the OCaml compiler (1.3 MB of line programs) opening took 10-17 ms of
 * the writer's CPU when every unit was run into rows, 5.5 ms when each
 * was run once for its ranges, 1.3-1.4 ms with .debug_aranges.
 * .debug_line is copied whole when it is opened (up to 16 MB, into a
 * common/bulk.h block: one fault where huge pages can be had), since
 * opening reads every unit's length anyway and the units a profile runs
 * later lie all over it; a larger one is read a window at a time when its
 * units are run. .debug_str is copied the first time a unit names a string
 * in it (the OCaml compiler's never do). The file stays open for those
 * reads (a high descriptor, checked before each read and opened again,
 * the same file, if the program closed it). A large file's index is kept
 * between processes (load_kept, store_kept; writer/cfi_cache.h), and so
 * are the rows of the units its profiles ran (load_kept_rows,
 * flamme_lines_keep, "kept rows" below).
 * Called by: the agent's writer thread (and tests). It allocates and reads
 * the file through writer/elf.c and pread (never kept mapped); never from
 * a signal handler.
 *
 * The input is untrusted: every read is bounds-checked, a malformed unit is
 * dropped whole (the units before and after it are kept when its length is
 * sane), and nothing here aborts.
 */
#include "writer/lines.h"
#include "common/bulk.h"
#include "common/fds.h"
#include "writer/cfi_cache.h"
#include "writer/elf.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/index_table.h"
#include "common/runsort.h"

#define LINES_MAX_SECTION (1ull << 30) /* a larger debug section is not believed */
#define END_FILE UINT32_MAX            /* file index of an end_sequence row */

/* DWARF constants used here (DWARF 5 standard, sections 6.2 and 7.5). */
enum {
    DW_LNS_copy = 1, DW_LNS_advance_pc = 2, DW_LNS_advance_line = 3, DW_LNS_set_file = 4,
    DW_LNS_const_add_pc = 8, DW_LNS_fixed_advance_pc = 9,
    DW_LNE_end_sequence = 1, DW_LNE_set_address = 2, DW_LNE_define_file = 3,
    DW_LNCT_path = 1, DW_LNCT_directory_index = 2,
    DW_FORM_data2 = 0x05, DW_FORM_data4 = 0x06, DW_FORM_data8 = 0x07, DW_FORM_string = 0x08,
    DW_FORM_block = 0x09, DW_FORM_data1 = 0x0b, DW_FORM_strp = 0x0e, DW_FORM_udata = 0x0f,
    DW_FORM_data16 = 0x1e, DW_FORM_line_strp = 0x1f, DW_FORM_indirect = 0x16,
    DW_FORM_sec_offset = 0x17, DW_FORM_implicit_const = 0x21,
    DW_AT_stmt_list = 0x10, DW_UT_compile = 1, DW_UT_partial = 3, DW_UT_skeleton = 4,
};

/* The first entry of a compilation unit read from .debug_info to find its
 * line program: a unit entry whose DW_AT_stmt_list lies further in is
 * indexed by running its program instead. */
#define CU_HEAD_MAX 512

struct row {
    uint64_t addr;
    uint32_t file; /* index into files, END_FILE for a gap */
    uint32_t line;
};

struct sect {
    uint8_t *data;
    uint64_t size;
};

/* A line-number sequence: rows for [lo, hi) are in unit `unit`. */
struct seq {
    uint64_t lo, hi;
    uint32_t unit;
};

struct lunit {
    uint64_t off, len; /* the unit after its length field, in .debug_line */
    int offset_size;
    int state; /* 0: not run yet, 1: rows, -1: malformed or out of memory */
    struct row *rows;
    size_t nrows;
    /* Its rows as an earlier process kept them (kept_len bytes at kept_at
     * of l->kept_code, kept_rows rows; kept_len 0: none): see "kept rows". */
    uint64_t kept_at, kept_len, kept_rows;
};

/* Where a section lies in the file. */
struct fsect {
    uint64_t at, size;
};

#define WINDOW_MIN (64u << 10) /* bytes of .debug_line read at once */
/* A .debug_line up to this size is read whole, once, when the table is
 * opened, and kept: the units a profile runs later are scattered over it,
 * and a window read for each re-read the OCaml compiler's 1.3 MB about
 * four times over in a 0.2 s compile at 999 Hz. */
uint64_t flamme_lines_whole_max = 16u << 20;

struct flamme_lines {
    char *path;
    int fd;                   /* -1 when not open */
    struct flamme_fd_id fid;  /* fd's identity when opened */
    struct flamme_fd_id file; /* the file's, at flamme_lines_open */
    struct fsect line;        /* read a window at a time (line_bytes) */
    uint8_t *win;             /* .debug_line bytes [win_at, win_at + win_len) */
    uint64_t win_at, win_len, win_cap;
    struct sect line_str;     /* a copy (small) */
    struct fsect str_at;
    struct sect str;          /* a copy, made the first time a unit needs it */
    int str_tried;
    struct lunit *units;
    size_t nunits;
    struct seq *seqs; /* by lo, then unit */
    uint64_t *maxhi;  /* maxhi[i] = largest hi of seqs[0..i] */
    size_t nseqs;
    char **files; /* every unit run so far shares one file table */
    size_t nfiles, cap_files;
    struct flamme_itab file_ids; /* file name -> index into files */
    uint64_t run_ns; /* CPU time spent making units' rows (run_rows) */
    /* Rows kept between processes ("kept rows"): keep_rows when the file's
     * index is kept too (kst its identity), the encoded rows read back
     * (kept_blob, kept_code within it), and how many units were run from
     * .debug_line since they were last kept. */
    int keep_rows;
    struct stat kst;
    uint8_t *kept_blob;
    const uint8_t *kept_code;
    size_t kept_nfiles; /* files[0, kept_nfiles) are the kept rows' */
    size_t runs_unkept; /* units run into rows since last kept */
    size_t runs;        /* units run from .debug_line, ever */
};

/* Rows while building: order keeps program order among equal addresses. */
struct brow {
    uint64_t addr;
    uint32_t file, line;
    uint64_t order;
};

/* What running a unit produces: its rows (files go to l's table), or when
 * scanning only its sequences (numbered by unit). */
struct builder {
    flamme_lines *l;
    int scan;
    uint32_t unit;
    struct brow *rows;
    size_t nrows, cap;
    struct seq *seqs;
    size_t nseqs, cap_seqs;
    int oom;
};

/* ------------------------------------------------------------ reading */

struct cur {
    const uint8_t *p, *end;
    int bad; /* set by any read past end; later reads return 0 */
};

static int need(struct cur *c, uint64_t n)
{
    if (c->bad || (uint64_t)(c->end - c->p) < n) {
        c->bad = 1;
        return 0;
    }
    return 1;
}

static uint64_t rd_le(struct cur *c, unsigned n)
{
    if (!need(c, n))
        return 0;
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)c->p[i] << (8 * i);
    c->p += n;
    return v;
}

static uint64_t rd_uleb(struct cur *c)
{
    uint64_t v = 0;
    unsigned shift = 0;
    for (;;) {
        if (!need(c, 1))
            return 0;
        uint8_t b = *c->p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80))
            return v;
    }
}

static int64_t rd_sleb(struct cur *c)
{
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        if (!need(c, 1))
            return 0;
        b = *c->p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40))
        v |= ~0ull << shift;
    return (int64_t)v;
}

/* A unit's or set's initial length (DWARF 7.4): returns the offset size
 * it implies (4 or 8) and sets *len, or 0 for a reserved length, after
 * which nothing can be found. */
static int rd_initial_length(struct cur *c, uint64_t *len)
{
    *len = rd_le(c, 4);
    if (*len == 0xffffffffu) {
        *len = rd_le(c, 8);
        return 8;
    }
    return *len >= 0xfffffff0u ? 0 : 4;
}

/* A NUL-terminated string in place; NULL (and c->bad) if unterminated. */
static const char *rd_cstr(struct cur *c)
{
    if (c->bad)
        return NULL;
    const uint8_t *z = memchr(c->p, 0, (size_t)(c->end - c->p));
    if (!z) {
        c->bad = 1;
        return NULL;
    }
    const char *s = (const char *)c->p;
    c->p = z + 1;
    return s;
}

static void skip(struct cur *c, uint64_t n)
{
    if (need(c, n))
        c->p += n;
}

/* String at offset off of a string section; NULL when out of range or
 * unterminated. */
static const char *sect_str(const struct sect *s, uint64_t off)
{
    if (!s->data || off >= s->size)
        return NULL;
    const char *p = (const char *)s->data + off;
    return memchr(p, 0, (size_t)(s->size - off)) ? p : NULL;
}

/* ------------------------------------------------------------ the file's bytes */

/* Reads n bytes at offset at of l's file. The descriptor is checked to be
 * still ours first: a program that closed it (and maybe reused the number)
 * keeps its number, and the file is opened again if it is still the one
 * flamme_lines_open read. Returns 0, or -1. */
static int file_read(flamme_lines *l, uint64_t at, void *buf, size_t n)
{
    if (l->fd >= 0 && !flamme_fd_same_sigsafe(l->fd, &l->fid))
        l->fd = -1; /* not ours any more: never read or closed */
    if (l->fd < 0) {
        struct flamme_fd_id id;
        int fd = flamme_open_high(l->path, O_RDONLY, &id);
        if (fd < 0)
            return -1;
        if (id.dev != l->file.dev || id.ino != l->file.ino) {
            flamme_close_checked(fd, &id); /* another file by that name now */
            return -1;
        }
        l->fd = fd;
        l->fid = id;
    }
    return flamme_pread_full(l->fd, buf, n, at);
}

/* The n bytes at offset at of .debug_line, read into the window (the
 * whole section up to flamme_lines_whole_max unless rows were kept, else at
 * least WINDOW_MIN bytes from at, or n) unless it holds them already; valid
 * until the next call. Returns them, or NULL (out of the section, no
 * memory, unreadable). */
static const uint8_t *line_bytes(flamme_lines *l, uint64_t at, uint64_t n)
{
    if (at > l->line.size || n > l->line.size - at)
        return NULL;
    if (l->win && at >= l->win_at && at + n <= l->win_at + l->win_len)
        return l->win + (at - l->win_at);
    uint64_t from = at, want = n > WINDOW_MIN ? n : WINDOW_MIN;
    /* With rows kept (kept_code), the few units still run are read alone:
     * the whole copy of the OCaml compiler's cost 0.2-0.5 ms. */
    if (l->line.size <= flamme_lines_whole_max && !l->kept_code) {
        from = 0;
        want = l->line.size;
    } else if (want > l->line.size - at) {
        want = l->line.size - at;
    }
    if (want > l->win_cap) {
        flamme_bulk_free(l->win); /* nothing in it is needed: it is read again whole */
        l->win = flamme_bulk_alloc(want ? want : 1);
        l->win_cap = l->win ? want : 0;
        l->win_len = 0;
        if (!l->win)
            return NULL;
    }
    if (file_read(l, l->line.at + from, l->win, (size_t)want) != 0) {
        l->win_len = 0;
        return NULL;
    }
    l->win_at = from;
    l->win_len = want;
    return l->win + (at - from);
}

/* Copies section fs of l's file into s, a common/bulk.h block (left empty
 * when fs is, or unreadable). */
static void copy_fsect(flamme_lines *l, const struct fsect *fs, struct sect *s)
{
    s->data = fs->size && fs->size <= LINES_MAX_SECTION ? flamme_bulk_alloc(fs->size) : NULL;
    s->size = 0;
    if (s->data && file_read(l, fs->at, s->data, (size_t)fs->size) == 0) {
        s->size = fs->size;
    } else {
        flamme_bulk_free(s->data);
        s->data = NULL;
    }
}

/* .debug_str, copied the first time a unit names a string in it. */
static const struct sect *debug_str(flamme_lines *l)
{
    if (!l->str_tried) {
        l->str_tried = 1;
        copy_fsect(l, &l->str_at, &l->str);
    }
    return &l->str;
}

/* ------------------------------------------------------------ building */

/* v (cap elements of size bytes, a common/bulk.h block) doubled, or first
 * elements when empty: in place while v is the last block carved.
 * Returns the new block and sets *cap, or NULL (b->oom) when out of memory. */
static __attribute__((noinline)) void *grow(struct builder *b, void *v, size_t *cap,
                                            size_t first, size_t size)
{
    size_t nc = *cap ? *cap * 2 : first;
    void *n = flamme_bulk_realloc(v, nc * size);
    if (!n)
        b->oom = 1;
    else
        *cap = nc;
    return n;
}

static int push_seq(struct builder *b, uint64_t lo, uint64_t hi)
{
    if (b->nseqs == b->cap_seqs) {
        struct seq *n = grow(b, b->seqs, &b->cap_seqs, 1024, sizeof *n);
        if (!n)
            return -1;
        b->seqs = n;
    }
    b->seqs[b->nseqs++] = (struct seq){ lo, hi, b->unit };
    return 0;
}

/* Appends a row; inlined into the line program's loop, which pushes one
 * for nearly every opcode (the growth is apart). */
static inline int push_row(struct builder *b, uint64_t addr, uint32_t file, uint32_t line)
{
    if (b->nrows == b->cap) {
        struct brow *n = grow(b, b->rows, &b->cap, 4096, sizeof *n);
        if (!n)
            return -1;
        b->rows = n;
    }
    b->rows[b->nrows] = (struct brow){ addr, file, line, b->nrows };
    b->nrows++;
    return 0;
}

/* The file table is over names from the program's own debug information:
 * the deterministic hash (common/hash.h). */
static uint64_t file_hash(const void *ctx, uint32_t i)
{
    const flamme_lines *l = ctx;
    return flamme_hash_bytes(l->files[i], strlen(l->files[i]), 0);
}

static int file_eq(const void *ctx, uint32_t i, const void *s, size_t len)
{
    const flamme_lines *l = ctx;
    return strcmp(l->files[i], s) == 0;
}

/* Index of the file named s (a malloc'd string, l's from now on) in the
 * table (added once); UINT32_MAX when out of memory. */
static uint32_t file_index(flamme_lines *l, char *s)
{
    if (flamme_itab_reserve(&l->file_ids, l->nfiles, 256, file_hash, l) < 0) {
        free(s);
        return UINT32_MAX;
    }
    size_t len = strlen(s);
    uint32_t *slot =
        flamme_itab_probe(&l->file_ids, flamme_hash_bytes(s, len, 0), file_eq, l, s, len);
    if (*slot) {
        free(s);
        return *slot - 1;
    }
    if (l->nfiles == l->cap_files) {
        size_t nc = l->cap_files ? l->cap_files * 2 : 64;
        char **n = realloc(l->files, nc * sizeof *n);
        if (!n) {
            free(s);
            return UINT32_MAX;
        }
        l->files = n;
        l->cap_files = nc;
    }
    l->files[l->nfiles] = s;
    *slot = (uint32_t)l->nfiles + 1;
    return (uint32_t)l->nfiles++;
}

/* Index of the file "dir/name" in the table (added once); UINT32_MAX when
 * out of memory. */
static uint32_t intern(struct builder *b, const char *dir, const char *name)
{
    size_t dl = dir ? strlen(dir) : 0, nl = strlen(name);
    char *s = malloc(dl + 1 + nl + 1);
    uint32_t i = UINT32_MAX;
    if (s) {
        if (dl) {
            memcpy(s, dir, dl);
            s[dl] = '/';
            memcpy(s + dl + 1, name, nl + 1);
        } else {
            memcpy(s, name, nl + 1);
        }
        i = file_index(b->l, s);
    }
    if (i == UINT32_MAX)
        b->oom = 1;
    return i;
}

/* ------------------------------------------------------------ one unit */

/* The files of one unit, as table indexes, by the unit's own file number. */
struct unit {
    int version, offset_size;
    const char **dirs;
    size_t ndirs, cap_dirs;
    uint32_t *files; /* table index per file number, END_FILE if unusable */
    size_t nfiles, cap_files;
};

static int unit_push_dir(struct unit *u, const char *d)
{
    if (u->ndirs == u->cap_dirs) {
        size_t nc = u->cap_dirs ? u->cap_dirs * 2 : 16;
        const char **n = realloc(u->dirs, nc * sizeof *n);
        if (!n)
            return -1;
        u->dirs = n;
        u->cap_dirs = nc;
    }
    u->dirs[u->ndirs++] = d;
    return 0;
}

/* Adds file (name, directory number) to the unit: the name is shown as the
 * compiler wrote it, prefixed with its directory unless that is the
 * compilation directory itself (dirs[0]); a directory under the
 * compilation directory is shown relative to it. */
static int unit_push_file(struct builder *b, struct unit *u, const char *name, uint64_t dir)
{
    uint32_t idx = END_FILE;
    if (name && *name) {
        const char *d = NULL;
        if (name[0] != '/' && dir > 0 && dir < u->ndirs && u->dirs[dir] && *u->dirs[dir]) {
            d = u->dirs[dir];
            const char *comp = u->ndirs ? u->dirs[0] : NULL;
            size_t cl = comp ? strlen(comp) : 0;
            if (cl && d[0] == '/' && strncmp(d, comp, cl) == 0 && (d[cl] == '/' || !d[cl]))
                d = d[cl] ? d + cl + 1 : NULL;
        }
        idx = intern(b, d, name);
        if (idx == UINT32_MAX)
            return -1;
    }
    if (u->nfiles == u->cap_files) {
        size_t nc = u->cap_files ? u->cap_files * 2 : 16;
        uint32_t *n = realloc(u->files, nc * sizeof *n);
        if (!n) {
            b->oom = 1;
            return -1;
        }
        u->files = n;
        u->cap_files = nc;
    }
    u->files[u->nfiles++] = idx;
    return 0;
}

/* One attribute value of a DWARF 5 entry. Strings come back in *str (NULL
 * for other forms), numbers in *num. Returns -1 for an unknown form. */
static int rd_form(struct cur *c, uint64_t form, const struct unit *u, flamme_lines *l,
                   const char **sval, uint64_t *num)
{
    *sval = NULL;
    *num = 0;
    switch (form) {
    case DW_FORM_string: *sval = rd_cstr(c); return c->bad ? -1 : 0;
    case DW_FORM_line_strp: *sval = sect_str(&l->line_str, rd_le(c, (unsigned)u->offset_size)); return 0;
    case DW_FORM_strp: *sval = sect_str(debug_str(l), rd_le(c, (unsigned)u->offset_size)); return 0;
    case DW_FORM_udata: *num = rd_uleb(c); return 0;
    case DW_FORM_data1: *num = rd_le(c, 1); return 0;
    case DW_FORM_data2: *num = rd_le(c, 2); return 0;
    case DW_FORM_data4: *num = rd_le(c, 4); return 0;
    case DW_FORM_data8: *num = rd_le(c, 8); return 0;
    case DW_FORM_data16: skip(c, 16); return 0;
    case DW_FORM_block: skip(c, rd_uleb(c)); return 0;
    default: return -1;
    }
}

#define DW5_MAX_FORMATS 16

/* DWARF 5 directory or file entry list. is_files selects what is stored.
 * Returns 0, or -1 when malformed. */
static int rd_entries_v5(struct cur *c, struct builder *b, struct unit *u, int is_files)
{
    unsigned nfmt = (unsigned)rd_le(c, 1);
    uint64_t fmt[DW5_MAX_FORMATS][2];
    if (nfmt > DW5_MAX_FORMATS)
        return -1;
    for (unsigned i = 0; i < nfmt; i++) {
        fmt[i][0] = rd_uleb(c);
        fmt[i][1] = rd_uleb(c);
    }
    uint64_t count = rd_uleb(c);
    if (c->bad || count > (uint64_t)(c->end - c->p)) /* each entry takes a byte at least */
        return -1;
    for (uint64_t e = 0; e < count; e++) {
        const char *path = NULL;
        uint64_t dir = 0;
        for (unsigned i = 0; i < nfmt; i++) {
            const char *sv;
            uint64_t nv;
            if (rd_form(c, fmt[i][1], u, b->l, &sv, &nv) < 0 || c->bad)
                return -1;
            if (fmt[i][0] == DW_LNCT_path)
                path = sv;
            else if (fmt[i][0] == DW_LNCT_directory_index)
                dir = nv;
        }
        if (is_files ? unit_push_file(b, u, path, dir) < 0 : unit_push_dir(u, path) < 0)
            return -1;
    }
    return 0;
}

/* Reads the directory and file tables of a unit's header into u (its
 * files interned in b->l's table). Returns 0, or -1 if malformed or out of
 * memory. */
static int rd_file_table(struct cur *c, struct builder *b, struct unit *u)
{
    if (u->version >= 5) {
        if (rd_entries_v5(c, b, u, 0) < 0 || rd_entries_v5(c, b, u, 1) < 0)
            return -1;
    } else {
        /* Directory 0 is the compilation directory, which v2-4 do not list;
         * file numbers start at 1. */
        if (unit_push_dir(u, NULL) < 0 || unit_push_file(b, u, NULL, 0) < 0)
            return -1;
        for (;;) {
            const char *d = rd_cstr(c);
            if (!d)
                return -1;
            if (!*d)
                break;
            if (unit_push_dir(u, d) < 0)
                return -1;
        }
        for (;;) {
            const char *f = rd_cstr(c);
            if (!f)
                return -1;
            if (!*f)
                break;
            uint64_t dir = rd_uleb(c);
            rd_uleb(c); /* mtime */
            rd_uleb(c); /* length */
            if (c->bad || unit_push_file(b, u, f, dir) < 0)
                return -1;
        }
    }
    return 0;
}

/* Runs the line-number program of one unit: c holds the unit after its
 * length field, offset_size is 4 or 8 (32- or 64-bit DWARF). Appends its
 * rows to b, or (b->scan) only its sequences, without reading its file
 * table. Returns 0, or -1 if the unit is malformed (the caller then
 * discards what it appended). */
static int run_unit(struct cur *c, int offset_size, struct builder *b)
{
    struct unit u = { .offset_size = offset_size };
    int ret = -1;
    u.version = (int)rd_le(c, 2);
    if (c->bad || u.version < 2 || u.version > 5)
        goto out;
    unsigned addr_size = 8;
    if (u.version >= 5) {
        addr_size = (unsigned)rd_le(c, 1);
        rd_le(c, 1); /* segment selector size */
    }
    uint64_t hlen = rd_le(c, (unsigned)offset_size);
    if (!need(c, hlen))
        goto out;
    struct cur prog = { c->p + hlen, c->end, 0 };
    c->end = c->p + hlen; /* the header */
    unsigned min_inst = (unsigned)rd_le(c, 1);
    if (u.version >= 4)
        rd_le(c, 1); /* maximum_operations_per_instruction: VLIW only */
    rd_le(c, 1);     /* default_is_stmt */
    int line_base = (int8_t)rd_le(c, 1);
    unsigned line_range = (unsigned)rd_le(c, 1);
    unsigned opcode_base = (unsigned)rd_le(c, 1);
    const uint8_t *std_len = c->p;
    skip(c, opcode_base ? opcode_base - 1 : 0);
    if (c->bad || line_range == 0 || opcode_base == 0)
        goto out;
    if (!b->scan && rd_file_table(c, b, &u) < 0)
        goto out;
    if (c->bad || b->oom)
        goto out;

    /* What each special opcode adds to the address and the line, counted
     * out once per unit: a division and a remainder per opcode were a
     * tenth of running the OCaml compiler's 1.3 MB of line programs
     * (5.4-5.5 -> 4.8 ms). */
    uint32_t sp_addr[256];
    int32_t sp_line[256];
    for (unsigned op = opcode_base, q = 0, rem = 0; op < 256; op++) {
        sp_addr[op] = q * min_inst;
        sp_line[op] = line_base + (int)rem;
        if (++rem == line_range)
            rem = 0, q++;
    }

    /* The state machine; a row is appended at each copy, special opcode and
     * end_sequence. */
    uint64_t addr = 0, file = 1, line = 1;
    uint64_t seq_lo = UINT64_MAX; /* lowest row address of this sequence */
    *c = prog;
    while (c->p < c->end && !c->bad) {
        unsigned op = *c->p++;
        if (op >= opcode_base) {
            addr += sp_addr[op];
            line += (uint64_t)(int64_t)sp_line[op];
            goto emit;
        }
        switch (op) {
        case 0: { /* extended */
            uint64_t len = rd_uleb(c);
            if (!need(c, len) || len == 0)
                goto out;
            struct cur ext = { c->p, c->p + len, 0 };
            c->p += len;
            unsigned eop = (unsigned)rd_le(&ext, 1);
            if (eop == DW_LNE_end_sequence) {
                if (b->scan) {
                    if (seq_lo < addr && push_seq(b, seq_lo, addr) < 0)
                        goto out;
                } else if (push_row(b, addr, END_FILE, 0) < 0) {
                    goto out;
                }
                addr = 0, file = 1, line = 1;
                seq_lo = UINT64_MAX;
            } else if (eop == DW_LNE_set_address) {
                unsigned n = (unsigned)(len - 1);
                if (n == 0 || n > 8 || (u.version >= 5 && n != addr_size))
                    goto out;
                addr = rd_le(&ext, n);
            } else if (eop == DW_LNE_define_file && u.version <= 4 && !b->scan) {
                const char *f = rd_cstr(&ext);
                uint64_t dir = rd_uleb(&ext);
                if (ext.bad || unit_push_file(b, &u, f, dir) < 0)
                    goto out;
            } /* set_discriminator and vendor ones: skipped by their length */
            continue;
        }
        case DW_LNS_copy: goto emit;
        case DW_LNS_advance_pc: addr += rd_uleb(c) * min_inst; continue;
        case DW_LNS_advance_line: line += (uint64_t)rd_sleb(c); continue;
        case DW_LNS_set_file: file = rd_uleb(c); continue;
        case DW_LNS_const_add_pc: addr += (uint64_t)((255 - opcode_base) / line_range) * min_inst; continue;
        case DW_LNS_fixed_advance_pc: addr += rd_le(c, 2); continue;
        default: /* other standard opcodes: skip their ULEB operands */
            for (unsigned i = 0; i < std_len[op - 1]; i++)
                rd_uleb(c);
            continue;
        }
    emit:
        if (b->scan) {
            if (addr < seq_lo)
                seq_lo = addr;
        } else {
            uint32_t f = file < u.nfiles ? u.files[file] : END_FILE;
            /* Line 0 is "no source line"; such a row still ends the one before. */
            if (push_row(b, addr, f, line > UINT32_MAX ? 0 : (uint32_t)line) < 0)
                goto out;
        }
    }
    /* A sequence the program does not end (malformed) still covers the
     * address of its last row. */
    if (b->scan && !c->bad && seq_lo != UINT64_MAX && push_seq(b, seq_lo, addr + 1) < 0)
        goto out;
    ret = c->bad ? -1 : 0;
out:
    free(u.dirs);
    free(u.files);
    return ret;
}

/* ------------------------------------------------------------ the file */

/* .debug_info is read a window at a time: a pread per unit's first
 * entry (512 bytes each) was 356 system calls for the OCaml compiler,
 * about a millisecond of a short compile's writer on a VM where each
 * costs 2-6 us. */
#define INFO_WINDOW (64u << 10)

/* The sections a line table is read from: where .debug_line and
 * .debug_str lie and a copy of .debug_line_str are kept; .debug_aranges,
 * .debug_abbrev and where .debug_info lies (read a window at a time)
 * serve the index at open only. */
struct sources {
    struct sect aranges, abbrev;
    const Elf64_Shdr *info;
    uint8_t *win; /* .debug_info bytes [win_at, win_at + win_len) */
    uint64_t win_at, win_len;
};

/* Where a section of image e lies, if it can be read as it is (not
 * SHT_NOBITS, not compressed, inside the file, not implausibly large). */
static struct fsect find_fsect(const struct flamme_elf *e, const char *name)
{
    const Elf64_Shdr *sh = flamme_elf_section(e, name);
    if (!sh || sh->sh_type == SHT_NOBITS || (sh->sh_flags & SHF_COMPRESSED) ||
        sh->sh_size > LINES_MAX_SECTION || sh->sh_size > e->size ||
        sh->sh_offset > e->size - sh->sh_size)
        return (struct fsect){ 0, 0 };
    return (struct fsect){ sh->sh_offset, sh->sh_size };
}

/* Finds .debug_str and copies .debug_line_str of image e into l, and when
 * the index is to be built (index), copies what it is built from into
 * src. l->line is already found. Returns 0 when there is a .debug_line,
 * -1 otherwise. */
static int load_sections(const struct flamme_elf *e, flamme_lines *l, struct sources *src,
                         int index)
{
    /* .debug_line first: without it nothing else is worth copying. */
    if (!l->line.size)
        return -1;
    l->str_at = find_fsect(e, ".debug_str");
    static const char *const names[] = { ".debug_line_str", ".debug_aranges", ".debug_abbrev" };
    struct sect *dst[] = { &l->line_str, &src->aranges, &src->abbrev };
    for (size_t i = 0; i < (index ? sizeof names / sizeof names[0] : 1); i++) {
        struct fsect fs = find_fsect(e, names[i]);
        copy_fsect(l, &fs, dst[i]);
    }
    const Elf64_Shdr *info = flamme_elf_section(e, ".debug_info");
    src->info = info && info->sh_type != SHT_NOBITS && !(info->sh_flags & SHF_COMPRESSED) &&
                        info->sh_size <= e->size && info->sh_offset <= e->size - info->sh_size
                    ? info
                    : NULL;
    return 0;
}

/* ------------------------------------------------------------ the index */

/* Skips a value of attribute form `form` in a unit entry (DWARF 2 to 5 and
 * the GNU forms gcc and binutils emit). Returns 0, or -1 for a form it does
 * not know (the caller then gives up on the entry). */
static int skip_form(struct cur *c, uint64_t form, int offset_size, unsigned addr_size,
                     unsigned version)
{
    switch (form) {
    case 0x19: case 0x21: return 0;                       /* flag_present, implicit_const */
    case 0x0b: case 0x0c: case 0x11: case 0x25: case 0x29: skip(c, 1); return 0;
    case 0x05: case 0x12: case 0x26: case 0x2a: skip(c, 2); return 0;
    case 0x27: case 0x2b: skip(c, 3); return 0;           /* strx3, addrx3 */
    case 0x06: case 0x13: case 0x1c: case 0x28: case 0x2c: skip(c, 4); return 0;
    case 0x07: case 0x14: case 0x20: case 0x24: skip(c, 8); return 0;
    case 0x1e: skip(c, 16); return 0;                     /* data16 */
    case 0x01: skip(c, addr_size); return 0;              /* addr */
    case 0x10: skip(c, version <= 2 ? addr_size : (unsigned)offset_size); return 0; /* ref_addr */
    case 0x0e: case 0x17: case 0x1d: case 0x1f: case 0x1f20: case 0x1f21:
        skip(c, (unsigned)offset_size); return 0;         /* strp, sec_offset, line_strp, ... */
    case 0x0d: rd_sleb(c); return 0;                      /* sdata */
    case 0x0f: case 0x15: case 0x1a: case 0x1b: case 0x22: case 0x23: case 0x1f01: case 0x1f02:
        rd_uleb(c); return 0;                             /* udata, ref_udata, strx, addrx, ... */
    case 0x08: rd_cstr(c); return 0;                      /* string */
    case 0x0a: skip(c, rd_le(c, 1)); return 0;            /* block1 */
    case 0x03: skip(c, rd_le(c, 2)); return 0;            /* block2 */
    case 0x04: skip(c, rd_le(c, 4)); return 0;            /* block4 */
    case 0x09: case 0x18: skip(c, rd_uleb(c)); return 0;  /* block, exprloc */
    default: return -1;
    }
}

/* The index in l->units of the unit whose header starts at offset off of
 * .debug_line, or -1. */
static int64_t unit_at(const flamme_lines *l, uint64_t off)
{
    size_t lo = 0, hi = l->nunits;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct lunit *u = &l->units[mid];
        uint64_t at = u->off - (u->offset_size == 8 ? 12 : 4);
        if (at == off)
            return (int64_t)mid;
        if (at < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* The line unit that the compilation unit at offset cu of .debug_info
 * names (DW_AT_stmt_list of its first entry), or -1. */
static int64_t unit_of_cu(const flamme_lines *l, const struct flamme_elf *e,
                          struct sources *src, uint64_t cu)
{
    if (!src->info || !src->abbrev.data || cu >= src->info->sh_size)
        return -1;
    uint64_t size = src->info->sh_size, n = size - cu < CU_HEAD_MAX ? size - cu : CU_HEAD_MAX;
    if (!src->win && !(src->win = malloc(INFO_WINDOW)))
        return -1;
    if (cu < src->win_at || cu + n > src->win_at + src->win_len) {
        uint64_t w = size - cu < INFO_WINDOW ? size - cu : INFO_WINDOW;
        src->win_len = 0;
        if (flamme_elf_read(e, src->info->sh_offset + cu, src->win, w) != 0)
            return -1;
        src->win_at = cu;
        src->win_len = w;
    }
    const uint8_t *buf = src->win + (cu - src->win_at);
    struct cur c = { buf, buf + n, 0 };
    uint64_t len;
    int osz = rd_initial_length(&c, &len);
    if (!osz)
        return -1;
    if (len < (uint64_t)(c.end - c.p))
        c.end = c.p + len;
    unsigned version = (unsigned)rd_le(&c, 2), asz;
    uint64_t abbrev_off;
    if (version >= 5) {
        unsigned type = (unsigned)rd_le(&c, 1);
        asz = (unsigned)rd_le(&c, 1);
        abbrev_off = rd_le(&c, (unsigned)osz);
        if (type != DW_UT_compile && type != DW_UT_partial && type != DW_UT_skeleton)
            return -1;
    } else {
        abbrev_off = rd_le(&c, (unsigned)osz);
        asz = (unsigned)rd_le(&c, 1);
    }
    uint64_t code = rd_uleb(&c);
    if (c.bad || version < 2 || version > 5 || code == 0 || abbrev_off >= src->abbrev.size)
        return -1;
    struct cur a = { src->abbrev.data + abbrev_off, src->abbrev.data + src->abbrev.size, 0 };
    for (;;) { /* the entry's abbreviation: code, tag, children, then its specs */
        uint64_t k = rd_uleb(&a);
        if (a.bad || k == 0)
            return -1;
        rd_uleb(&a);
        skip(&a, 1);
        if (k == code)
            break;
        for (uint64_t at = 1, form = 1; !a.bad && (at || form);) {
            at = rd_uleb(&a);
            form = rd_uleb(&a);
            if (form == DW_FORM_implicit_const)
                rd_sleb(&a);
        }
    }
    for (;;) {
        uint64_t at = rd_uleb(&a), form = rd_uleb(&a);
        if (a.bad || (at == 0 && form == 0))
            return -1;
        if (form == DW_FORM_implicit_const)
            rd_sleb(&a);
        if (form == DW_FORM_indirect) /* the form is in the entry */
            form = rd_uleb(&c);
        if (at == DW_AT_stmt_list) {
            uint64_t off = form == DW_FORM_sec_offset ? rd_le(&c, (unsigned)osz)
                           : form == DW_FORM_data4    ? rd_le(&c, 4)
                           : form == DW_FORM_data8    ? rd_le(&c, 8)
                                                      : UINT64_MAX;
            return c.bad || off == UINT64_MAX ? -1 : unit_at(l, off);
        }
        if (skip_form(&c, form, osz, asz, version) < 0 || c.bad)
            return -1;
    }
}

/* Where the units' code lies, from .debug_aranges: each set of address
 * ranges names a compilation unit, whose first entry names its line
 * program. A few hundred bytes a unit instead of running every program at
 * open: opening the OCaml compiler's table (1.3 MB of programs) took
 * 5.5 ms that way, 1.3-1.4 ms this way. Pushes a sequence per range and
 * sets covered[u] for each unit a well-formed set named; the others (no
 * .debug_aranges, a set that is malformed or names no line program) are
 * left to the caller to scan. */
static void index_by_aranges(flamme_lines *l, const struct flamme_elf *e, struct sources *src,
                             struct builder *b, uint8_t *covered)
{
    struct cur c = { src->aranges.data, src->aranges.data + src->aranges.size, 0 };
    uint64_t cu_at = UINT64_MAX;
    int64_t unit = -1;
    /* Room for every range at once (a 64-bit tuple is 16 bytes): doubling
     * the OCaml compiler's 20,000 ranges left 700 KB of old copies. */
    size_t guess = (size_t)(src->aranges.size / 16);
    if (guess > b->cap_seqs) {
        struct seq *n = flamme_bulk_realloc(b->seqs, guess * sizeof *n);
        if (n) {
            b->seqs = n;
            b->cap_seqs = guess;
        }
    }
    while (src->aranges.data && c.p < c.end && !b->oom) {
        const uint8_t *set = c.p;
        uint64_t len;
        int osz = rd_initial_length(&c, &len);
        if (!osz || !need(&c, len))
            break;
        struct cur s = { c.p, c.p + len, 0 };
        c.p += len;
        unsigned version = (unsigned)rd_le(&s, 2);
        uint64_t cu = rd_le(&s, (unsigned)osz);
        unsigned asz = (unsigned)rd_le(&s, 1), segsz = (unsigned)rd_le(&s, 1);
        if (s.bad || version != 2 || (asz != 4 && asz != 8) || segsz != 0)
            continue;
        if (cu != cu_at) {
            cu_at = cu;
            unit = unit_of_cu(l, e, src, cu);
        }
        if (unit < 0)
            continue;
        /* The tuples start at a multiple of their size from the set's start. */
        uint64_t head = (uint64_t)(s.p - set), tuple = 2u * asz;
        skip(&s, (tuple - head % tuple) % tuple);
        size_t keep = b->nseqs;
        b->unit = (uint32_t)unit;
        for (;;) {
            uint64_t lo = rd_le(&s, asz), n = rd_le(&s, asz);
            if (s.bad || (lo == 0 && n == 0))
                break;
            if (n && lo + n > lo && push_seq(b, lo, lo + n) < 0)
                return;
        }
        if (s.bad)
            b->nseqs = keep; /* no terminator: the set is not believed */
        else if (b->nseqs > keep)
            covered[unit] = 1; /* a set without ranges leaves its unit to the scan */
    }
}

static int cmp_brow(const void *a, const void *b)
{
    const struct brow *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Sorted rows -> the final table of one unit. Several rows at one
 * address: the last one in program order describes the instruction there
 * (the others are empty ranges), except that an end_sequence never hides
 * the start of another sequence at the same address. Consecutive rows of
 * the same position are merged. Returns 0, or -1 when out of memory. */
static int finish(struct builder *b, struct lunit *lu)
{
    /* Rows are pushed in program order (the tie-break), so rows already in
     * address order are sorted: nearly every unit of an OCaml program is one
     * sequence. Told without a call per row through cmp_brow, which was
     * most of sorting them when they had to be looked at at all. */
    size_t i = 1;
    while (i < b->nrows && b->rows[i - 1].addr <= b->rows[i].addr)
        i++;
    if (i < b->nrows && flamme_sort_runs(b->rows, b->nrows, sizeof *b->rows, cmp_brow) != 0)
        qsort(b->rows, b->nrows, sizeof *b->rows, cmp_brow);
    /* The rows are written over the builder's (a row is smaller than the
     * brow it comes from, and brow i is read before row n <= i is
     * written), then the block shrinks in place: a second block per unit
     * cost its pages again. */
    _Static_assert(sizeof(struct row) <= sizeof(struct brow), "rows packed over their brows");
    struct row *rows = (struct row *)(void *)b->rows;
    size_t n = 0;
    for (size_t i = 0; i < b->nrows; i++) {
        const struct brow r = b->rows[i];
        struct row nr = { r.addr, r.file, r.line };
        if (n && rows[n - 1].addr == r.addr) {
            if (r.file == END_FILE)
                continue;
            n--; /* replaced by the later row */
        }
        if (n && rows[n - 1].file == nr.file && rows[n - 1].line == nr.line)
            continue;
        rows[n++] = nr;
    }
    struct row *shrunk = flamme_bulk_realloc(rows, (n ? n : 1) * sizeof *rows);
    lu->rows = shrunk ? shrunk : rows;
    lu->nrows = n;
    b->rows = NULL; /* now lu's */
    return 0;
}

static int decode_kept_rows(flamme_lines *l, struct lunit *lu);

/* Makes unit lu's rows, once: from what an earlier process kept, else by
 * running its program; a malformed unit (or no memory) gives none. */
static void run_rows(flamme_lines *l, struct lunit *lu)
{
    if (lu->state != 0)
        return;
    uint64_t t0 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (lu->kept_len && decode_kept_rows(l, lu) == 0) {
        lu->state = 1;
        l->run_ns += flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - t0;
        return;
    }
    l->runs++;
    lu->state = -1;
    struct builder b = { .l = l };
    const uint8_t *p = line_bytes(l, lu->off, lu->len);
    struct cur c = { p, p ? p + lu->len : NULL, 0 };
    if (p && run_unit(&c, lu->offset_size, &b) == 0 && !b.oom && finish(&b, lu) == 0) {
        lu->state = 1;
        l->runs_unkept++; /* a malformed unit is not kept: no reason to keep again */
    }
    flamme_bulk_free(b.rows);
    l->run_ns += flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - t0;
}

size_t flamme_lines_units_run(const flamme_lines *l)
{
    return l ? l->runs : 0;
}

uint64_t flamme_lines_run_ns(const flamme_lines *l)
{
    return l ? l->run_ns : 0;
}

static int cmp_seq(const void *a, const void *b)
{
    const struct seq *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return x->unit < y->unit ? -1 : x->unit > y->unit;
}

static int push_unit(flamme_lines *l, size_t *cap, uint64_t off, uint64_t len, int offset_size)
{
    if (l->nunits == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        struct lunit *n = realloc(l->units, nc * sizeof *n);
        if (!n)
            return -1;
        l->units = n;
        *cap = nc;
    }
    l->units[l->nunits++] = (struct lunit){ .off = off, .len = len, .offset_size = offset_size };
    return 0;
}

/* Builds l's index (units, sequences) from the sections load_sections
 * found. Returns 0, or -1 (nothing usable, or out of memory). */
static int build_index(flamme_lines *l, const struct flamme_elf *e, struct sources *src)
{
    struct builder b = { .l = l, .scan = 1 };
    size_t cap_units = 0;
    uint8_t *covered = NULL;
    /* Every unit's place in .debug_line first: .debug_aranges names them
     * by offset. Only their lengths are read, a window at a time. */
    for (uint64_t pos = 0; pos < l->line.size && !b.oom;) {
        uint64_t n = l->line.size - pos < 12 ? l->line.size - pos : 12, len;
        const uint8_t *h = line_bytes(l, pos, n);
        if (!h)
            break;
        struct cur c = { h, h + n, 0 };
        int offset_size = rd_initial_length(&c, &len);
        uint64_t head = (uint64_t)(c.p - h);
        if (!offset_size || c.bad || len > l->line.size - pos - head || l->nunits >= UINT32_MAX)
            break;
        if (push_unit(l, &cap_units, pos + head, len, offset_size) < 0)
            b.oom = 1;
        pos += head + len;
    }
    if (b.oom || !(covered = calloc(l->nunits ? l->nunits : 1, 1)))
        goto out;
    index_by_aranges(l, e, src, &b, covered);
    /* The units no range named: their sequences, by running each program
     * once without keeping rows. */
    for (size_t i = 0; i < l->nunits && !b.oom; i++) {
        if (covered[i])
            continue;
        struct lunit *lu = &l->units[i];
        const uint8_t *p = line_bytes(l, lu->off, lu->len);
        struct cur u = { p, p ? p + lu->len : NULL, 0 };
        size_t keep = b.nseqs;
        b.unit = (uint32_t)i;
        if (!p || run_unit(&u, lu->offset_size, &b) < 0)
            b.nseqs = keep;
    }
    if (b.oom || b.nseqs == 0)
        goto out;
    /* The units of a linked file mostly follow its address order: one pass. */
    if (flamme_sort_runs(b.seqs, b.nseqs, sizeof *b.seqs, cmp_seq) != 0)
        qsort(b.seqs, b.nseqs, sizeof *b.seqs, cmp_seq);
    /* Sequences of one unit that follow each other, with no other starting
     * between them, are one range: an address in the gap (padding between
     * functions) finds the unit's end_sequence row there, so nothing, as
     * it did before. The OCaml compiler's 19,863 sequences (a function
     * each) become 359: a lookup searches 11 KB instead of 636. */
    size_t k = 0;
    for (size_t i = 0; i < b.nseqs; i++) {
        if (k && b.seqs[i].unit == b.seqs[k - 1].unit && b.seqs[i].lo >= b.seqs[k - 1].hi)
            b.seqs[k - 1].hi = b.seqs[i].hi;
        else
            b.seqs[k++] = b.seqs[i];
    }
    b.nseqs = k;
    struct seq *fit = flamme_bulk_realloc(b.seqs, b.nseqs * sizeof *fit); /* in place */
    if (fit)
        b.seqs = fit;
    l->seqs = b.seqs;
    l->nseqs = b.nseqs;
    b.seqs = NULL;
out:
    free(covered);
    flamme_bulk_free(b.seqs);
    return l->seqs ? 0 : -1;
}

/* max hi of the sequences up to each one (lookups walk back over those
 * that still cover an address). Returns 0, or -1 when out of memory. */
static int make_maxhi(flamme_lines *l)
{
    l->maxhi = flamme_bulk_alloc(l->nseqs * sizeof *l->maxhi);
    if (!l->maxhi)
        return -1;
    uint64_t hi = 0;
    for (size_t i = 0; i < l->nseqs; i++) {
        if (l->seqs[i].hi > hi)
            hi = l->seqs[i].hi;
        l->maxhi[i] = hi;
    }
    return 0;
}

/* ------------------------------------------------------------ kept index */

/* A large file's index (units and sequences, not their rows) is kept
 * between processes (writer/cfi_cache.h, kind "FLMLINE") like its unwind
 * tables and symbols: building it reads .debug_aranges, the head of every
 * compilation unit in .debug_info and .debug_abbrev, about 1.4 MB for the
 * OCaml compiler, in every short compile. Layout: struct kept_head, nunits
 * struct kept_unit (by offset), nseqs struct kept_seq (by lo). */
#define KEPT_KIND "FLMLINE"
uint64_t flamme_lines_kept_min = 256u << 10;

struct kept_head {
    uint64_t line_size, nunits, nseqs;
};
struct kept_unit {
    uint64_t off, len, offset_size;
};
struct kept_seq {
    uint64_t lo, hi, unit;
};

/* Fills l's units and sequences from what was kept for the file of st.
 * Returns 0, or -1 when nothing usable was kept (missing, another
 * .debug_line size, or failing a check: units inside the section, their
 * offset sizes, sequences non-empty, of a unit, by address). */
static int load_kept(flamme_lines *l, const struct stat *st)
{
    size_t len = 0;
    uint8_t *blob = flamme_kept_load(KEPT_KIND, st, &len);
    struct kept_head h;
    if (!blob || len < sizeof h)
        goto bad;
    memcpy(&h, blob, sizeof h);
    if (h.line_size != l->line.size || h.nunits == 0 || h.nseqs == 0 ||
        h.nunits >= UINT32_MAX || h.nunits > len / sizeof(struct kept_unit) ||
        h.nseqs > len / sizeof(struct kept_seq) ||
        len != sizeof h + h.nunits * sizeof(struct kept_unit) + h.nseqs * sizeof(struct kept_seq))
        goto bad;
    l->units = calloc(h.nunits, sizeof *l->units);
    l->seqs = flamme_bulk_alloc(h.nseqs * sizeof *l->seqs);
    if (!l->units || !l->seqs)
        goto bad;
    const uint8_t *at = blob + sizeof h;
    for (uint64_t i = 0; i < h.nunits; i++, at += sizeof(struct kept_unit)) {
        struct kept_unit u;
        memcpy(&u, at, sizeof u);
        if ((u.offset_size != 4 && u.offset_size != 8) || u.off > l->line.size ||
            u.len > l->line.size - u.off || (i && u.off <= l->units[i - 1].off))
            goto bad;
        l->units[i] = (struct lunit){ .off = u.off, .len = u.len, .offset_size = (int)u.offset_size };
    }
    for (uint64_t i = 0; i < h.nseqs; i++, at += sizeof(struct kept_seq)) {
        struct kept_seq q;
        memcpy(&q, at, sizeof q);
        if (q.unit >= h.nunits || q.lo >= q.hi || (i && q.lo < l->seqs[i - 1].lo))
            goto bad;
        l->seqs[i] = (struct seq){ q.lo, q.hi, (uint32_t)q.unit };
    }
    l->nunits = h.nunits;
    l->nseqs = h.nseqs;
    flamme_bulk_free(blob);
    return 0;
bad:
    free(l->units);
    l->units = NULL;
    flamme_bulk_free(l->seqs);
    l->seqs = NULL;
    flamme_bulk_free(blob);
    return -1;
}

/* Keeps l's index for the file of st (load_kept). Best effort. */
static void store_kept(const flamme_lines *l, const struct stat *st)
{
    struct kept_head h = { l->line.size, l->nunits, l->nseqs };
    size_t len = sizeof h + l->nunits * sizeof(struct kept_unit) +
                 l->nseqs * sizeof(struct kept_seq);
    uint8_t *blob = malloc(len), *at = blob;
    if (!blob)
        return;
    memcpy(at, &h, sizeof h);
    at += sizeof h;
    for (size_t i = 0; i < l->nunits; i++, at += sizeof(struct kept_unit)) {
        const struct lunit *u = &l->units[i];
        struct kept_unit k = { u->off, u->len, (uint64_t)u->offset_size };
        memcpy(at, &k, sizeof k);
    }
    for (size_t i = 0; i < l->nseqs; i++, at += sizeof(struct kept_seq)) {
        struct kept_seq k = { l->seqs[i].lo, l->seqs[i].hi, l->seqs[i].unit };
        memcpy(at, &k, sizeof k);
    }
    flamme_kept_store(KEPT_KIND, st, blob, len, NULL, 0);
    free(blob);
}

/* ------------------------------------------------------------ kept rows */

/* The rows of the units a profile ran are kept between processes too
 * (kind "FLMLROW", the same key as the index), and grow with each process
 * that runs units no earlier one did: running them was the largest cost
 * the line table put on a short compile (ocamlopt.opt of a 40-function
 * file at 999 Hz: 76-96 of its 356 units, 55,000-79,000 rows, 2.1-2.9 ms
 * of the writer's CPU in a 75 ms process; 0.6-1.1 ms read back). A unit's rows are read back
 * when it is first looked up in, and .debug_line is not read at all while
 * every unit looked up in was kept. Layout: struct kept_rows_head, nkept
 * struct kept_rows_unit (by unit), the file table (nfiles NUL-terminated
 * names, names_len bytes: what the rows' file numbers index), then the
 * rows, each unit's as (address - the previous row's: ULEB128, never 0
 * after its first row; file + 1, 0 for a gap: ULEB128; line - the previous
 * row's: SLEB128). */
#define KEPT_ROWS_KIND "FLMLROW"

struct kept_rows_head {
    uint64_t line_size, nunits, nkept, nfiles, names_len, code_len;
};
struct kept_rows_unit {
    uint64_t unit, at, len, nrows;
};

/* Reads back the rows kept for l's file (at open, before any unit ran and
 * any file was named): the file table becomes l's first files, and each
 * kept unit notes where its rows lie (decoded by decode_kept_rows). Nothing
 * is used unless it all passes the checks (sizes, the index's, units in
 * order, file names unique). */
static void load_kept_rows(flamme_lines *l)
{
    size_t len = 0;
    uint8_t *blob = l->nfiles ? NULL : flamme_kept_load(KEPT_ROWS_KIND, &l->kst, &len);
    struct kept_rows_head h;
    if (!blob || len < sizeof h)
        goto bad;
    memcpy(&h, blob, sizeof h);
    if (h.line_size != l->line.size || h.nunits != l->nunits || h.nkept == 0 ||
        h.nkept > h.nunits || h.nfiles >= UINT32_MAX || h.names_len > len || h.code_len > len ||
        len - sizeof h - h.names_len - h.code_len != h.nkept * sizeof(struct kept_rows_unit) ||
        (h.names_len && blob[len - h.code_len - 1] != 0))
        goto bad;
    const uint8_t *dir = blob + sizeof h;
    const char *names = (const char *)dir + h.nkept * sizeof(struct kept_rows_unit);
    uint64_t nf = 0;
    for (size_t at = 0; at < h.names_len; nf++) {
        size_t n = strlen(names + at);
        char *name = malloc(n + 1);
        if (!name)
            goto bad;
        memcpy(name, names + at, n + 1);
        if (file_index(l, name) != nf)
            goto bad; /* a name twice, or no memory */
        at += n + 1;
    }
    if (nf != h.nfiles)
        goto bad;
    for (uint64_t i = 0, prev = 0; i < h.nkept; i++) {
        struct kept_rows_unit u;
        memcpy(&u, dir + i * sizeof u, sizeof u);
        if (u.unit >= h.nunits || (i && u.unit <= prev) || u.at > h.code_len ||
            u.len > h.code_len - u.at || u.nrows == 0 || u.nrows > u.len / 3)
            goto bad;
        struct lunit *lu = &l->units[u.unit];
        lu->kept_at = u.at;
        lu->kept_len = u.len;
        lu->kept_rows = u.nrows;
        prev = u.unit;
    }
    l->kept_blob = blob;
    l->kept_code = (const uint8_t *)names + h.names_len;
    l->kept_nfiles = h.nfiles;
    return;
bad:
    for (size_t i = 0; i < l->nunits; i++)
        l->units[i].kept_len = 0;
    flamme_bulk_free(blob);
}

/* Writes v as LEB128 (SLEB128 when sig) at o; returns its length (<= 10). */
static size_t leb_put(uint8_t *o, uint64_t v, int sig)
{
    size_t n = 0;
    for (;;) {
        uint8_t b = v & 0x7f;
        v = sig ? (uint64_t)((int64_t)v >> 7) : v >> 7;
        int done = sig ? (v == 0 && !(b & 0x40)) || (v == ~0ull && (b & 0x40)) : v == 0;
        o[n++] = done ? b : b | 0x80;
        if (done)
            return n;
    }
}

/* Unit lu's rows from what was kept (load_kept_rows). Returns 0, or -1
 * (the unit is then run from .debug_line) when they fail a check:
 * addresses increasing, files in the kept table, lines in range, the
 * unit's bytes used exactly. */
static int decode_kept_rows(flamme_lines *l, struct lunit *lu)
{
    const uint8_t *p = l->kept_code + lu->kept_at;
    struct cur c = { p, p + lu->kept_len, 0 };
    struct row *rows = flamme_bulk_alloc(lu->kept_rows * sizeof *rows);
    uint64_t addr = 0;
    int64_t line = 0;
    for (uint64_t i = 0; rows && i < lu->kept_rows; i++) {
        uint64_t d = rd_uleb(&c), f = rd_uleb(&c);
        line += rd_sleb(&c);
        if (c.bad || (i && d == 0) || addr + d < addr || f > l->kept_nfiles || line < 0 ||
            line > (int64_t)UINT32_MAX)
            goto bad;
        addr += d;
        rows[i] = (struct row){ addr, f ? (uint32_t)(f - 1) : END_FILE, (uint32_t)line };
    }
    if (!rows || c.p != c.end)
        goto bad;
    lu->rows = rows;
    lu->nrows = lu->kept_rows;
    return 0;
bad:
    flamme_bulk_free(rows);
    lu->kept_len = 0;
    return -1;
}

/* Makes room for n more bytes in *buf (*len used of *cap). Returns 0, or
 * -1 when out of memory. */
static int reserve(uint8_t **buf, size_t len, size_t *cap, size_t n)
{
    if (*cap - len >= n)
        return 0;
    size_t nc = *cap ? *cap : 1 << 16;
    while (nc - len < n)
        nc *= 2;
    uint8_t *b = realloc(*buf, nc);
    if (!b)
        return -1;
    *buf = b;
    *cap = nc;
    return 0;
}

void flamme_lines_keep(flamme_lines *l)
{
    if (!l || !l->keep_rows || !l->runs_unkept)
        return;
    uint8_t *code = NULL, *a = NULL;
    size_t clen = 0, ccap = 0, names_len = 0, nkept = 0;
    for (size_t i = 0; i < l->nfiles; i++)
        names_len += strlen(l->files[i]) + 1;
    struct kept_rows_unit *dir = calloc(l->nunits ? l->nunits : 1, sizeof *dir);
    if (!dir)
        return;
    for (size_t i = 0; i < l->nunits; i++) {
        const struct lunit *lu = &l->units[i];
        size_t at = clen;
        if (lu->kept_len) {
            /* Kept before (read back here or not): as it was. */
            if (reserve(&code, clen, &ccap, lu->kept_len) != 0)
                goto out;
            memcpy(code + clen, l->kept_code + lu->kept_at, lu->kept_len);
            clen += lu->kept_len;
            dir[nkept++] = (struct kept_rows_unit){ i, at, lu->kept_len, lu->kept_rows };
        } else if (lu->state == 1 && lu->nrows) {
            if (lu->nrows > SIZE_MAX / 30 || reserve(&code, clen, &ccap, lu->nrows * 30) != 0)
                goto out;
            uint64_t addr = 0;
            int64_t line = 0;
            for (size_t k = 0; k < lu->nrows; k++) {
                const struct row *r = &lu->rows[k];
                clen += leb_put(code + clen, r->addr - addr, 0);
                clen += leb_put(code + clen, r->file == END_FILE ? 0 : (uint64_t)r->file + 1, 0);
                clen += leb_put(code + clen, (uint64_t)((int64_t)r->line - line), 1);
                addr = r->addr;
                line = r->line;
            }
            dir[nkept++] = (struct kept_rows_unit){ i, at, clen - at, lu->nrows };
        }
    }
    struct kept_rows_head h = { l->line.size, l->nunits, nkept, l->nfiles, names_len, clen };
    size_t alen = sizeof h + nkept * sizeof *dir + names_len;
    a = nkept ? malloc(alen) : NULL;
    if (a) {
        uint8_t *p = a;
        memcpy(p, &h, sizeof h);
        p += sizeof h;
        memcpy(p, dir, nkept * sizeof *dir);
        p += nkept * sizeof *dir;
        for (size_t i = 0; i < l->nfiles; i++) {
            size_t n = strlen(l->files[i]) + 1;
            memcpy(p, l->files[i], n);
            p += n;
        }
        flamme_kept_store(KEPT_ROWS_KIND, &l->kst, a, alen, code, clen);
        l->runs_unkept = 0;
    }
out:
    free(a);
    free(code);
    free(dir);
}

flamme_lines *flamme_lines_open(const char *path)
{
    struct flamme_fd_id fid;
    int fd = flamme_open_high(path, O_RDONLY, &fid);
    if (fd < 0)
        return NULL;
    flamme_lines *l = calloc(1, sizeof *l);
    struct flamme_elf e;
    if (!l || !(l->path = strdup(path)) || flamme_elf_open_fd(&e, fd) != 0) {
        if (l)
            free(l->path);
        free(l);
        flamme_close_checked(fd, &fid);
        return NULL;
    }
    l->fd = fd; /* kept: units are read when they are run */
    l->fid = fid;
    l->file = fid;
    struct sources src = { 0 };
    struct stat st;
    l->line = find_fsect(&e, ".debug_line");
    int keep = l->line.size >= flamme_lines_kept_min && fstat(fd, &st) == 0;
    int kept = keep && load_kept(l, &st) == 0;
    if (load_sections(&e, l, &src, !kept) < 0 || (!kept && build_index(l, &e, &src) != 0) ||
        make_maxhi(l) != 0)
        goto out;
    if (keep && !kept)
        store_kept(l, &st);
    if (keep && flamme_kept_on()) {
        l->keep_rows = 1;
        l->kst = st;
        load_kept_rows(l);
    }
    /* A larger .debug_line is read again a window at a time when units
     * are run: the file is checked to be the same one then. A whole copy
     * is kept, so units are run from the bytes the index was built from. */
    if (l->line.size > flamme_lines_whole_max)
        l->win_len = 0;
out:
    flamme_bulk_free(src.aranges.data);
    flamme_bulk_free(src.abbrev.data);
    free(src.win);
    flamme_elf_close(&e);
    if (!l->seqs || !l->maxhi) { /* failed: a table without sequences is never returned */
        flamme_lines_close(l);
        return NULL;
    }
    return l;
}

#define SEQ_WALK_MAX 256 /* overlapping sequences searched backwards */

int flamme_lines_lookup(flamme_lines *l, uint64_t vaddr, const char **file, uint32_t *line)
{
    if (!l || l->nseqs == 0 || vaddr < l->seqs[0].lo)
        return 0;
    size_t lo = 0, hi = l->nseqs; /* the last sequence with lo <= vaddr */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->seqs[mid].lo <= vaddr)
            lo = mid;
        else
            hi = mid;
    }
    /* Sequences do not overlap in a sane file; where they do (code the
     * linker dropped, relocated to 0), the later one in the file wins. */
    const struct seq *sq = NULL;
    for (size_t i = lo + 1, k = 0; i-- > 0 && l->maxhi[i] > vaddr && k < SEQ_WALK_MAX; k++)
        if (l->seqs[i].hi > vaddr) {
            sq = &l->seqs[i];
            break;
        }
    if (!sq)
        return 0;
    struct lunit *lu = &l->units[sq->unit];
    run_rows(l, lu);
    if (lu->state != 1 || lu->nrows == 0 || vaddr < lu->rows[0].addr)
        return 0;
    lo = 0, hi = lu->nrows; /* the last row with addr <= vaddr */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (lu->rows[mid].addr <= vaddr)
            lo = mid;
        else
            hi = mid;
    }
    const struct row *r = &lu->rows[lo];
    if (r->file == END_FILE || r->file >= l->nfiles || r->line == 0)
        return 0;
    *file = l->files[r->file];
    *line = r->line;
    return 1;
}

void flamme_lines_close(flamme_lines *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->nfiles; i++)
        free(l->files[i]);
    free(l->files);
    flamme_itab_free(&l->file_ids);
    for (size_t i = 0; i < l->nunits; i++)
        flamme_bulk_free(l->units[i].rows);
    free(l->units);
    flamme_bulk_free(l->seqs);
    flamme_bulk_free(l->maxhi);
    flamme_bulk_free(l->win);
    flamme_bulk_free(l->line_str.data);
    flamme_bulk_free(l->str.data);
    flamme_bulk_free(l->kept_blob);
    if (l->fd >= 0)
        flamme_close_checked(l->fd, &l->fid);
    free(l->path);
    free(l);
}
