/*
 * runtime_hooks/switch_rows.c — the runtime's unannounced stack switches
 * (see switch_rows.h). Knows the instructions of caml_raise_exn as OCaml
 * 5.1-5.5 assemble runtime/amd64.S for x86-64:
 *   [push %rbp; mov %rsp,%rbp]          ENTER_FUNCTION, frame pointers only
 *   ...
 *   mov %rsp,%r13 (5.1: %r10)            the OCaml stack pointer
 *   mov %rax,%r12
 *   mov c_stack(%r14),%rsp               the switch
 *   ... call caml_stash_backtrace
 *   mov %r12,%rax
 *   mov exn_handler(%r14),%rsp           RESTORE_EXN_HANDLER_OCAML
 * Anything else is left to the file's own rows.
 */
#include "runtime_hooks/switch_rows.h"

#include <string.h>

#define CODE_MAX 192 /* caml_raise_exn is ~90 bytes */
#define DW_RBP 6
#define DW_R13 13

int flamme_switch_rows_is_fn(const char *name)
{
    return strcmp(name, "caml_raise_exn") == 0;
}

/* Offset of the first occurrence of the n bytes pat in c[from, len), or -1. */
static long find(const uint8_t *c, size_t len, size_t from, const uint8_t *pat, size_t n)
{
    for (size_t i = from; i + n <= len; i++)
        if (memcmp(c + i, pat, n) == 0)
            return (long)i;
    return -1;
}

int flamme_switch_rows_span(uint64_t addr, uint64_t size, flamme_image_read_fn rd, void *rctx,
                            struct flamme_switch_span *out)
{
    uint8_t c[CODE_MAX];
    size_t len = size && size < CODE_MAX ? (size_t)size : CODE_MAX;
    /* Its size unknown, the function may end less than CODE_MAX bytes
     * before its segment: shorter reads, 16 bytes less each. */
    while (len >= 32 && rd(rctx, addr, c, len) != 0)
        len -= 16;
    if (len < 32)
        return 0;
    static const uint8_t enter[] = {0x55, 0x48, 0x89, 0xe5};       /* push %rbp; mov %rsp,%rbp */
    static const uint8_t save_r13[] = {0x49, 0x89, 0xe5};          /* mov %rsp,%r13 */
    static const uint8_t save_r10[] = {0x49, 0x89, 0xe2};          /* mov %rsp,%r10 */
    static const uint8_t keep_exn[] = {0x49, 0x89, 0xc4};          /* mov %rax,%r12 */
    static const uint8_t to_rsp[] = {0x49, 0x8b, 0x66};            /* mov disp8(%r14),%rsp */
    static const uint8_t back[] = {0x4c, 0x89, 0xe0, 0x49, 0x8b, 0x66}; /* mov %r12,%rax; mov .. */
    int fp = memcmp(c, enter, sizeof enter) == 0;
    long s13 = find(c, len, 0, save_r13, sizeof save_r13);
    long s10 = find(c, len, 0, save_r10, sizeof save_r10);
    long s = s13 >= 0 ? s13 : s10;
    if (s < 0 || (s13 < 0 && !fp))
        return 0;
    size_t at = (size_t)s + 3;
    if (at + 7 > len || memcmp(c + at, keep_exn, sizeof keep_exn) != 0 ||
        memcmp(c + at + 3, to_rsp, sizeof to_rsp) != 0)
        return 0;
    size_t lo = at + 7; /* after the switch */
    long b = find(c, len, lo, back, sizeof back);
    /* The call to caml_stash_backtrace ends right before the way back. */
    if (b < (long)lo + 5 || c[b - 5] != 0xe8)
        return 0;
    out->lo = addr + lo;
    out->hi = addr + (uint64_t)b + 7; /* after the load of the handler's rsp */
    /* r13 is the OCaml stack pointer whichever way the raise came: from
     * OCaml (at its call of caml_raise_exn) or from C (caml_raise_exception
     * reloads the one saved when OCaml called C, and jumps here). rbp is
     * that only for a raise from OCaml: from C it is caml_raise_exception's
     * own frame on the C stack the stash call then overwrites. */
    out->dwreg = s13 >= 0 ? DW_R13 : DW_RBP;
    out->cfa_off = fp ? 16 : 8;
    out->rbp_save = fp ? -2 : 0;
    return 1;
}
