/*
 * tools/folded.h — the folded-stack ("collapsed") text format as
 * flamegraph.pl reads it, parsed into interned frame ids.
 *
 * Owns: line syntax (`root;...;leaf COUNT` or `... COUNT1 COUNT2` for a
 * differential line), the frame-name table, the per-stack records.
 * Called by: `flamme svg` (tools/svg.c), the flamegraph layout
 * (tools/flamegraph.c) and `flamme diff` (tools/diff.c, which reads lines
 * through flamme_folded_read_lines); single thread; allocates.
 *
 * Rules (same as flamegraph.pl; every reader of folded text in tools/ goes
 * through flamme_folded_split_line): frames are separated by ';' and may contain
 * spaces; the count is the last whitespace-separated token, an unsigned
 * integer or decimal ("12", "12.", "12.5"); if the rest of the line again
 * ends in whitespace+number the line is differential (first number = before,
 * second = after; widths use "after"). Lines that do not match are skipped
 * with a warning. Duplicate stacks are kept as separate records here and are
 * summed by the layout. A trailing '\r' is ignored.
 */
#ifndef FLAMME_TOOLS_FOLDED_H
#define FLAMME_TOOLS_FOLDED_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/index_table.h"

struct flamme_folded_stack {
    size_t off;      /* index of the first frame id in flamme_folded.ids (root first) */
    uint32_t n;      /* number of frames */
    int has_before;  /* 1 for a differential line */
    double count;    /* samples (the "after" column for a differential line) */
    double before;   /* differential "before" column; 0 otherwise */
};

struct flamme_folded {
    /* interned names: name i is arena + name_off[i], name_len[i] bytes, NUL-terminated */
    char *arena; size_t arena_len, arena_cap;
    size_t *name_off; uint32_t *name_len; uint32_t nnames, names_cap;
    struct flamme_itab names;             /* name -> id (common/index_table.h) */
    uint32_t *ids; size_t nids, ids_cap;  /* frame ids of all stacks, concatenated */
    struct flamme_folded_stack *stacks; size_t nstacks, stacks_cap;
    double total;        /* sum of count over all stacks */
    size_t bad_lines;    /* lines skipped */
    int differential;    /* 1 if any line was differential */
    int oom;             /* 1 after an allocation failure */
};

void flamme_folded_init(struct flamme_folded *f);
void flamme_folded_free(struct flamme_folded *f);

/* Name of frame id (NUL-terminated, owned by f). */
static inline const char *flamme_folded_name(const struct flamme_folded *f, uint32_t id)
{
    return f->arena + f->name_off[id];
}

/* Interns len bytes at s; returns the id, or UINT32_MAX on allocation failure. */
uint32_t flamme_folded_intern(struct flamme_folded *f, const char *s, size_t len);

/* Looks a name up without adding it; UINT32_MAX if absent. */
uint32_t flamme_folded_lookup(const struct flamme_folded *f, const char *s, size_t len);

/* The rules above for one line (without its '\n'), nothing stored: on
 * success the stack is line[0..*len), *count the samples (a differential
 * line's "after" column), *has_before and *before its "before" column.
 * Returns 0, 1 for a blank line, or -1 if malformed (why set). */
int flamme_folded_split_line(const char *line, size_t *len, double *count, int *has_before,
                             double *before, const char **why);

/* Parses one line (without its '\n'). Returns 0 if added, 1 if the line is
 * blank (ignored silently), -1 if malformed (why is set to a short reason),
 * -2 on allocation failure. */
int flamme_folded_parse_line(struct flamme_folded *f, const char *line, size_t len,
                             const char **why);

/* Adds the ';'-joined stack with count (used for profiles collapsed in memory).
 * Returns 0, -1 for an empty stack, -2 on allocation failure. */
int flamme_folded_add(struct flamme_folded *f, const char *stack, size_t len, double count);

/* Finds a trailing "WS NUMBER" (digits, optionally "." and digits) in
 * s[0..*len). On success stores the number, shortens *len to the text
 * before the whitespace and returns 1; else 0. Shared with `flamme diff`, so
 * both read the same lines. */
int flamme_folded_take_count(const char *s, size_t *len, double *out);

/* Called for each well-formed line read by flamme_folded_read_lines, with
 * the parts flamme_folded_split_line gives. Returns 0, or -1 (out of
 * memory) to stop reading. */
typedef int (*flamme_folded_line_fn)(void *ctx, const char *stack, size_t len, double count,
                                     int has_before, double before);

/* Reads every line of fd (after the headlen bytes at head, already read
 * from it), splits each with flamme_folded_split_line and hands the
 * well-formed ones to fn. A malformed line prints "flamme VERB: NAME:LINE:
 * skipped line: why" on stderr (at most 10, then one summary), counts in
 * *bad (when bad is not NULL) and is skipped; blank lines are ignored.
 * Returns 0, or -1 on a read error or when fn or an allocation fails
 * (message printed). */
int flamme_folded_read_lines(int fd, const char *verb, const char *name, const void *head,
                             size_t headlen, flamme_folded_line_fn fn, void *ctx, size_t *bad);

/* Reads all lines of fd into f. A malformed line prints "flamme svg: NAME:LINE: why"
 * on stderr (at most 10 such warnings, then one summary) and is skipped.
 * Returns 0, or -1 on a read error or allocation failure (message printed). */
int flamme_folded_read_fd(struct flamme_folded *f, int fd, const char *name);

/* Same, for a stream whose first headlen bytes were already read (they are
 * parsed first): used for stdin after sniffing for a profile's magic. */
int flamme_folded_read_fd_head(struct flamme_folded *f, int fd, const char *name,
                               const void *head, size_t headlen);

#endif
