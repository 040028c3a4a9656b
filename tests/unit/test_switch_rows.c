/*
 * tests/unit/test_switch_rows.c — the runtime's unannounced stack switch
 * (runtime_hooks/switch_rows.c): caml_raise_exn as OCaml 5.3.0 (with and
 * without frame pointers) and 5.1.0 (with) assemble it, byte for byte from
 * their executables; the span and rule found in each; code of another
 * shape, cut short, or with the OCaml stack pointer in a register the call
 * clobbers (5.1 without frame pointers) gives none. The module is compiled
 * into this test (it is part of libflamme.so only).
 */
#include "check.h"

#include "runtime_hooks/switch_rows.c"

static const uint8_t raise_530_fp[] = {
    0x55, 0x48, 0x89, 0xe5, 0x49, 0xf7, 0x86, 0xc0, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x75, 0x0c, 0x49, 0x8b, 0x66, 0x30, 0x4d, 0x8d, 0x5e, 0x30, 0x41, 0x8f, 0x03, 0xc3, 0x49,
    0xc7, 0x86, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x49, 0x89, 0xe5, 0x49, 0x89,
    0xc4, 0x49, 0x8b, 0x66, 0x40, 0x48, 0x89, 0xc7, 0x49, 0x8b, 0x75, 0x08, 0x49, 0x8d, 0x55,
    0x10, 0x49, 0x8b, 0x4e, 0x30, 0xe8, 0xaa, 0xe0, 0xff, 0xff, 0x4c, 0x89, 0xe0, 0x49, 0x8b,
    0x66, 0x30, 0x4d, 0x8d, 0x5e, 0x30, 0x41, 0x8f, 0x03, 0xc3};
static const uint8_t raise_530_nofp[] = {
    0x49, 0xf7, 0x86, 0xc0, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x75, 0x0c, 0x49, 0x8b,
    0x66, 0x30, 0x4d, 0x8d, 0x5e, 0x30, 0x41, 0x8f, 0x03, 0xc3, 0x49, 0xc7, 0x86, 0xb8, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x49, 0x89, 0xe5, 0x49, 0x89, 0xc4, 0x49, 0x8b, 0x66,
    0x40, 0x48, 0x89, 0xc7, 0x49, 0x8b, 0x75, 0x00, 0x49, 0x8d, 0x55, 0x08, 0x49, 0x8b, 0x4e,
    0x30, 0xe8, 0xc2, 0xe1, 0xff, 0xff, 0x4c, 0x89, 0xe0, 0x49, 0x8b, 0x66, 0x30, 0x4d, 0x8d,
    0x5e, 0x30, 0x41, 0x8f, 0x03, 0xc3};
static const uint8_t raise_510_fp[] = {
    0x55, 0x48, 0x89, 0xe5, 0x49, 0xf7, 0x86, 0xb8, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x75, 0x0c, 0x49, 0x8b, 0x66, 0x30, 0x4d, 0x8d, 0x5e, 0x30, 0x41, 0x8f, 0x03, 0xc3, 0x49,
    0xc7, 0x86, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x49, 0x89, 0xe2, 0x49, 0x89,
    0xc4, 0x49, 0x8b, 0x66, 0x40, 0x48, 0x89, 0xc7, 0x49, 0x8b, 0x72, 0x08, 0x49, 0x8d, 0x52,
    0x10, 0x49, 0x8b, 0x4e, 0x30, 0xe8, 0x3a, 0xe3, 0xff, 0xff, 0x4c, 0x89, 0xe0, 0x49, 0x8b,
    0x66, 0x30, 0x4d, 0x8d, 0x5e, 0x30, 0x41, 0x8f, 0x03, 0xc3};

#define ADDR 0x944f0u

/* An image of n code bytes at ADDR; reads beyond them fail. */
struct img {
    const uint8_t *b;
    size_t n;
};

static int img_read(void *p, uint64_t addr, void *dst, size_t len)
{
    const struct img *m = p;
    if (addr < ADDR || addr - ADDR > m->n || len > m->n - (addr - ADDR))
        return -1;
    memcpy(dst, m->b + (addr - ADDR), len);
    return 0;
}

