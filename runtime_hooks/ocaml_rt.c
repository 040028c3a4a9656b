/*
 * runtime_hooks/ocaml_rt.c — OCaml 5 runtime layout knowledge (see header).
 * The only file of the agent that knows caml_domain_state offsets and the
 * fiber structures; keep CAML_INTERNALS knowledge here.
 */
#include "runtime_hooks/ocaml_rt.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/forkchild.h"
#include "runtime_hooks/ocaml_layout.h"
#include "runtime_hooks/ocaml_version.h"

/* The runtime caps a stack at Max_stack_def (1 GiB of words); a range larger
 * than this is garbage. */
#define MAX_OCAML_STACK ((uintptr_t)1 << 33)

/* What the constructor learnt from the loader (see flamme_ocaml_resolve):
 * written once before any other thread of ours runs, read-only after. */
static struct {
    int present;       /* caml_state and caml_start_program found */
    int frame_pointers; /* see flamme_ocaml_has_frame_pointers_sigsafe */
    /* caml_state as (TLS module id, offset in the module's block): what
     * __tls_get_addr takes, so any thread finds its own instance without
     * the loader lock (the loader's TLS lock at most, never the one dlopen
     * holds while it runs constructors). modid 0: not found. */
    struct {
        unsigned long modid, offset;
    } ti;
    /* caml_call_realloc_stack's code [lo, hi) (see growing_stack); 0: not
     * found. */
    uintptr_t grow_lo, grow_hi;
    /* The runtime's assembly, caml_system__code_begin..end (see
     * flamme_ocaml_stable_sigsafe); 0: not found. */
    uintptr_t sys_code_lo, sys_code_hi;
    /* caml_perform's code [lo, hi) (see performer_range); 0: not found. */
    uintptr_t perform_lo, perform_hi;
    /* caml_runstack's code [lo, hi) (see flamme_ocaml_fiber_bottom_sigsafe);
     * 0: not found. */
    uintptr_t runstack_lo, runstack_hi;
    /* Where in caml_runstack r10 holds the parent's descriptor, which
     * Caml_state names current again in the middle (see
     * flamme_ocaml_runstack_parent_sigsafe); 0: not found. */
    uintptr_t parent_reg_lo, parent_reg_hi;
    /* caml_start_program's way back to C (see
     * flamme_ocaml_callback_exit_sigsafe): its exception handler
     * [exn_lo, exn_hi), the common code from label1 to its add to r10
     * (add_at) and its switch to the C stack (switch_at); 0: not found. */
    uintptr_t start_exn_lo, start_exn_hi, start_label1, start_add_at, start_switch_at;
} rt;

extern void *__tls_get_addr(void *);

struct tls_find {
    uintptr_t addr;
    unsigned long modid, offset;
};

/* dl_iterate_phdr callback: the module whose TLS block (the calling
 * thread's instance) holds f->addr. */
static int find_tls_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct tls_find *f = arg;
    (void)size;
    if (!info->dlpi_tls_modid || !info->dlpi_tls_data)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = (uintptr_t)info->dlpi_tls_data;
        if (ph->p_type == PT_TLS && f->addr >= lo && f->addr + sizeof(void *) <= lo + ph->p_memsz) {
            f->modid = info->dlpi_tls_modid;
            f->offset = f->addr - lo;
            return 1;
        }
    }
    return 0;
}

/* Offset of the first occurrence of pat (n bytes) in code[from, len), or
 * len. */
static size_t find_bytes(const unsigned char *code, size_t from, size_t len,
                         const unsigned char *pat, size_t n)
{
    for (size_t i = from; i + n <= len; i++)
        if (memcmp(code + i, pat, n) == 0)
            return i;
    return len;
}

/* caml_runstack's stretch from loading the parent's descriptor into r10
 * (mov parent(%r11),%r10) to reading its saved stack pointer into r13
 * (mov (%r10),%r13), the same bytes in 5.1-5.5: [parent_reg_lo, hi). */
