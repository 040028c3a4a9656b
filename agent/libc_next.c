/*
 * agent/libc_next.c — the interposers' forwarding table (see libc_next.h).
 */
#include "agent/libc_next.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

/* Every function the agent interposes and forwards. */
static const char *const names[] = {
    "pthread_create", "execve", "execv", "execvp", "execvpe", "_exit", "_Exit",
    "select", "pselect", "poll", "ppoll", "epoll_wait", "epoll_pwait",
    "nanosleep", "clock_nanosleep", "dlopen", "dlclose", "sleep", "usleep", "pause",
    "sigsuspend", "sigtimedwait", "sigwaitinfo", "epoll_pwait2", "read", "recv", "recvfrom",
    "recvmsg", "accept", "accept4", "close", "socket", "socketpair", "dup", "dup2", "dup3",
    "setsockopt", "open", "open64", "openat", "openat64", "pipe", "pipe2", "write", "writev",
    "send", "sendto", "sendmsg", "connect", "close_range", "closefrom", "sigaction",
};
#define N_NAMES (sizeof names / sizeof names[0])

static void *addrs[N_NAMES];
/* Set (release) once addrs is filled; pairs with the acquire load in
 * flamme_libc_next. */
static atomic_int ready;

void flamme_libc_next_init(void)
{
    for (size_t i = 0; i < N_NAMES; i++)
        addrs[i] = dlsym(RTLD_NEXT, names[i]);
    atomic_store_explicit(&ready, 1, memory_order_release);
}

void *flamme_libc_next(const char *name)
{
    if (atomic_load_explicit(&ready, memory_order_acquire))
        for (size_t i = 0; i < N_NAMES; i++)
            if (strcmp(names[i], name) == 0)
                return addrs[i];
    return dlsym(RTLD_NEXT, name);
}
