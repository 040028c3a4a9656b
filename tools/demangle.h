/*
 * tools/demangle.h — display names for symbols (OCaml 5.1+ and <=5.0
 * mangling, C names pass through). Pure function, any thread.
 */
#ifndef FLAMME_TOOLS_DEMANGLE_H
#define FLAMME_TOOLS_DEMANGLE_H
#include <stddef.h>

/* Writes the display form of sym into out (always NUL-terminated, truncated
 * to outlen-1). Examples: camlStdlib__List.map_279 -> Stdlib.List.map,
 * camlM.$2b$21_283 -> M.+!, camlFoo.entry -> Foo (init), caml_call_gc ->
 * caml_call_gc, memmove -> memmove. Returns out. */
const char *flamme_demangle(const char *sym, char *out, size_t outlen);

#endif