static void find_parent_reg(void)
{
    static const unsigned char load[] = {0x4d, 0x8b, 0x53, SH_PARENT}, keep[] = {0x4d, 0x8b, 0x2a};
    const unsigned char *c = (const unsigned char *)rt.runstack_lo;
    size_t n = rt.runstack_hi - rt.runstack_lo;
    if (!rt.runstack_lo || n > 4096 || SI_SP != 0)
        return;
    size_t i = find_bytes(c, 0, n, load, sizeof load);
    size_t j = find_bytes(c, i + sizeof load, n, keep, sizeof keep);
    if (j + sizeof keep > n || j - i > 64)
        return;
    rt.parent_reg_lo = rt.runstack_lo + i + sizeof load;
    rt.parent_reg_hi = rt.runstack_lo + j + sizeof keep;
}

/* Function fn's code [*lo, *hi), its size from the symbol table, else
 * unsized bytes; both left 0 when fn is not found. */
static void code_range(const char *fn, size_t unsized, uintptr_t *lo, uintptr_t *hi)
{
    void *a;
    const ElfW(Sym) *sym = flamme_ocaml_dynsym(fn, &a);
    if (!sym)
        return;
    *lo = (uintptr_t)a;
    *hi = *lo + (sym->st_size ? sym->st_size : unsized);
}

/* caml_start_program's return to C (the same bytes in 5.1-5.5): the
 * exception handler it puts on the OCaml stack (lea handler(%rip),%r11),
 * which ends in a jmp to label 1; label 1 after lea 16(%rsp),%r10 (the
 * normal return's); add $16,%r10; mov c_stack(%r14),%rsp. */
static void find_start_exit(void)
{
    static const unsigned char lea_exn[] = {0x4c, 0x8d, 0x1d}, lea_r10[] = {0x4c, 0x8d, 0x54, 0x24, 0x10},
                               add_r10[] = {0x49, 0x83, 0xc2, 0x10},
                               to_c[] = {0x49, 0x8b, 0x66, DS_C_STACK};
    uintptr_t lo = 0, hi = 0;
    code_range("caml_start_program", 0, &lo, &hi);
    const unsigned char *c = (const unsigned char *)lo;
    size_t n = hi - lo;
    if (!lo || n > 4096)
        return;
    size_t e = find_bytes(c, 0, n, lea_exn, sizeof lea_exn);
    size_t l1 = find_bytes(c, 0, n, lea_r10, sizeof lea_r10) + sizeof lea_r10;
    size_t add = find_bytes(c, l1, n, add_r10, sizeof add_r10);
    size_t sw = find_bytes(c, add, n, to_c, sizeof to_c);
    if (e + 7 > n || l1 > n || add >= n || sw >= n)
        return;
    int32_t disp;
    memcpy(&disp, c + e + 3, sizeof disp);
    size_t h = e + 7 + (size_t)(intptr_t)disp, j;
    /* The handler: or $2,%rax; mov %rsp,%r10; jmp label1 (rel8). */
    for (j = h; j + 2 <= n && j < h + 16 && !(c[j] == 0xeb && j + 2 + (int8_t)c[j + 1] == l1); j++)
        ;
    if (h >= n || j + 2 > n || j >= h + 16)
        return;
    rt.start_exn_lo = lo + h;
    rt.start_exn_hi = lo + j + 2;
    rt.start_label1 = lo + l1;
    rt.start_add_at = lo + add;
    rt.start_switch_at = lo + sw;
}

int flamme_ocaml_resolve(void)
{
    void *state = dlsym(RTLD_DEFAULT, "caml_state");
    rt.present = state != NULL && dlsym(RTLD_DEFAULT, "caml_start_program") != NULL;
    const unsigned char *p = dlsym(RTLD_DEFAULT, "caml_c_call");
    rt.frame_pointers = !p ? -1 : p[0] == 0x55 && p[1] == 0x48 && p[2] == 0x89 && p[3] == 0xe5;
    if (rt.present) {
        /* For a TLS symbol dlsym returns the calling thread's instance. */
        struct tls_find f = {(uintptr_t)state, 0, 0};
        dl_iterate_phdr(find_tls_module, &f);
        rt.ti.modid = f.modid;
        rt.ti.offset = f.offset;
        /* Without a size, a bound short of the functions after it
         * (caml_call_gc's C call leaves the link's stack current, so a
         * bound too long does no harm). */
        code_range("caml_call_realloc_stack", 128, &rt.grow_lo, &rt.grow_hi);
        /* Without a size, a bound past its ~140 bytes (5.1-5.5): the check
         * it guards also needs rsi to name a stack. */
        code_range("caml_perform", 256, &rt.perform_lo, &rt.perform_hi);
        /* Without a size, a bound past its ~130 bytes (5.1-5.5). */
        code_range("caml_runstack", 192, &rt.runstack_lo, &rt.runstack_hi);
        find_parent_reg();
        find_start_exit();
        uintptr_t lo = (uintptr_t)dlsym(RTLD_DEFAULT, "caml_system__code_begin"),
                  hi = (uintptr_t)dlsym(RTLD_DEFAULT, "caml_system__code_end");
        if (lo && hi > lo && hi - lo < (1u << 20)) {
            rt.sys_code_lo = lo;
            rt.sys_code_hi = hi;
        }
    }
    return rt.present;
}

