/* tests/e2e/mmapth_stubs.c — whether glibc's malloc serves a block of n
 * bytes with a mapping of its own (mallinfo2's count of mapped blocks goes
 * up), as the program would see it: glibc raises its mmap threshold when
 * a mapped block is freed, for the whole process. */
#include <malloc.h>
#include <stdlib.h>

#include <caml/mlvalues.h>

value mmapth_mapped(value n)
{
    size_t before = mallinfo2().hblks;
    void *p = malloc((size_t)Long_val(n));
    size_t after = mallinfo2().hblks;
    free(p);
    return Val_bool(p && after > before);
}
