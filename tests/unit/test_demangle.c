/*
 * tests/unit/test_demangle.c — tools/demangle.c: OCaml 5.1+ and <=5.0
 * names, escapes, stamps, init/anonymous functions, C names unchanged,
 * malformed input, and output truncation.
 */
#include "tests/unit/check.h"
#include "tools/demangle.h"

static const char *dm(const char *s)
{
    static char buf[256];
    return flamme_demangle(s, buf, sizeof buf);
}

TEST(ocaml_5_1_names)
{
    CHECK_STR(dm("camlStdlib__List.map_279"), "Stdlib.List.map");
    CHECK_STR(dm("camlStdlib__List.map_dps_1313"), "Stdlib.List.map_dps");
    CHECK_STR(dm("camlM.apply_274"), "M.apply");
    CHECK_STR(dm("camlMylib__Foo.bar_12"), "Mylib.Foo.bar");
    CHECK_STR(dm("camlM.x_1_290"), "M.x_1"); /* only the last stamp goes */
    CHECK_STR(dm("camlM.code_begin"), "M.code_begin");
    CHECK_STR(dm("camlM.f"), "M.f"); /* no stamp */
    CHECK_STR(dm("camlDune__exe__Main.fib_270"), "Main.fib"); /* dune executable wrapping */
    CHECK_STR(dm("camlDune__exe__Main.entry"), "Main (init)");
}

TEST(escapes)
{
    CHECK_STR(dm("camlM.$2b$21_283"), "M.+!");
    CHECK_STR(dm("camlM.$3e$3e$3d_10"), "M.>>=");
    CHECK_STR(dm("camlM.$2A_1"), "M.*"); /* uppercase hex accepted */
}

TEST(init_and_anonymous)
{
    CHECK_STR(dm("camlM.entry"), "M (init)");
    CHECK_STR(dm("camlStdlib__Domain.entry"), "Stdlib.Domain (init)");
    CHECK_STR(dm("camlM.entry_55"), "M.entry"); /* a user function named entry */
    CHECK_STR(dm("camlM.fun_363"), "M.(fun)");
    CHECK_STR(dm("camlM.anon_fn$5bm.ml$3a12$2c3$2d$2d20$5d_88"), "M.(fun m.ml:12,3--20)");
    CHECK_STR(dm("camlM.anon_fn$5bm$2eml$3a4$2c1$2d$2d9$5d_7"), "M.(fun m.ml:4,1--9)");
}

TEST(ocaml_5_0_names)
{
    CHECK_STR(dm("camlStdlib__List__map_279"), "Stdlib.List.map");
    CHECK_STR(dm("camlFoo__bar_12"), "Foo.bar");
    CHECK_STR(dm("camlFoo__entry"), "Foo (init)");
    CHECK_STR(dm("camlFoo__fun_1234"), "Foo.(fun)");
    CHECK_STR(dm("camlFoo__$2b_3"), "Foo.+");
}

TEST(c_names_unchanged)
{
    const char *names[] = { "caml_call_gc", "caml_start_program", "caml_program", "caml_curry3",
                            "caml_startup.code_begin", "memmove", "domain_thread_func", "_start",
                            "oldify_one", "caml_stw_empty_minor_heap_no_major_slice.constprop.0",
                            "camlfoo.bar_1", "camlFoo" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK_STR(dm(names[i]), names[i]);
}

TEST(malformed)
{
    CHECK_STR(dm(""), "");
    CHECK_STR(dm("caml"), "caml");
    CHECK_STR(dm("camlM."), "camlM.");           /* empty ident */
    CHECK_STR(dm("camlM.f$"), "M.f$");            /* '$' at end */
    CHECK_STR(dm("camlM.f$2"), "M.f$2");          /* half an escape */
    CHECK_STR(dm("camlM.$zz_1"), "M.$zz");        /* not hex */
    CHECK_STR(dm("camlM.a$00b_1"), "M.a$00b");    /* NUL escape kept literal */
    CHECK_STR(dm("camlM.anon_fn$5b_3"), "M.(fun )");
    CHECK_STR(dm("camlM.f_"), "M.f_");
    CHECK_STR(dm("camlM.__"), "M.__");
    CHECK_STR(dm("camlA__"), "camlA__");
    char buf[4] = "xyz";
    CHECK_STR(flamme_demangle(NULL, buf, sizeof buf), "");
}

TEST(truncation)
{
    char small[8];
    memset(small, 'x', sizeof small);
    CHECK_STR(flamme_demangle("camlStdlib__List.map_279", small, sizeof small), "Stdlib.");
    char one[1] = { 'x' };
    CHECK_STR(flamme_demangle("memmove", one, 1), "");
    char guard[6] = { 0, 0, 0, 0, 'G', 'G' };
    flamme_demangle("memmove", guard, 4);
    CHECK(guard[3] == '\0' && guard[4] == 'G');
    CHECK(flamme_demangle("memmove", guard, 0) == guard);
}

int main(void)
{
    RUN(ocaml_5_1_names);
    RUN(escapes);
    RUN(init_and_anonymous);
    RUN(ocaml_5_0_names);
    RUN(c_names_unchanged);
    RUN(malformed);
    RUN(truncation);
    return CHECK_DONE();
}