static int span_of(const uint8_t *b, size_t n, uint64_t size, struct flamme_switch_span *s)
{
    struct img m = { b, n };
    memset(s, 0x5a, sizeof *s);
    return flamme_switch_rows_span(ADDR, size, img_read, &m, s);
}

TEST(the_three_compilers)
{
    struct flamme_switch_span s;
    /* After mov 0x40(%r14),%rsp, to after mov 0x30(%r14),%rsp. */
    CHECK(span_of(raise_530_fp, sizeof raise_530_fp, sizeof raise_530_fp, &s) == 1);
    CHECK(s.lo == ADDR + 50 && s.hi == ADDR + 77);
    CHECK(s.dwreg == 13 && s.cfa_off == 16 && s.rbp_save == -2);
    CHECK(span_of(raise_530_nofp, sizeof raise_530_nofp, sizeof raise_530_nofp, &s) == 1);
    CHECK(s.lo == ADDR + 46 && s.hi == ADDR + 73);
    CHECK(s.dwreg == 13 && s.cfa_off == 8 && s.rbp_save == 0);
    /* 5.1 keeps the OCaml stack pointer in r10: rbp stands in for it. */
    CHECK(span_of(raise_510_fp, sizeof raise_510_fp, sizeof raise_510_fp, &s) == 1);
    CHECK(s.lo == ADDR + 50 && s.hi == ADDR + 77);
    CHECK(s.dwreg == 6 && s.cfa_off == 16 && s.rbp_save == -2);
    /* Symbol size unknown (0): the same from the first bytes readable. */
    CHECK(span_of(raise_530_nofp, sizeof raise_530_nofp, 0, &s) == 1);
    CHECK(s.lo == ADDR + 46 && s.hi == ADDR + 73);
}

TEST(r10_without_frame_pointers_has_no_rule)
{
    struct flamme_switch_span s;
    /* 5.1 without frame pointers: 5.1's body without ENTER_FUNCTION. */
    CHECK(span_of(raise_510_fp + 4, sizeof raise_510_fp - 4, sizeof raise_510_fp - 4, &s) == 0);
}

TEST(other_shapes_and_cut_code_give_none)
{
    struct flamme_switch_span s;
    uint8_t c[sizeof raise_530_nofp];
    /* Each byte of the instructions the span rests on, changed. */
    static const int key[] = { 36, 37, 38, 39, 40, 41, 42, 43, 44, 61, 66, 67, 68, 69, 70, 71 };
    for (size_t k = 0; k < sizeof key / sizeof *key; k++) {
        memcpy(c, raise_530_nofp, sizeof c);
        c[key[k]] ^= 0x10;
        CHECK(span_of(c, sizeof c, sizeof c, &s) == 0);
    }
    /* Cut at every length: never a read past the image, never a span
     * that ends beyond it. */
    for (size_t n = 0; n <= sizeof raise_530_fp; n++) {
        int got = span_of(raise_530_fp, n, sizeof raise_530_fp, &s);
        CHECK(!got || s.hi <= ADDR + n);
    }
    /* Plain code. */
    static const uint8_t plain[64] = { 0x55, 0x48, 0x89, 0xe5, 0xc3 };
    CHECK(span_of(plain, sizeof plain, sizeof plain, &s) == 0);
}

TEST(only_caml_raise_exn_is_asked_about)
{
    CHECK(flamme_switch_rows_is_fn("caml_raise_exn"));
    CHECK(!flamme_switch_rows_is_fn("caml_reraise_exn"));
    CHECK(!flamme_switch_rows_is_fn("caml_raise_exn_x"));
    CHECK(!flamme_switch_rows_is_fn(""));
}

int main(void)
{
    RUN(the_three_compilers);
    RUN(r10_without_frame_pointers_has_no_rule);
    RUN(other_shapes_and_cut_code_give_none);
    RUN(only_caml_raise_exn_is_asked_about);
    return CHECK_DONE();
}
