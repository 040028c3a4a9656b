/* seccomp_stubs.c — C side of tests/signal/seccomp.ml: a seccomp filter
 * that refuses process_vm_readv (EPERM), as container profiles do, and a
 * C function that runs with a garbage frame pointer (hand-written code
 * may use rbp as a general register). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <caml/memory.h>
#include <caml/mlvalues.h>

/* Installs the filter on every thread of the process. Returns 0 or errno. */
value seccomp_deny_vm_readv(value unit)
{
    (void)unit;
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return Val_int(errno);
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0)
        return Val_int(errno);
    return Val_int(0);
}

/* Spins n times with rbp pointing at unmapped memory (0x10). */
long garbage_rbp_spin(long n);
__asm__(".text\n"
        ".globl garbage_rbp_spin\n"
        ".type garbage_rbp_spin, @function\n"
        "garbage_rbp_spin:\n"
        "  push %rbp\n"
        "  mov $0x10, %rbp\n"
        "  mov %rdi, %rax\n"
        "1: dec %rax\n"
        "  jnz 1b\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size garbage_rbp_spin, .-garbage_rbp_spin\n");

value seccomp_spin(value n)
{
    return Val_long(garbage_rbp_spin(Long_val(n)));
}
