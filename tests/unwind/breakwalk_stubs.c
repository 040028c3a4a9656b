/* tests/unwind/breakwalk_stubs.c — C stubs built to break stack walks, for
 * tests/unwind/breakwalk.ml. They are assembly without call-frame
 * information, and their stack cannot be derived from their code either
 * (writer/cfi_synth.c): each realigns rsp (and $-32, as code with aligned
 * vector spills does), saving the old one in rbx. So a walker can only use
 * rbp there, and rbp is garbage:
 *   brk_spin_fake: rbp points at a forged frame [0, unwind_decoy + 1], so a
 *     frame-pointer walk "ends cleanly" at an ordinary function;
 *   brk_spin_zero: rbp = 0, a "clean end" right at the leaf;
 *   brk_spin_junk: rbp = an unmapped address.
 * Each spins for its argument (an OCaml tagged int) iterations and restores
 * rbp before returning. Each sets up a proper frame first (push %rbp; mov
 * %rsp,%rbp) and restores rbp right before ret, as compiled code does: an
 * instruction between the push and the mov, or between the pop and the
 * ret, would be a point where no walker knows the caller (seen: 1 sample in
 * ~300 at such a point came out whole with brk_spin_fake's caller skipped).
 * The forged frame is made with lea, not a second mov %rsp,%rbp, which the
 * walker's entry fix-up would take for the prologue's. */
#include <caml/mlvalues.h>

/* Never called: its address is the forged frame's return address. */
__attribute__((noinline, used)) void unwind_decoy(void)
{
    __asm__ volatile("" ::: "memory");
}

__asm__(".text\n"
        ".globl brk_spin_fake\n.type brk_spin_fake,@function\n"
        "brk_spin_fake:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  push %rbx\n"
        "  mov %rsp, %rbx\n"
        "  and $-32, %rsp\n"
        "  lea unwind_decoy+1(%rip), %rax\n"
        "  push %rax\n"
        "  push $0\n"
        "  lea (%rsp), %rbp\n"
        "1: sub $1, %rdi\n"
        "  jnz 1b\n"
        "  mov $1, %eax\n"
        "  mov %rbx, %rsp\n"
        "  pop %rbx\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size brk_spin_fake, .-brk_spin_fake\n"
        ".globl brk_spin_zero\n.type brk_spin_zero,@function\n"
        "brk_spin_zero:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  push %rbx\n"
        "  mov %rsp, %rbx\n"
        "  and $-32, %rsp\n"
        "  xor %ebp, %ebp\n"
        "1: sub $1, %rdi\n"
        "  jnz 1b\n"
        "  mov $1, %eax\n"
        "  mov %rbx, %rsp\n"
        "  pop %rbx\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size brk_spin_zero, .-brk_spin_zero\n"
        ".globl brk_spin_junk\n.type brk_spin_junk,@function\n"
        "brk_spin_junk:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  push %rbx\n"
        "  mov %rsp, %rbx\n"
        "  and $-32, %rsp\n"
        "  movabs $0x00007ff0deadbee8, %rbp\n"
        "1: sub $1, %rdi\n"
        "  jnz 1b\n"
        "  mov $1, %eax\n"
        "  mov %rbx, %rsp\n"
        "  pop %rbx\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size brk_spin_junk, .-brk_spin_junk\n");
