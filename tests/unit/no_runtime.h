/*
 * tests/unit/no_runtime.h — what agent/walk.c calls in runtime_hooks/,
 * which the unit-test library does not hold, for tests that walk stacks
 * of their own process without an OCaml runtime. Include it once, in the
 * test's one source file. Test code only.
 */
#ifndef FLAMME_TESTS_NO_RUNTIME_H
#define FLAMME_TESTS_NO_RUNTIME_H
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

#include "runtime_hooks/ocaml_rt.h"

/* Reads outside the known stacks: the same system call as the agent's. */
int flamme_safe_read_sigsafe(void *dst, uintptr_t addr, unsigned long len)
{
    struct iovec l = { dst, len }, r = { (void *)addr, len };
    return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* No effect-handler chain, no fiber, no OCaml runtime. */
int flamme_ocaml_more_ranges_sigsafe(uintptr_t *more, int direct, struct flamme_ocaml_chain *chain,
                                     struct flamme_range *out, int max)
{
    (void)direct, (void)chain, (void)out, (void)max;
    *more = 0;
    return 0;
}

uintptr_t flamme_ocaml_parent_slot_sigsafe(const struct flamme_range *r)
{
    (void)r;
    return 0;
}

int flamme_ocaml_has_frame_pointers_sigsafe(void)
{
    return -1;
}

int flamme_ocaml_fiber_bottom_sigsafe(const struct flamme_range *r, uintptr_t sp, uintptr_t pc,
                                      uintptr_t *slot, int *mid, int *cfa_add, int *rbp_at,
                                      uintptr_t *ra)
{
    (void)r, (void)sp, (void)pc, (void)slot, (void)mid, (void)cfa_add, (void)rbp_at, (void)ra;
    return 0;
}

int flamme_ocaml_inline_raise_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t *trap)
{
    (void)pc, (void)sp, (void)trap;
    return 0;
}

int flamme_ocaml_exn_entry_sigsafe(uintptr_t pc)
{
    (void)pc;
    return 0;
}

int flamme_ocaml_callback_exit_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t r10, int r10_known,
                                       uintptr_t *slot, uintptr_t *resume)
{
    (void)pc, (void)sp, (void)r10, (void)r10_known, (void)slot, (void)resume;
    return 0;
}

int flamme_ocaml_runstack_parent_sigsafe(uintptr_t pc, int *dwreg, int *off, int *cfa_add,
                                         int *rbp_at)
{
    (void)pc, (void)dwreg, (void)off, (void)cfa_add, (void)rbp_at;
    return 0;
}

#endif
