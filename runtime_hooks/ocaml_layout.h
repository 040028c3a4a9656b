/*
 * runtime_hooks/ocaml_layout.h — the OCaml runtime structure offsets the
 * agent is compiled with (x86_64). They hold for the releases listed in
 * runtime_hooks/ocaml_version.c, which checks at start-up that the running
 * runtime is one of them and that its own machine code uses these offsets;
 * any other runtime leaves the agent dormant.
 *
 * Included by: runtime_hooks/ocaml_rt.c (stack ranges, domain ids),
 * runtime_hooks/gc_hooks.c (domain ids) and runtime_hooks/ocaml_version.c.
 */
#ifndef FLAMME_RUNTIME_HOOKS_OCAML_LAYOUT_H
#define FLAMME_RUNTIME_HOOKS_OCAML_LAYOUT_H

/* caml_domain_state (runtime/caml/domain_state.tbl order; 8-byte fields). */
#define DS_CURRENT_STACK 40
#define DS_EXN_HANDLER 48
#define DS_C_STACK 64
/* Caml_state->id moves between releases (280 in 5.1, 288 in 5.3, 320 in 5.4): set by
 * flamme_ocaml_check_runtime in the constructor (after checking it in
 * caml_reset_young_limit's code), before any thread is registered or
 * sampled, and only read afterwards (handler included). */
extern int flamme_ocaml_ds_id;
/* Caml_state->local_roots (152 in 5.1, 160 in 5.3, 192 in 5.4: each release's
 * caml_callback_exn stores its roots block there), set with the id. */
extern int flamme_ocaml_ds_local_roots;
/* Caml_state->unique_id, stat_promoted_words and stat_major_words (296,
 * 392, 400 in 5.3; 328, 424, 432 in 5.4), set with the id; 0 on a release
 * whose counters the heap-fill sampler does not read (5.1). */
extern int flamme_ocaml_ds_unique_id, flamme_ocaml_ds_stat_promoted, flamme_ocaml_ds_stat_major;
/* struct stack_info (runtime/caml/fiber.h): sp@0 exception_ptr@8 handler@16,
 * 56 bytes in all; usable stack [stk + 56, stk->handler). */
#define SI_SP 0
#define SI_HANDLER 16
#define SI_SIZE 56
/* struct stack_handler: handle_value, handle_exn, handle_effect, parent@24;
 * 32 bytes, right at the usable stack's end. */
#define SH_PARENT 24
#define SH_SIZE 32
/* struct c_stack_link: stack@0 sp@8 prev@16. */
#define CSL_STACK 0
#define CSL_SP 8
/* struct caml__roots_block (caml/memory.h): next@0 ntables@8 nitems@16
 * tables[5]@24. */
#define RB_NEXT 0
#define RB_NTABLES 8
#define RB_NITEMS 16
#define RB_TABLE0 24
/* A continuation block's tag (caml/mlvalues.h); a header's tag is its low
 * byte, its size in words from bit 10. */
#define CONT_TAG 245

#endif