int flamme_ocaml_has_frame_pointers_sigsafe(void)
{
    return rt.frame_pointers;
}

void **flamme_ocaml_state_slot(void)
{
    if (!rt.ti.modid)
        return NULL;
    return (void **)__tls_get_addr(&rt.ti);
}

/* 1 while process_vm_readv works on ourselves; cleared (relaxed, monotonic
 * 1 -> 0, no ordering needed) when the kernel refuses it (a seccomp filter:
 * EPERM, or ENOSYS), after which reads go through the pipe below. Memory is
 * never read directly on the strength of a failed check. */
static atomic_int vm_read_ok = 1;
static pid_t self_pid; /* written before sampling starts (in a fork child that is
                          profiled, by flamme_safe_read_atfork_child) */

/* The fallback: write(2) copies from our memory into a pipe, failing with
 * EFAULT where it is not readable (guard pages included), and read(2) gets
 * the bytes back. One pipe for the process, taken by one handler at a time
 * (a busy pipe makes the read fail: the walk stops there). The write end is
 * published last (release; handlers acquire); -1 until made. */
static int fallback_rd = -1;
static _Atomic int fallback_wr = -1;
static atomic_flag fallback_busy = ATOMIC_FLAG_INIT;

/* process_vm_readv from ourselves, of the n pieces remote names into the
 * len bytes at dst: returns its result (bytes or -1, errno). */
static long vm_readv(void *dst, unsigned long len, const struct iovec *remote, unsigned long n)
{
    struct iovec local = {dst, len};
    return syscall(SYS_process_vm_readv, (long)self_pid, &local, 1UL, remote, n, 0UL);
}

/* The same for one piece. */
static long vm_read(void *dst, uintptr_t addr, unsigned long len)
{
    struct iovec remote = {(void *)addr, len};
    return vm_readv(dst, len, &remote, 1UL);
}

static pthread_mutex_t fallback_lock = PTHREAD_MUTEX_INITIALIZER;

void flamme_safe_read_prepare_fallback(void)
{
    if (atomic_load_explicit(&vm_read_ok, memory_order_relaxed) ||
        atomic_load_explicit(&fallback_wr, memory_order_relaxed) >= 0)
        return;
    pthread_mutex_lock(&fallback_lock);
    int p[2];
    if (atomic_load_explicit(&fallback_wr, memory_order_relaxed) < 0 &&
        pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
        fallback_rd = p[0];
        /* Pairs with the acquire load in pipe_read: fallback_rd is set. */
        atomic_store_explicit(&fallback_wr, p[1], memory_order_release);
    }
    pthread_mutex_unlock(&fallback_lock);
}

int flamme_safe_read_atfork_child(int follow)
{
    int quiet = flamme_mutex_reset_child(&fallback_lock);
    if (!follow)
        return quiet;
    /* Reads name the process itself: the child's pid now. The fallback
     * pipe is the parent's too (a copy of both ends): the child makes its
     * own. */
    self_pid = getpid();
    int wr = atomic_exchange_explicit(&fallback_wr, -1, memory_order_acq_rel);
    if (wr >= 0) {
        syscall(SYS_close, wr);
        syscall(SYS_close, fallback_rd);
        fallback_rd = -1;
        atomic_flag_clear(&fallback_busy);
        flamme_safe_read_prepare_fallback();
    }
    return quiet;
}

void flamme_safe_read_init(void)
{
    self_pid = getpid();
    uintptr_t word = 1, got = 0;
    if (vm_read(&got, (uintptr_t)&word, sizeof got) != (long)sizeof got &&
        (errno == EPERM || errno == ENOSYS)) {
        atomic_store_explicit(&vm_read_ok, 0, memory_order_relaxed);
        flamme_safe_read_prepare_fallback();
    }
}

