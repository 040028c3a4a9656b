/* tests/unwind/cbraise_stubs.c — a C stub for tests/unwind/cbraise.ml, as
 * a binding that calls back into OCaml and turns the OCaml exception into
 * an error code is written (a parser's callback, a visitor that can fail):
 * caml_callback_exn, the result checked with Is_exception_result. */
#include <caml/callback.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

value cbraise_visit(value f, value x)
{
    CAMLparam2(f, x);
    CAMLlocal1(r);
    r = caml_callback_exn(f, x);
    if (Is_exception_result(r))
        CAMLreturn(Val_int(-1));
    CAMLreturn(r);
}
