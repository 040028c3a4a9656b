/*
 * runtime_hooks/switch_rows.h — where the OCaml runtime's hand-written code
 * switches stacks without saying so in its CFI, and the rule that holds
 * there (common/frame_sites.h, struct flamme_switch_span).
 *
 * caml_raise_exn (amd64.S), when a backtrace is being recorded, saves the
 * OCaml stack pointer in a register, sets rsp to the C stack and calls
 * caml_stash_backtrace; its rows still say CFA = rsp + 8 (+ 8 with frame
 * pointers). A walk from caml_stash_backtrace (or malloc, or the frame
 * table search under it) then read the C stack as the raising frame:
 * [broken] without frame pointers, a junk frame with them. Every raise
 * from C (caml_raise_exception) ends there too.
 *
 * Who: the writer, through the agent's host (writer/writer_host.h), while
 * it builds a module's rows. Pure, any thread; never a signal handler.
 */
#ifndef FLAMME_RUNTIME_HOOKS_SWITCH_ROWS_H
#define FLAMME_RUNTIME_HOOKS_SWITCH_ROWS_H
#include <stdint.h>

#include "common/frame_sites.h"

/* 1 if name is caml_raise_exn, else 0. */
int flamme_switch_rows_is_fn(const char *name);

/* Decodes the function at link-time addr (size bytes, 0: unknown) read
 * through rd. Returns 1 and sets *out to the span from the switch to the C
 * stack up to the return to OCaml's exception handler, with the rule there:
 * CFA = r13 + 8 (OCaml 5.2-5.3 keep the OCaml stack pointer in r13,
 * callee-saved, across the call), + 16 with frame pointers, rbp saved under
 * the return address (ENTER_FUNCTION). OCaml 5.1 keeps that pointer in
 * r10, which the call clobbers: with frame pointers CFA = rbp + 16 then
 * (right for a raise from OCaml code; from C, rbp is on the C stack and
 * the walk stops there, [broken], as before), without them 0 is returned,
 * as for code of another shape. */
int flamme_switch_rows_span(uint64_t addr, uint64_t size, flamme_image_read_fn rd, void *rctx,
                            struct flamme_switch_span *out);

#endif