/* The pipe copy (see above). Returns 0, or -1 if unreadable, the pipe is
 * busy or not made yet. */
static int pipe_read(void *dst, uintptr_t addr, unsigned long len)
{
    /* Pairs with the release store in flamme_safe_read_prepare_fallback. */
    int wr = atomic_load_explicit(&fallback_wr, memory_order_acquire);
    if (wr < 0 || atomic_flag_test_and_set_explicit(&fallback_busy, memory_order_acquire))
        return -1;
    int rc = 0;
    for (unsigned long done = 0; done < len && rc == 0;) {
        unsigned long n = len - done > 4096 ? 4096 : len - done; /* <= PIPE_BUF: all or nothing */
        /* Raw system calls: the agent's own read() wrapper is not for a handler. */
        long w = syscall(SYS_write, wr, (const char *)addr + done, n);
        if (w > 0) {
            long r = syscall(SYS_read, fallback_rd, (char *)dst + done, (size_t)w);
            if (r != w)
                rc = -1;
        }
        if (w != (long)n)
            rc = -1;
        done += n;
    }
    /* Pairs with the acquire test-and-set above. */
    atomic_flag_clear_explicit(&fallback_busy, memory_order_release);
    return rc;
}

int flamme_safe_read_sigsafe(void *dst, uintptr_t addr, unsigned long len)
{
    if (atomic_load_explicit(&vm_read_ok, memory_order_relaxed)) {
        long r = vm_read(dst, addr, len);
        if (r == (long)len)
            return 0;
        if (r >= 0 || (errno != ENOSYS && errno != EPERM))
            return -1;
        /* A filter installed since the start: the writer makes the pipe. */
        atomic_store_explicit(&vm_read_ok, 0, memory_order_relaxed);
    }
    return pipe_read(dst, addr, len);
}

/* Reads one word at addr, plainly or fault-tolerantly. Returns 0 or -1. */
static int read_word(uintptr_t *dst, uintptr_t addr, int direct)
{
    if (direct) {
        *dst = *(const uintptr_t *)addr;
        return 0;
    }
    return flamme_safe_read_sigsafe(dst, addr, sizeof *dst);
}

/* Checked reads of several words with one system call: iov[0..n) each
 * names 8 bytes, read into got[0..n). Returns how many were read, in
 * order (the call stops at the first unreadable one), or -1 where
 * process_vm_readv is refused (the caller reads one by one). */
static int readv_words(uintptr_t *got, const struct iovec *iov, int n)
{
    if (!atomic_load_explicit(&vm_read_ok, memory_order_relaxed))
        return -1;
    long r = vm_readv(got, (unsigned long)n * sizeof *got, iov, (unsigned long)n);
    return r < 0 ? (errno == EPERM || errno == ENOSYS ? -1 : 0) : (int)(r / (long)sizeof *got);
}

/* The stack whose descriptor is s, read plainly or checked: its range
 * (the whole block) and its handler's parent (0 where unreadable: the
 * chain ends there). Returns 0, or -1 if s does not look like a stack
 * descriptor or cannot be read. */
static int stack_at(uintptr_t s, int direct, struct flamme_range *r, uintptr_t *parent)
{
    uintptr_t handler;
    if ((s & 7) || read_word(&handler, s + SI_HANDLER, direct) != 0)
        return -1;
    if (handler <= s + SI_SIZE || handler - s > MAX_OCAML_STACK || (handler & 7))
        return -1;
    r->lo = s;
    r->hi = handler + SH_SIZE;
    if (read_word(parent, handler + SH_PARENT, direct) != 0)
        *parent = 0;
    return 0;
}

/* The guess's stacks from g[j] (whose descriptor is the chain's next) on,
 * checked with one system call: each must still have the handler the
 * guess has, and its parent must be the guess's next. Appends the stacks
 * confirmed to out (at most max) and sets *s to the last one's parent.
 * Returns how many (0: the caller reads the next stack itself). */
