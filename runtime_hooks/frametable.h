/*
 * runtime_hooks/frametable.h — code addresses for Gc.Memprof callstacks.
 * A Memprof callstack (OCaml 5.3 native) is an array of backtrace slots:
 * a frame descriptor's address (its first word is the return address), or,
 * for the leaf of an allocation made by OCaml code compiled with -g, the
 * address of that allocation's debuginfo, which names no code. This module
 * indexes the program's frame tables once (debuginfo -> the return address
 * of the descriptor that holds it) so that both kinds give an address the
 * writer symbolizes like any sampled pc.
 *
 * Who: the OCaml library's stubs (normal context): flamme_frametable_index
 * before Gc.Memprof starts, then flamme_frametable_slot_addr from any
 * domain (the index is read-only once built).
 */
#ifndef FLAMME_RUNTIME_HOOKS_FRAMETABLE_H
#define FLAMME_RUNTIME_HOOKS_FRAMETABLE_H
#include <stdint.h>

/* Indexes the frame tables listed by tables (the runtime's NULL-terminated
 * caml_frametable array: each a descriptor count then the descriptors).
 * Once per process; later calls do nothing. Returns 0, or -1 (no memory:
 * leaves of allocations made by OCaml code then come out unknown). */
int flamme_frametable_index(void *const *tables);

/* The code address of one backtrace slot as stored in the OCaml array (a
 * tagged value), or 0 when it names none the index knows. */
uintptr_t flamme_frametable_slot_addr(uintptr_t slot_value);

/* Whether pc is the return address of a call from OCaml code (it has a
 * frame descriptor): the innermost OCaml frame of a stack walked from the
 * runtime. 0 before flamme_frametable_index. Any thread, normal context. */
int flamme_frametable_is_ocaml_ret(uintptr_t pc);

#endif
