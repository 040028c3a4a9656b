/*
 * agent/libc_next.h — the definitions the agent's interposers forward to
 * (pthread_create, the exec family, the blocking calls, _exit...), looked
 * up in the constructor. The loader must not be called later: glibc's dlsym
 * takes the lock dlopen holds while it runs a library's constructors, and
 * such a constructor may start a thread and wait for it (Dynlink of a
 * .cmxs, ctypes loading a C library): a lookup on the new thread would wait
 * for ever.
 * Who: the constructor calls flamme_libc_next_init; interposers (any
 * thread, normal context) call flamme_libc_next.
 */
#ifndef FLAMME_AGENT_LIBC_NEXT_H
#define FLAMME_AGENT_LIBC_NEXT_H

/* Resolves every name of the table with dlsym(RTLD_NEXT). Constructor only. */
void flamme_libc_next_init(void);

/* The next definition of name after the agent, as found by
 * flamme_libc_next_init. A name missing from the table (or a call made
 * before the constructor ran, from another library's constructor) is
 * looked up on the spot. NULL if there is none. */
void *flamme_libc_next(const char *name);

/* Declares `type real`, the next definition of `name` (libc's), looked up
 * once (flamme_libc_next) and kept in a static of the enclosing function:
 * an interposer's first statement. Needs <stdatomic.h>. */
#define FLAMME_LIBC_REAL(type, name)                                                         \
    static _Atomic(type) real_;                                                              \
    type real = atomic_load_explicit(&real_, memory_order_acquire);                          \
    if (!real) {                                                                             \
        real = (type)flamme_libc_next(name);                                                 \
        /* Pairs with the acquire load above; racing lookups store the same value. */       \
        atomic_store_explicit(&real_, real, memory_order_release);                           \
    }

#endif
