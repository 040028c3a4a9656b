/*
 * writer/symbols.h — address -> (function, module, offset) for the running
 * process, from /proc/self/maps and the ELF .symtab/.dynsym of each mapped
 * file (function symbols preferred over NOTYPE aliases such as
 * caml_startup.code_begin). Called by the writer thread only (allocates,
 * opens files; never from a signal handler). Not thread-safe: one owner.
 */
#ifndef FLAMME_WRITER_SYMBOLS_H
#define FLAMME_WRITER_SYMBOLS_H
#include <stdint.h>

typedef struct flamme_symtab flamme_symtab;

/* Returns a new symbolizer for the calling process, or NULL on failure. */
flamme_symtab *flamme_symtab_new(void);

/* Looks addr up. Returns 1 when a function symbol covers it, 0 when only the
 * module is known (*function set to ""), -1 when no mapping contains it even
 * after re-reading /proc/self/maps (*function and *module set to ""). The
 * strings stay valid until flamme_symtab_free. *offset is addr's offset from
 * the module's load base (file-relative vaddr), usable with addr2line. */
int flamme_symtab_lookup(flamme_symtab *s, uint64_t addr, const char **function,
                         const char **module, uint64_t *offset);

/* The path of the file mapped at addr, as /proc/self/maps names it (""
 * when no mapping holds it), without reading the file's symbols. Valid
 * until flamme_symtab_free. */
const char *flamme_symtab_module(flamme_symtab *s, uint64_t addr);

/* CPU time (the calling thread's clock) spent reading modules' symbol
 * tables so far, each once, when a lookup first needed it; 0 for NULL. */
uint64_t flamme_symtab_parse_ns(const flamme_symtab *s);

/* Re-reads /proc/self/maps (e.g. after dlopen); keeps parsed ELF files. */
void flamme_symtab_refresh(flamme_symtab *s);

void flamme_symtab_free(flamme_symtab *s);

#endif
