/*
 * common/roots.h — which function a thread's stack begins with. One list
 * shared by the agent's writer (to tell a clean end from a broken walk) and
 * the tools (completeness figures), so they always agree. Pure, any thread.
 */
#ifndef FLAMME_COMMON_ROOTS_H
#define FLAMME_COMMON_ROOTS_H
#include <stddef.h>

/* 1 if s[0..n) names a thread's first function: main, __libc_start_call_main,
 * __libc_start_main, _start, start_thread, clone, clone3, _dl_start_user (the
 * loader's entry, under the constructors of the program and its libraries) —
 * or "[libc.so.N]",
 * the display of an unnamed libc frame (glibc's static thread entries have no
 * symbol without debug files; a walk only ends there cleanly, since a broken
 * one is marked [broken]). */
int flamme_is_thread_root(const char *s, size_t n);

#endif
