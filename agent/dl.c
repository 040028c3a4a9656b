/*
 * agent/dl.c — libraries the program loads and unloads while it runs.
 *
 * dlopen is interposed: once the real call has returned, the new mappings
 * get their unwind rows, built in the calling thread, before dlopen returns
 * to the program (flamme_writer_libraries_changed) — the library's code can
 * run only after that, so every sample in it can be unwound. The writer
 * re-reads the mappings before its next drain, so the frames are named.
 * glibc's dlopen looks at its caller (the return address) to pick the
 * search path (the caller's DT_RUNPATH), expand $ORIGIN and choose the
 * namespace; through a wrapper the caller would be libflamme. So only a
 * path with a '/' and no '$' (no search, no expansion) is wrapped; any
 * other name is forwarded by a tail jump (the caller stays the program's).
 * Such a library is found by the loader's load count: when the program
 * looks a symbol up (dlsym, interposed the same way: a check, then a tail
 * jump, since dlsym's RTLD_NEXT depends on its caller too), which a program
 * does before it calls into a library it opened, or else at the writer's
 * next sweep (every 20 ms).
 *
 * dlclose is interposed: before the real call, the writer drains every ring
 * and names the frames (flamme_writer_sync), so samples taken in the
 * library keep their names after it is gone.
 *
 * Who: any thread of the program, normal context. The real functions come
 * from agent/libc_next.c (looked up in the constructor).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/libc_next.h"
#include "agent/threads.h"
#include "writer/writer.h"

#define SYNC_TIMEOUT_MS 500

typedef void *(*dlopen_fn)(const char *, int);
typedef int (*dlclose_fn)(void *);

/* Read by the assembly stub below: hidden, so a plain rip-relative load.
 * Set by flamme_dl_wrap_p, which the stub always calls first. */
__attribute__((visibility("hidden"))) _Atomic(dlopen_fn) flamme_real_dlopen;

/* Called by the stub with dlopen's arguments: 1 to wrap the call (the
 * caller does not matter to it and the agent runs), 0 to forward it. */
__attribute__((visibility("hidden"), used)) int flamme_dl_wrap_p(const char *file)
{
    if (!atomic_load_explicit(&flamme_real_dlopen, memory_order_relaxed))
        atomic_store_explicit(&flamme_real_dlopen, (dlopen_fn)flamme_libc_next("dlopen"),
                              memory_order_relaxed);
    /* Pairs with the release store in the constructor / at exit. */
    if (!atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        return 0;
    return file && strchr(file, '/') && !strchr(file, '$');
}

/* Runs fn (the agent's work for the program: unwind rows of a library it
 * loaded) with the thread's handler told to drop what it would sample
 * there (flamme's own time). */
static void as_agent(void (*fn)(void))
{
    flamme_thread_agent_enter();
    fn();
    flamme_thread_agent_leave();
}

__attribute__((visibility("hidden"), used)) void *flamme_dl_open_wrapped(const char *file,
                                                                          int mode)
{
    void *h = atomic_load_explicit(&flamme_real_dlopen, memory_order_relaxed)(file, mode);
    if (h)
        as_agent(flamme_writer_libraries_changed);
    return h;
}

/* An interposer that must leave the caller's return address in place: it
 * calls CHECK with the caller's first two arguments kept (pushed, the
 * stack aligned for the call), restores them, then runs TAIL (jumps). */
#define DL_STUB(name, check, tail)                                                         \
    __asm__(".text\n.p2align 4\n"                                                          \
            ".globl " name "\n"                                                             \
            ".type " name ",@function\n" name ":\n"                                         \
            ".cfi_startproc\n"                                                              \
            "  push %rdi\n"                                                                 \
            ".cfi_adjust_cfa_offset 8\n"                                                    \
            "  push %rsi\n"                                                                 \
            ".cfi_adjust_cfa_offset 8\n"                                                    \
            "  sub $8, %rsp\n"                                                              \
            ".cfi_adjust_cfa_offset 8\n"                                                    \
            "  call " check "\n"                                                            \
            "  add $8, %rsp\n"                                                              \
            ".cfi_adjust_cfa_offset -8\n"                                                   \
            "  pop %rsi\n"                                                                  \
            ".cfi_adjust_cfa_offset -8\n"                                                   \
            "  pop %rdi\n"                                                                  \
            ".cfi_adjust_cfa_offset -8\n" tail ".cfi_endproc\n"                             \
            ".size " name ", .-" name "\n")

/* dlopen: asks flamme_dl_wrap_p, then either calls the wrapper or jumps to
 * the real dlopen with the program's own return address in place. */
DL_STUB("dlopen", "flamme_dl_wrap_p",
        "  test %eax, %eax\n"
        "  jnz flamme_dl_open_wrapped\n"
        "  jmp *flamme_real_dlopen(%rip)\n");

typedef void *(*dlsym_fn)(void *, const char *);

/* Read by the dlsym stub below; set by flamme_dl_sym_check, which the stub
 * always calls first. */
__attribute__((visibility("hidden"))) _Atomic(dlsym_fn) flamme_real_dlsym;

/* Called by the stub before every dlsym (the agent's own lookups included:
 * inside libflamme dlsym binds to the stub). The real one is found by
 * version, never through dlsym itself. Then, while sampling, a library
 * the loader loaded since the last check gets its rows now. */
__attribute__((visibility("hidden"), used)) void flamme_dl_sym_check(void)
{
    if (!atomic_load_explicit(&flamme_real_dlsym, memory_order_relaxed)) {
        void *f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        atomic_store_explicit(&flamme_real_dlsym, (dlsym_fn)f, memory_order_relaxed);
    }
    /* Pairs with the release store in the constructor / at exit. */
    if (atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        as_agent(flamme_writer_loader_check);
}

/* dlsym: the check, then the real dlsym with the caller's return address
 * in place (RTLD_NEXT is relative to the caller's object). */
DL_STUB("dlsym", "flamme_dl_sym_check", "  jmp *flamme_real_dlsym(%rip)\n");

static void sync_writer(void)
{
    flamme_writer_sync(SYNC_TIMEOUT_MS);
}

__attribute__((visibility("default"))) int dlclose(void *handle)
{
    /* Pairs with the release store in the constructor / at exit. */
    if (atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        as_agent(sync_writer);
    static _Atomic(dlclose_fn) real;
    if (!atomic_load_explicit(&real, memory_order_relaxed))
        atomic_store_explicit(&real, (dlclose_fn)flamme_libc_next("dlclose"), memory_order_relaxed);
    return atomic_load_explicit(&real, memory_order_relaxed)(handle);
}