static int check_guess(struct flamme_ocaml_chain *c, const struct flamme_range *g, int ng, int j,
                       struct flamme_range *out, int max, uintptr_t *s)
{
    int k = ng - j;
    if (k > max)
        k = max;
    if (k > FLAMME_CHAIN_BATCH)
        k = FLAMME_CHAIN_BATCH;
    for (int i = 0; i < k; i++) {
        uintptr_t handler = g[j + i].hi - SH_SIZE;
        c->iov[2 * i] = (struct iovec){(void *)(g[j + i].lo + SI_HANDLER), sizeof(uintptr_t)};
        c->iov[2 * i + 1] = (struct iovec){(void *)(handler + SH_PARENT), sizeof(uintptr_t)};
    }
    int words = readv_words(c->got, c->iov, 2 * k), n = 0;
    for (int i = 0; i < k && 2 * i + 1 < words; i++) {
        /* The same handler: the same block, so the same range; the parent
         * was read where the guess's handler has it, so only now is it
         * this stack's. */
        if (c->got[2 * i] != g[j + i].hi - SH_SIZE)
            break;
        out[n++] = g[j + i];
        *s = c->got[2 * i + 1];
        if (j + i + 1 >= ng || *s != g[j + i + 1].lo)
            break;
    }
    return n;
}

/* Reads len bytes of the thread's system stack at addr: plainly in its
 * live part, checked below it. Returns 0, or -1 (outside the stack too). */
static int sys_read(const struct flamme_ocaml_chain *c, void *dst, uintptr_t addr, size_t len)
{
    if ((addr & 7) || addr < c->sys_lo || addr > c->sys_hi - len)
        return -1;
    if (addr >= c->live_lo) {
        for (size_t i = 0; i < len / 8; i++)
            ((uintptr_t *)dst)[i] = ((const uintptr_t *)addr)[i];
        return 0;
    }
    return flamme_safe_read_sigsafe(dst, addr, len);
}

/* The parent a callback took away from the stack it runs on
 * (runtime/callback.c, alloc_and_clear_stack_parent: a continuation block,
 * the parent as Val_ptr in its first field, and Val_long 0 in its second
 * from 5.2 on, registered alone in a roots block of caml_callback*_exn's C
 * frame). Looks through the local roots from c->roots on (the blocks on
 * the system stack, the continuation with a checked read) and moves
 * c->roots past the block it took. Returns the parent's descriptor, or 0. */
static uintptr_t stashed_parent(struct flamme_ocaml_chain *c)
{
    for (int k = 0; k < 16 && c->roots; k++) {
        uintptr_t blk[4], v, cont[3];
        if (sys_read(c, blk, c->roots, sizeof blk) != 0) {
            c->roots = 0;
            return 0;
        }
        c->roots = blk[RB_NEXT / 8];
        if (blk[RB_NTABLES / 8] != 1 || blk[RB_NITEMS / 8] != 1 ||
            sys_read(c, &v, blk[RB_TABLE0 / 8], sizeof v) != 0 || (v & 7) || v < 4096 ||
            flamme_safe_read_sigsafe(cont, v - 8, sizeof cont) != 0)
            continue;
        uintptr_t wosize = cont[0] >> 10;
        if ((cont[0] & 0xff) == CONT_TAG && (cont[1] & 1) &&
            (wosize == 1 || (wosize == 2 && cont[2] == 1)))
            return cont[1] - 1;
    }
    return 0;
}

/* The parent of stack f, whose handler says it has none: f is the chain's
 * root, or a callback runs on it. The roots say which, unless the callback
 * is in the few instructions where the parent is gone but not yet (or no
 * longer) registered; then the parent f had in the last sample's chain
 * (g[0..ng)) stands: a stack the runtime resumes always gets a parent, so
 * a stack that had one and has none is in a callback. Returns the
 * parent's descriptor, or 0. */
static uintptr_t lost_parent(struct flamme_ocaml_chain *c, const struct flamme_range *g, int ng,
                             uintptr_t f)
{
    uintptr_t p = c->roots ? stashed_parent(c) : 0;
    if (!p) {
        int j = 0;
        while (j < ng && g[j].lo != f)
            j++;
        p = j + 1 < ng ? g[j + 1].lo : 0;
    }
    /* A stack already in the chain would make it a loop. */
    for (int i = 0; p && i < c->n[c->w]; i++)
        if (c->r[c->w][i].lo == p)
            return 0;
    return p;
}

