/* dies_stubs.c — the C ways dies.ml ends: abort(), a NULL store, a touch
 * of a mapped page past the end of its (empty) file, a division by zero. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <caml/mlvalues.h>

value torture_abort(value u)
{
    abort();
    return u;
}

value torture_segv(value u)
{
    *(volatile int *)(long)Long_val(Val_int(0)) = 1;
    return u;
}

value torture_bus(value u)
{
    FILE *f = tmpfile();
    if (!f)
        return u;
    volatile char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
    if (p != MAP_FAILED)
        p[0] = 1;
    return u;
}

value torture_fpe(value d)
{
    volatile long n = 7, z = Long_val(d);
    return Val_long(n / z);
}
