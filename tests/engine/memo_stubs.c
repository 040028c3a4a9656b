/* memo_stubs.c — C side of tests/engine/memo.ml: one [@@noalloc] external
 * that spins in one of two C functions, chosen by its argument, so that a
 * sample's leaf says which of the program's two recursion depths called it
 * (the OCaml frames above it are the same function, from the same call
 * site, at either depth). */
#include <caml/mlvalues.h>

static volatile unsigned long memo_sink;

__attribute__((noinline, noclone)) void memo_spin_deep(long n)
{
    for (long i = 0; i < n; i++)
        memo_sink += (unsigned long)i;
}

__attribute__((noinline, noclone)) void memo_spin_shallow(long n)
{
    for (long i = 0; i < n; i++)
        memo_sink += 3 * (unsigned long)i;
}

value memo_spin(value deep, value n)
{
    if (Long_val(deep))
        memo_spin_deep(Long_val(n));
    else
        memo_spin_shallow(Long_val(n));
    return Val_unit;
}
