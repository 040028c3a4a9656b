/*
 * tests/versions/fake_runtime.c — a program that looks like an OCaml 5
 * native program to the agent (it exports caml_state and caml_start_program,
 * linked with -rdynamic as ocamlopt links) but whose runtime is no release
 * the agent knows. tests/versions/test_versions.py checks the agent stays dormant
 * with one line and the program's output and exit status are untouched.
 */
#include <stdio.h>

__thread void *caml_state;

void caml_start_program(void)
{
}

int main(void)
{
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 50000000ul; i++) /* some CPU time to sample */
        x += i;
    printf("fake runtime: done %lu\n", (unsigned long)(x != 0));
    return 3;
}
