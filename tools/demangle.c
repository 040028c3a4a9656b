/*
 * tools/demangle.c — display names for OCaml symbols (see tools/demangle.h).
 *
 * Owns: the mapping from linker symbols to what a flame graph shows. Called by
 * the collapse/svg/report verbs on every distinct frame, so it is a pure
 * function of its input: no allocation, no global state, any thread.
 *
 * Recognised forms (OCaml's symbol mangling, asmcomp and utils of 5.1-5.3):
 *   5.1+   "caml" Unit "." ident _NNN   camlStdlib__List.map_279 -> Stdlib.List.map
 *   <=5.0  "caml" Unit "__" ident _NNN  camlStdlib__List__map_279 -> Stdlib.List.map
 *          (ambiguous: the last "__" is taken as the unit/ident boundary)
 * with, in both forms: "$xx" hex escapes decoded (camlM.$2b$21_283 -> M.+!),
 * the trailing "_NNN" stamp dropped, "entry" -> "Unit (init)", anonymous
 * functions "fun_NNN" -> "Unit.(fun)" (parenthesised because "fun" is a
 * keyword, so it cannot collide with a user function), and flambda's
 * "anon_fn[file.ml:L,C1--C2]" -> "Unit.(fun file.ml:L,C1--C2)".
 * Anything not starting with "caml" + an uppercase letter (caml_call_gc,
 * caml_program, memmove, _start) and any malformed OCaml name (empty unit or
 * ident) is copied unchanged.
 */
#include "tools/demangle.h"

#include <string.h>

/* A bounded output cursor: writes are dropped once full, the buffer is
 * always NUL-terminated at pos (pos <= cap - 1). */
struct out {
    char *buf;
    size_t cap, pos;
};

static void put_char(struct out *o, char c)
{
    if (o->pos + 1 < o->cap) {
        o->buf[o->pos++] = c;
        o->buf[o->pos] = '\0';
    }
}

static void put_mem(struct out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_char(o, s[i]);
}

static void put_str(struct out *o, const char *s)
{
    put_mem(o, s, strlen(s));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Copies s[0..n) decoding "$xx" escapes. A '$' not followed by two hex digits
 * within the n bytes, or an escape for NUL, is copied literally. When
 * dunder_dots is set, "__" becomes '.' (unit names: Stdlib__List). */
static void put_decoded(struct out *o, const char *s, size_t n, int dunder_dots)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '$' && i + 2 < n) {
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi >= 0 && lo >= 0 && (hi | lo) != 0) {
                put_char(o, (char)(hi * 16 + lo));
                i += 2;
                continue;
            }
        }
        if (dunder_dots && s[i] == '_' && i + 1 < n && s[i + 1] == '_') {
            put_char(o, '.');
            i++;
            continue;
        }
        put_char(o, s[i]);
    }
}

/* Length of ident without its trailing "_NNN" stamp (unchanged if none). */
static size_t strip_stamp(const char *id, size_t n)
{
    size_t i = n;
    while (i > 0 && id[i - 1] >= '0' && id[i - 1] <= '9')
        i--;
    if (i < n && i >= 2 && id[i - 1] == '_')
        return i - 1;
    return n;
}

static int has_prefix(const char *s, size_t n, const char *pfx)
{
    size_t k = strlen(pfx);
    return n >= k && memcmp(s, pfx, k) == 0;
}

/* Writes "Unit.ident" (or "Unit (init)", "Unit.(fun)", ...) for one split
 * OCaml name; unit/ident are raw (still escaped) slices of the symbol. */
static void put_ocaml(struct out *o, const char *unit, size_t ulen, const char *id, size_t ilen)
{
    /* dune wraps an executable's modules as Dune__exe__M: users know M. */
    if (has_prefix(unit, ulen, "Dune__exe__") && ulen > 11) {
        unit += 11;
        ulen -= 11;
    }
    put_decoded(o, unit, ulen, 1);
    size_t n = strip_stamp(id, ilen);
    if (n == 5 && memcmp(id, "entry", 5) == 0 && n == ilen) {
        put_str(o, " (init)");
        return;
    }
    if (n == 3 && memcmp(id, "fun", 3) == 0) {
        put_str(o, ".(fun)");
        return;
    }
    /* flambda: anon_fn$5bfile$2eml$3a12$2c3$2d$2d20$5d — decode, then wrap. */
    if (has_prefix(id, n, "anon_fn$5b") || has_prefix(id, n, "anon_fn[")) {
        size_t skip = id[7] == '[' ? 8 : 10;
        const char *loc = id + skip;
        size_t llen = n - skip;
        if (llen >= 3 && memcmp(loc + llen - 3, "$5d", 3) == 0)
            llen -= 3;
        else if (llen >= 1 && loc[llen - 1] == ']')
            llen -= 1;
        put_str(o, ".(fun ");
        put_decoded(o, loc, llen, 0);
        put_char(o, ')');
        return;
    }
    put_char(o, '.');
    put_decoded(o, id, n, 0);
}

const char *flamme_demangle(const char *sym, char *out, size_t outlen)
{
    if (!out || outlen == 0)
        return out;
    struct out o = { out, outlen, 0 };
    out[0] = '\0';
    if (!sym)
        return out;

    size_t len = strlen(sym);
    if (len < 6 || memcmp(sym, "caml", 4) != 0 || sym[4] < 'A' || sym[4] > 'Z') {
        put_mem(&o, sym, len);
        return out;
    }
    const char *body = sym + 4;
    size_t blen = len - 4;

    /* 5.1+: the unit name cannot contain '.', so the first one separates. */
    const char *dot = memchr(body, '.', blen);
    if (dot) {
        size_t ulen = (size_t)(dot - body), ilen = blen - ulen - 1;
        if (ulen == 0 || ilen == 0) {
            put_mem(&o, sym, len);
            return out;
        }
        put_ocaml(&o, body, ulen, dot + 1, ilen);
        return out;
    }

    /* <=5.0: the last "__" not at either end separates unit and ident. */
    for (size_t i = blen - 2; i > 0; i--) {
        if (body[i] == '_' && body[i + 1] == '_' && i + 2 < blen) {
            put_ocaml(&o, body, i, body + i + 2, blen - i - 2);
            return out;
        }
    }
    put_mem(&o, sym, len);
    return out;
}
