/* dlopen_loop_stubs.c — dlopen LIB, call its torture_work(n), dlclose. */
#include <dlfcn.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

value torture_dl_round(value lib, value n)
{
    void *h = dlopen(String_val(lib), RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return Val_int(-1);
    long (*f)(long) = (long (*)(long))dlsym(h, "torture_work");
    long r = f ? f(Long_val(n)) : -2;
    dlclose(h);
    return Val_long(r & 0xffff);
}
