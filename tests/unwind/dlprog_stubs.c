/* tests/unwind/dlprog_stubs.c — dlopen a library, call its dlw_work, dlclose
 * it (for tests/unwind/dlprog.ml). */
#include <dlfcn.h>

#include <caml/fail.h>
#include <caml/mlvalues.h>

value dlp_round(value path, value n)
{
    void *h = dlopen(String_val(path), RTLD_NOW | RTLD_LOCAL);
    if (!h)
        caml_failwith(dlerror());
    long (*work)(long) = (long (*)(long))dlsym(h, "dlw_work");
    if (!work)
        caml_failwith(dlerror());
    long r = work(Long_val(n));
    if (dlclose(h) != 0)
        caml_failwith(dlerror());
    return Val_long(r & 0xffff);
}