/* Follows the chain from descriptor s: each stack's range, then its
 * handler's parent, the checked reads made for the stacks the last sample
 * found together (chain may be NULL) and the ones it finds remembered.
 * Stops after max stacks (*more: the next descriptor) or at the end or at
 * anything that is not a stack descriptor (*more: 0). */
static int chain_ranges(uintptr_t s, int direct, struct flamme_ocaml_chain *c,
                        struct flamme_range *out, int max, uintptr_t *more)
{
    const struct flamme_range *g = c ? c->r[c->w ^ 1] : NULL;
    int ng = c && !direct ? c->n[c->w ^ 1] : 0, n = 0, hint = 0;
    *more = 0;
    while (s) {
        if (n == max) {
            *more = s;
            break;
        }
        int got = 0;
        for (int i = 0; i < ng; i++) {
            int j = (hint + i) % ng;
            if (g[j].lo == s) {
                got = check_guess(c, g, ng, j, out + n, max - n, &s);
                hint = j + got;
                break;
            }
        }
        if (!got) {
            uintptr_t parent;
            if (stack_at(s, direct, out + n, &parent) != 0)
                break;
            got = 1;
            s = parent;
        }
        for (int i = 0; c && i < got && c->n[c->w] < FLAMME_CHAIN_MAX; i++)
            c->r[c->w][c->n[c->w]++] = out[n + i];
        n += got;
        if (!s && c)
            s = lost_parent(c, c->r[c->w ^ 1], c->n[c->w ^ 1], out[n - 1].lo);
    }
    return n;
}

/* The return address of the call made on switching to the newest C-stack
 * link c_stack: the word just below the link. Read directly, and only when
 * the thread, interrupted with sp on its system stack [sys_lo, sys_hi), is
 * deeper than the link: that call's frame is then live. Else 0. */
static uintptr_t link_call_ra(uintptr_t c_stack, uintptr_t sys_lo, uintptr_t sys_hi, uintptr_t sp)
{
    if (sp < sys_lo || sp >= sys_hi || c_stack < sys_lo || c_stack >= sys_hi || sp >= c_stack - 8)
        return 0;
    return *(const uintptr_t *)(c_stack - 8);
}

/* The stack the thread's OCaml frames are on, current being what the domain
 * state names. They differ while caml_try_realloc_stack (fiber.c) finishes:
 * it points the c_stack_links at the new stack, frees the old one (an
 * munmap for a large stack, so samples land there) and only then names the
 * new one current. The walk through caml_call_realloc_stack follows the
 * newest link onto the new stack, so the chain must start there. The link
 * is read directly (it is on the thread's system stack, c_stack checked by
 * the caller) but trusted only when its call (link_call_ra) is
 * caml_call_realloc_stack's: elsewhere a link's stack may be stale
 * (caml_runstack frees a finished fiber's stack on the link without
 * filling it in). Returns the stack to start the chain from. */
static uintptr_t growing_stack(uintptr_t c_stack, uintptr_t sys_lo, uintptr_t sys_hi, uintptr_t sp,
                               uintptr_t current)
{
    uintptr_t s = *(const uintptr_t *)(c_stack + CSL_STACK);
    if (!s || s == current || !rt.grow_lo)
        return current;
    uintptr_t ra = link_call_ra(c_stack, sys_lo, sys_hi, sp);
    return ra >= rt.grow_lo && ra < rt.grow_hi ? s : current;
}

/* caml_perform (amd64.S; caml_reperform jumps into it) leaves the
 * performing fiber for its parent with SWITCH_OCAML_STACKS, which names the
 * parent current (Caml_state->current_stack) before it moves rsp there,
 * and with frame pointers restores rbp (its frame on the fiber) only after:
 * interrupted in between, the walk starts on, or goes through, a stack the
 * chain from current does not hold, and went on by checked copies until
 * their allowance ran out (a [broken] stack of the fiber's frames under
 * caml_perform: 0.01-0.24% of tests/e2e/stress's weight in some runs, 1%
 * in a loaded CI run). There the performer is in rsi (5.1 to 5.4, with
 * frame pointers or not), and its handler still names current as parent
 * (cleared once rbp is restored). Only at a pc inside caml_perform; the
 * candidate s (rsi: any value) is read with checked reads. Returns 1 and
 * sets *r when s is a stack descriptor whose parent is current, else 0. */
