/*
 * tests/fidelity/cstub_stubs.c — C stubs for cstub.ml: hot loops that call
 * glibc's memmove and malloc/free. Owner: the fidelity suite (test_fidelity.py checks
 * that every sample inside glibc shows the stub between the OCaml caller and
 * the glibc function, i.e. the unwinder did not skip the stub's frame).
 * Built by mk/fidelity.mk with -fno-builtin so the calls stay real calls.
 */
#include <stdlib.h>
#include <string.h>
#include <caml/mlvalues.h>

static char buf[64 * 1024];

/* Moves 32 KiB around n times; returns a checksum so nothing is elided. */
value fid_memmove_loop(value n)
{
    long sum = 0;
    for (long i = 0; i < Long_val(n); i++) {
        memmove(buf + (i & 63), buf + 32768, 32768);
        sum += buf[i & 1023];
    }
    return Val_long(sum);
}

/* n malloc/free pairs of varying sizes; returns a checksum. */
value fid_malloc_loop(value n)
{
    long sum = 0;
    for (long i = 0; i < Long_val(n); i++) {
        size_t sz = 16 + (size_t)(i & 255) * 16;
        volatile char *p = malloc(sz);
        if (!p)
            abort();
        p[0] = (char)i;
        sum += p[0];
        free((void *)p);
    }
    return Val_long(sum);
}
