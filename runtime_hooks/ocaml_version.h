/*
 * runtime_hooks/ocaml_version.h — which OCaml runtime release this process
 * runs, and whether the agent's knowledge of its internals holds for it.
 *
 * The native runtime carries no version string (Sys.ocaml_version lives in
 * the standard library's Sys module, linked only when used), so the release
 * is recognised by the runtime functions it defines: marker symbols from
 * objects every OCaml 5 program links. Then every version-specific fact the
 * agent relies on is checked against what the process really has: the
 * symbols it looks up exist with the expected kind and size (the GC timing
 * hooks are pointer-sized data, caml_state a pointer in a thread-local
 * block), the runtime's hand-written stubs (caml_c_call, caml_runstack)
 * address caml_domain_state, stack_info, stack_handler and c_stack_link at
 * the offsets of runtime_hooks/ocaml_layout.h, and caml_reset_young_limit
 * reads Caml_state->id at the release's offset. (Not checked: the names of
 * the runtime's static thread functions, domain_thread_func and the like,
 * which only choose a thread's label in the profile.)
 *
 * Called by: agent/agent.c's constructor only (it uses dlsym/dladdr, which
 * must not run later: see agent/agent.c).
 */
#ifndef FLAMME_RUNTIME_HOOKS_OCAML_VERSION_H
#define FLAMME_RUNTIME_HOOKS_OCAML_VERSION_H
#include <elf.h>
#include <link.h>
#include <stddef.h>

/* Identifies the running OCaml runtime and checks the agent's facts about
 * it. Returns the release's name ("5.1", "5.3", "5.4") when everything holds;
 * otherwise NULL with a one-line reason in why (what was expected, what was
 * found). Call only when flamme_ocaml_present() is true. */
const char *flamme_ocaml_check_runtime(char *why, size_t whylen);

/* The ELF symbol of the definition dlsym finds for name, its address in
 * *addr; NULL (with *addr NULL when dlsym found none) if there is none.
 * Looks the name up in its object's GNU hash table, and only without one
 * falls back to dladdr1, which scans every dynamic symbol of the object:
 * an OCaml executable exports all of its symbols (ocamlopt.opt: 24,700),
 * and one such scan, touching all of .dynsym and .dynstr, cost about 1.5
 * ms of `ocamlopt.opt -version`'s start. Constructor only, as above (also
 * from runtime_hooks/ocaml_rt.c's flamme_ocaml_resolve, which it calls). */
const ElfW(Sym) *flamme_ocaml_dynsym(const char *name, void **addr);

#endif