static int performer_range(uintptr_t pc, uintptr_t s, uintptr_t current, struct flamme_range *r)
{
    uintptr_t parent;
    return pc >= rt.perform_lo && pc < rt.perform_hi && s && current && s != current &&
           stack_at(s, 0, r, &parent) == 0 && parent == current;
}

int flamme_ocaml_stable_sigsafe(const void *ds, uintptr_t sys_lo, uintptr_t sys_hi, uintptr_t sp)
{
    if (!ds || !rt.sys_code_lo)
        return 0;
    uintptr_t c_stack = *(const uintptr_t *)((const char *)ds + DS_C_STACK);
    uintptr_t ra = link_call_ra(c_stack, sys_lo, sys_hi, sp);
    return ra && (ra < rt.sys_code_lo || ra >= rt.sys_code_hi);
}

int flamme_ocaml_ranges_sigsafe(const void *ds, uintptr_t sys_lo, uintptr_t sys_hi, uintptr_t sp,
                                int direct, uintptr_t pc, uintptr_t rsi,
                                struct flamme_ocaml_chain *chain, struct flamme_range *out, int max,
                                int32_t *domain, uintptr_t *more)
{
    *more = 0;
    if (chain) {
        /* What the last sample found becomes the guess. */
        chain->w ^= 1;
        chain->n[chain->w] = 0;
    }
    if (!ds)
        return 0;
    /* The domain state is never freed while its thread runs, so read it directly. */
    const char *d = ds;
    /* The id is right even when the stacks are not usable (domain start-up
     * and teardown run C code under the domain's state). */
    *domain = *(const int32_t *)(d + flamme_ocaml_ds_id);
    uintptr_t c_stack = *(const uintptr_t *)(d + DS_C_STACK);
    if (c_stack < sys_lo || c_stack >= sys_hi)
        return 0;
    if (chain) {
        /* Where a parent taken away by a callback may be (lost_parent). */
        chain->sys_lo = sys_lo;
        chain->sys_hi = sys_hi;
        chain->live_lo = sp >= sys_lo && sp < sys_hi ? sp : c_stack;
        chain->roots = *(const uintptr_t *)(d + flamme_ocaml_ds_local_roots);
    }
    uintptr_t current = *(const uintptr_t *)(d + DS_CURRENT_STACK);
    /* On an OCaml stack the thread is not in caml_try_realloc_stack. */
    if (!direct)
        current = growing_stack(c_stack, sys_lo, sys_hi, sp, current);
    int n = chain_ranges(current, direct, chain, out, max, more);
    struct flamme_range p;
    /* The performer first, then the chain from its parent on (not with the
     * ranges full: eight nested handlers, and the window). */
    if (n > 0 && n < max && (sp < sys_lo || sp >= sys_hi) && performer_range(pc, rsi, current, &p)) {
        for (int i = n; i > 0; i--)
            out[i] = out[i - 1];
        out[0] = p;
        n++;
    }
    return n;
}

int flamme_ocaml_more_ranges_sigsafe(uintptr_t *more, int direct, struct flamme_ocaml_chain *chain,
                                     struct flamme_range *out, int max)
{
    return chain_ranges(*more, direct, chain, out, max, more);
}

/* caml_runstack (amd64.S, 5.1-5.5) puts two words under the fiber's
 * handler, and two under them: the link to the previous exception handler
 * and its own fiber_exn_handler's address, which an exception leaving the
 * fiber's computation pops (caml_raise_exn's ret, or the inlined raise of
 * code built without -g: pop the link, pop the address, jump to it). */
#define RUNSTACK_EXN_BELOW 32 /* the exception handler's distance under the handler */
#define RUNSTACK_EXN_PC 24    /* where fiber_exn_handler's address is, under the handler */

/* caml_runstack's frame on the parent stack, from the stack pointer it
 * saved there: the return address, and with frame pointers (its
 * ENTER_FUNCTION) the caller's rbp under it. */
static void runstack_frame(int *cfa_add, int *rbp_at)
{
    *cfa_add = rt.frame_pointers == 1 ? 16 : 8;
    *rbp_at = rt.frame_pointers == 1 ? -16 : 0;
}

