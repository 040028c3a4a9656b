/* tests/unwind/cback_stubs.c — C stubs for tests/unwind/cback.ml, written
 * as bindings usually are: a noalloc checksum over bytes, a stub that sorts
 * with glibc's qsort and an OCaml comparison (a callback from inside libc),
 * a C fold that calls an OCaml closure per element, a stub that
 * allocates its result, and a noalloc hash written in assembly without
 * CFI directives (as a vendored .S routine is): no FDE covers it. */
#include <stdlib.h>
#include <string.h>

#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

value cb_checksum(value b)
{
    const unsigned char *p = Bytes_val(b);
    mlsize_t n = caml_string_length(b);
    unsigned long h = 5381;
    for (int round = 0; round < 8; round++)
        for (mlsize_t i = 0; i < n; i++)
            h = h * 33 + p[i] + round;
    return Val_long(h & 0x3fffffff);
}

/* cb_asm_hash(bytes): h = h * 31 + byte over the block's words, four
 * times, as a tagged int. Saves rbx and r12 by push, as hand-written
 * stubs do, and walks the bytes with them. */
__asm__(".text\n"
        ".globl cb_asm_hash\n.type cb_asm_hash,@function\n"
        "cb_asm_hash:\n"
        "  push %rbx\n"
        "  push %r12\n"
        "  mov -8(%rdi), %rax\n"
        "  shr $10, %rax\n"
        "  shl $3, %rax\n"
        "  lea (%rdi,%rax), %r12\n"
        "  xor %eax, %eax\n"
        "  mov $4, %edx\n"
        "1: mov %rdi, %rbx\n"
        "2: cmp %r12, %rbx\n"
        "  jae 3f\n"
        "  movzbl (%rbx), %ecx\n"
        "  imul $31, %rax, %rax\n"
        "  add %rcx, %rax\n"
        "  inc %rbx\n"
        "  jmp 2b\n"
        "3: dec %edx\n"
        "  jnz 1b\n"
        "  lea 1(%rax,%rax), %rax\n"
        "  pop %r12\n"
        "  pop %rbx\n"
        "  ret\n"
        ".size cb_asm_hash, .-cb_asm_hash\n");

/* The comparison closure for qsort's callbacks: a registered root (qsort
 * gives its comparator no context). */
static value *cmp_root;

static int cmp_ocaml(const void *a, const void *b)
{
    value r = caml_callback2(*cmp_root, Val_long(*(const long *)a), Val_long(*(const long *)b));
    return Int_val(r);
}

value cb_sort_keys(value keys, value cmp)
{
    CAMLparam2(keys, cmp);
    CAMLlocal1(res);
    mlsize_t n = Wosize_val(keys);
    long *idx = malloc(n * sizeof *idx);
    for (mlsize_t i = 0; i < n; i++)
        idx[i] = Long_val(Field(keys, i));
    cmp_root = &cmp;
    qsort(idx, n, sizeof *idx, cmp_ocaml);
    res = caml_alloc_tuple(n ? n : 1);
    if (n == 0)
        Store_field(res, 0, Val_long(0));
    for (mlsize_t i = 0; i < n; i++)
        Store_field(res, i, Val_long(idx[i]));
    free(idx);
    CAMLreturn(res);
}

value cb_fold(value n, value f, value init)
{
    CAMLparam2(f, init);
    CAMLlocal1(acc);
    acc = init;
    for (long i = 0; i < Long_val(n); i++)
        acc = caml_callback2(f, acc, Val_long(i));
    CAMLreturn(acc);
}

value cb_render(value x)
{
    CAMLparam1(x);
    char buf[64];
    unsigned long v = (unsigned long)Long_val(x);
    int len = 0;
    do {
        buf[len++] = (char)('a' + v % 26);
        v /= 26;
    } while (v && len < 63);
    CAMLreturn(caml_alloc_initialized_string(len, buf));
}