int flamme_ocaml_fiber_bottom_sigsafe(const struct flamme_range *r, uintptr_t sp, uintptr_t pc,
                                      uintptr_t *slot, int *mid, int *cfa_add, int *rbp_at,
                                      uintptr_t *ra)
{
    uintptr_t handler = r->hi - SH_SIZE, parent, exn_pc;
    if (rt.frame_pointers < 0 || !rt.runstack_lo || r->hi - r->lo < SH_SIZE + RUNSTACK_EXN_BELOW ||
        sp < handler - RUNSTACK_EXN_BELOW || sp > handler || (sp & 7))
        return 0;
    /* The range is one of the walk's known stacks: read plainly. A stack
     * without a parent (the domain's main one) ends at caml_start_program,
     * whose own rows hold there. */
    parent = *(const uintptr_t *)(handler + SH_PARENT);
    if (!parent)
        return 0;
    *slot = handler + SH_PARENT;
    *mid = SI_SP;
    runstack_frame(cfa_add, rbp_at);
    *ra = 0;
    if (pc < rt.runstack_lo || pc >= rt.runstack_hi) {
        exn_pc = *(const uintptr_t *)(handler - RUNSTACK_EXN_PC);
        if (exn_pc > rt.runstack_lo && exn_pc < rt.runstack_hi)
            *ra = exn_pc;
    }
    return 1;
}

int flamme_ocaml_runstack_parent_sigsafe(uintptr_t pc, int *dwreg, int *off, int *cfa_add,
                                         int *rbp_at)
{
    if (rt.frame_pointers < 0 || pc < rt.parent_reg_lo || pc >= rt.parent_reg_hi)
        return 0;
    *dwreg = 10; /* r10 */
    *off = SI_SP;
    runstack_frame(cfa_add, rbp_at);
    return 1;
}

int flamme_ocaml_inline_raise_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t *trap)
{
    /* pop exn_handler(%r14); pop %r11; jmp *%r11: what ocamlopt (5.1-5.5)
     * emits for raise_notrace, and for raise without -g, after
     * mov exn_handler(%r14),%rsp (rsp at the trap: the previous handler's
     * link, then the handler's pc). */
    static const unsigned char seq[] = {0x41, 0x8f, 0x46, DS_EXN_HANDLER, 0x41, 0x5b, 0x41, 0xff, 0xe3};
    static const int at[] = {0, 4, 6}; /* the instructions' offsets in seq */
    const unsigned char *c = (const unsigned char *)pc;
    for (int k = 0; k < 3; k++) {
        /* The bytes before pc are read only within its page, and each
         * byte only after the ones before it matched (code that is not
         * this sequence may end right after pc). */
        if ((pc & 0xfff) < (uintptr_t)at[k])
            continue;
        const unsigned char *from = c - at[k];
        size_t i = 0;
        while (i < sizeof seq && from[i] == seq[i])
            i++;
        if (i == sizeof seq) {
            *trap = sp - 8 * (uintptr_t)k;
            return 1;
        }
    }
    return 0;
}

int flamme_ocaml_exn_entry_sigsafe(uintptr_t pc)
{
    return rt.start_exn_lo && pc == rt.start_exn_lo;
}

int flamme_ocaml_callback_exit_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t r10, int r10_known,
                                       uintptr_t *slot, uintptr_t *resume)
{
    if (!rt.start_switch_at)
        return 0;
    if (pc >= rt.start_exn_lo && pc < rt.start_exn_hi)
        *slot = sp; /* the handler popped: rsp at the C stack pointer's word */
    else if (r10_known && pc >= rt.start_label1 && pc <= rt.start_add_at)
        *slot = r10;
    else if (r10_known && pc > rt.start_add_at && pc <= rt.start_switch_at)
        *slot = r10 - 16;
    else
        return 0;
    *resume = rt.start_switch_at + 4;
    return 1;
}

uintptr_t flamme_ocaml_parent_slot_sigsafe(const struct flamme_range *r)
{
    return r->hi - SH_SIZE + SH_PARENT;
}

int flamme_ocaml_range_live_sigsafe(const struct flamme_range *r)
{
    uintptr_t handler;
    if (flamme_safe_read_sigsafe(&handler, r->lo + SI_HANDLER, sizeof handler) != 0)
        return 0;
    return handler + SH_SIZE == r->hi;
}

int32_t flamme_ocaml_domain_of_current_thread(void)
{
    void **slot = flamme_ocaml_state_slot();
    if (!slot || !*slot)
        return -1;
    return *(const int32_t *)((const char *)*slot + flamme_ocaml_ds_id);
}
