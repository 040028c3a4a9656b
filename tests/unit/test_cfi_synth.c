/*
 * tests/unit/test_cfi_synth.c — rows derived from the code of functions
 * without an FDE (writer/cfi_synth.c):
 *  - gcc's crtstuff functions, as gcc 12 compiles them into every
 *    executable (the bytes of deregister_tm_clones, register_tm_clones
 *    and __do_global_dtors_aux): a row at each change of the stack, none
 *    for the padding between them;
 *  - hand-written stubs: pushes of callee-saved registers, a frame pointer
 *    with leave, a loop, a call, a tail call;
 *  - code whose stack cannot be known gets no rows: rsp realigned or moved
 *    by a register, a callee-saved register written before it is saved, a
 *    ret with something left on the stack, paths that meet with different
 *    stacks, an instruction outside the subset, a path off the end;
 *  - this test binary's own crtstuff (gcc links it in without an FDE):
 *    after flamme_cfi_add_module the walker finds a caller through
 *    __do_global_dtors_aux from before and after its push %rbp;
 *  - a stripped library's (libz): no symbol names its crtstuff or _fini,
 *    their rows come from its .fini_array and .fini section;
 *  - against the compiler's own CFI: the functions of libc and libz (which
 *    have FDEs) are derived as if they had none, and wherever the decoder
 *    gives rows, they agree with the .eh_frame rows at every byte (CFA
 *    offset, and the slot of each register the decoder says is saved).
 */
#include "tests/unit/check.h"
#include "tests/unit/maps.h"
#include "tests/unit/no_runtime.h"
#include "agent/cfi.h"
#include "agent/walk.h"
#include "writer/cfi_build.h"
#include "writer/cfi_synth.h"
#include "writer/elf.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAXROWS 64

struct rows {
    int n;
    struct flamme_synth_row r[MAXROWS];
};

/* Rows of a real function: up to a row per instruction. */
struct bigrows {
    int n;
    struct flamme_synth_row r[16384];
};

static int collect_big(void *ctx, const struct flamme_synth_row *row)
{
    struct bigrows *rs = ctx;
    if (rs->n == (int)(sizeof rs->r / sizeof rs->r[0]))
        return -1;
    rs->r[rs->n++] = *row;
    return 0;
}

static int collect(void *ctx, const struct flamme_synth_row *row)
{
    struct rows *rs = ctx;
    if (rs->n == MAXROWS)
        return -1;
    rs->r[rs->n++] = *row;
    return 0;
}

static long derive(const uint8_t *code, size_t len, struct rows *rs)
{
    memset(rs, 0, sizeof *rs);
    return flamme_cfi_synth_function(code, len, 0x1000, collect, rs);
}

/* Row k is at 0x1000 + off with CFA = rsp + rsp_off (0: no rule) and rbp
 * saved at CFA + 8 * rbp (0: unchanged). */
static int row_is(const struct rows *rs, int k, uint64_t off, int rsp_off, int rbp)
{
    if (k >= rs->n) {
        fprintf(stderr, "  row %d missing (%d rows)\n", k, rs->n);
        return 0;
    }
    const struct flamme_synth_row *r = &rs->r[k];
    if (r->pc != 0x1000 + off || r->rsp_off != rsp_off || r->save[0] != rbp) {
        fprintf(stderr, "  row %d: pc +%#llx rsp+%d rbp@%d, expected +%#llx rsp+%d rbp@%d\n", k,
                (unsigned long long)(r->pc - 0x1000), r->rsp_off, r->save[0],
                (unsigned long long)off, rsp_off, rbp);
        return 0;
    }
    return 1;
}

/* gcc 12's crtstuff (Debian 12), as linked into OCaml executables. */
static const uint8_t dtors_aux[] = {
    0xf3, 0x0f, 0x1e, 0xfa,                         /* 00 endbr64 */
    0x80, 0x3d, 0x8d, 0x74, 0x0f, 0x00, 0x00,       /* 04 cmpb $0,completed(%rip) */
    0x75, 0x2b,                                     /* 0b jne 38 */
    0x55,                                           /* 0d push %rbp */
    0x48, 0x83, 0x3d, 0x9a, 0x6f, 0x0b, 0x00, 0x00, /* 0e cmpq $0,__cxa_finalize(%rip) */
    0x48, 0x89, 0xe5,                               /* 16 mov %rsp,%rbp */
    0x74, 0x0c,                                     /* 19 je 27 */
    0x48, 0x8b, 0x3d, 0x56, 0x77, 0x0b, 0x00,       /* 1b mov __dso_handle(%rip),%rdi */
    0xe8, 0xe9, 0xfe, 0xff, 0xff,                   /* 22 call __cxa_finalize */
    0xe8, 0x64, 0xff, 0xff, 0xff,                   /* 27 call deregister_tm_clones */
    0xc6, 0x05, 0x65, 0x74, 0x0f, 0x00, 0x01,       /* 2c movb $1,completed(%rip) */
    0x5d,                                           /* 33 pop %rbp */
    0xc3,                                           /* 34 ret */
    0x0f, 0x1f, 0x00,                               /* 35 nopl (%rax) */
    0xc3,                                           /* 38 ret */
    0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00,       /* 39 nopl 0(%rax) */
};

static const uint8_t deregister[] = {
    0x48, 0x8d, 0x3d, 0xe9, 0x74, 0x0f, 0x00, /* 00 lea __TMC_END__(%rip),%rdi */
    0x48, 0x8d, 0x05, 0xe2, 0x74, 0x0f, 0x00, /* 07 lea __TMC_END__(%rip),%rax */
    0x48, 0x39, 0xf8,                         /* 0e cmp %rdi,%rax */
    0x74, 0x15,                               /* 11 je 28 */
    0x48, 0x8b, 0x05, 0xf6, 0x6f, 0x0b, 0x00, /* 13 mov _ITM_deregister...(%rip),%rax */
    0x48, 0x85, 0xc0,                         /* 1a test %rax,%rax */
    0x74, 0x09,                               /* 1d je 28 */
    0xff, 0xe0,                               /* 1f jmp *%rax: a tail call */
    0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00, /* 21 nopl 0(%rax) */
    0xc3,                                     /* 28 ret */
    0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00, /* 29 nopl 0(%rax) */
};

static const uint8_t register_tm[] = {
    0x48, 0x8d, 0x3d, 0xb9, 0x74, 0x0f, 0x00, /* 00 lea __TMC_END__(%rip),%rdi */
    0x48, 0x8d, 0x35, 0xb2, 0x74, 0x0f, 0x00, /* 07 lea __TMC_END__(%rip),%rsi */
    0x48, 0x29, 0xfe,                         /* 0e sub %rdi,%rsi */
    0x48, 0x89, 0xf0,                         /* 11 mov %rsi,%rax */
    0x48, 0xc1, 0xee, 0x3f,                   /* 14 shr $0x3f,%rsi */
    0x48, 0xc1, 0xf8, 0x03,                   /* 18 sar $0x3,%rax */
    0x48, 0x01, 0xc6,                         /* 1c add %rax,%rsi */
    0x48, 0xd1, 0xfe,                         /* 1f sar %rsi */
    0x74, 0x14,                               /* 22 je 38 */
    0x48, 0x8b, 0x05, 0xbd, 0x6f, 0x0b, 0x00, /* 24 mov _ITM_registerTM...(%rip),%rax */
    0x48, 0x85, 0xc0,                         /* 2b test %rax,%rax */
    0x74, 0x08,                               /* 2e je 38 */
    0xff, 0xe0,                               /* 30 jmp *%rax */
    0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00,       /* 32 nopw 0(%rax,%rax,1) */
    0xc3,                                     /* 38 ret */
    0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00, /* 39 nopl 0(%rax) */
};

TEST(crtstuff_rows)
{
    struct rows rs;
    CHECK(derive(dtors_aux, sizeof dtors_aux, &rs) == 6);
    CHECK(row_is(&rs, 0, 0x00, 8, 0));   /* before the push: the caller at rsp */
    CHECK(row_is(&rs, 1, 0x0e, 16, -2)); /* pushed: rbp saved at CFA - 16 */
    CHECK(row_is(&rs, 2, 0x34, 8, 0));   /* popped: ret */
    CHECK(row_is(&rs, 3, 0x35, 0, 0));   /* padding, never run */
    CHECK(row_is(&rs, 4, 0x38, 8, 0));   /* the early ret, reached by jne */
    CHECK(row_is(&rs, 5, 0x39, 0, 0));
    CHECK(derive(deregister, sizeof deregister, &rs) == 4);
    CHECK(row_is(&rs, 0, 0x00, 8, 0));
    CHECK(row_is(&rs, 1, 0x21, 0, 0));
    CHECK(row_is(&rs, 2, 0x28, 8, 0));
    CHECK(row_is(&rs, 3, 0x29, 0, 0));
    CHECK(derive(register_tm, sizeof register_tm, &rs) == 4);
    CHECK(row_is(&rs, 0, 0x00, 8, 0));
    CHECK(row_is(&rs, 1, 0x32, 0, 0));
    CHECK(row_is(&rs, 2, 0x38, 8, 0));
    CHECK(row_is(&rs, 3, 0x39, 0, 0));
}

TEST(stub_rows)
{
    /* push %rbx; push %r12; sub $0x18,%rsp; mov %rdi,%rbx; 1: dec %rbx;
     * jnz 1b; call f; add $0x18,%rsp; pop %r12; pop %rbx; jmp g */
    static const uint8_t pushes[] = {
        0x53, 0x41, 0x54, 0x48, 0x83, 0xec, 0x18, 0x48, 0x89, 0xfb, 0x48, 0xff, 0xcb,
        0x75, 0xfb, 0xe8, 0, 0, 0, 0, 0x48, 0x83, 0xc4, 0x18, 0x41, 0x5c, 0x5b, 0xe9,
        0x10, 0, 0, 0,
    };
    struct rows rs;
    CHECK(derive(pushes, sizeof pushes, &rs) == 8);
    CHECK(row_is(&rs, 0, 0x00, 8, 0));
    CHECK(row_is(&rs, 1, 0x01, 16, 0));
    CHECK(rs.r[1].save[1] == -2); /* rbx at CFA - 16 */
    CHECK(row_is(&rs, 2, 0x03, 24, 0));
    CHECK(rs.r[2].save[1] == -2 && rs.r[2].save[2] == -3); /* r12 at CFA - 24 */
    CHECK(row_is(&rs, 3, 0x07, 48, 0));                    /* the loop and the call */
    CHECK(row_is(&rs, 4, 0x18, 24, 0));
    CHECK(row_is(&rs, 5, 0x1a, 16, 0));
    CHECK(rs.r[5].save[1] == -2 && rs.r[5].save[2] == 0);
    CHECK(row_is(&rs, 6, 0x1b, 8, 0)); /* the tail jump: as at the entry */
    CHECK(rs.r[6].save[1] == 0);
    CHECK(row_is(&rs, 7, 0x20, 0, 0)); /* the table ends after the jump */

    /* push %rbp; mov %rsp,%rbp; sub $0x20,%rsp; mov %eax,-4(%rbp);
     * leave; ret */
    static const uint8_t frame[] = {
        0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20, 0x89, 0x45, 0xfc, 0xc9, 0xc3,
    };
    CHECK(derive(frame, sizeof frame, &rs) == 5);
    CHECK(row_is(&rs, 0, 0x00, 8, 0));
    CHECK(row_is(&rs, 1, 0x01, 16, -2));
    CHECK(row_is(&rs, 2, 0x08, 48, -2));
    CHECK(row_is(&rs, 3, 0x0c, 8, 0)); /* after leave */
    CHECK(row_is(&rs, 4, 0x0d, 0, 0));
}

TEST(refused)
{
    struct rows rs;
    /* push %rbp; mov %rsp,%rbp; and $-16,%rsp; leave; ret: realigned */
    static const uint8_t realign[] = { 0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xe4, 0xf0, 0xc9, 0xc3 };
    CHECK(derive(realign, sizeof realign, &rs) == 0 && rs.n == 0);
    /* sub %rax,%rsp; ret */
    static const uint8_t byreg[] = { 0x48, 0x29, 0xc4, 0xc3 };
    CHECK(derive(byreg, sizeof byreg, &rs) == 0);
    /* mov $1,%ebx; ret: the caller's rbx is gone */
    static const uint8_t clobber[] = { 0xbb, 1, 0, 0, 0, 0xc3 };
    CHECK(derive(clobber, sizeof clobber, &rs) == 0);
    /* the same after push %rbx ... pop %rbx is fine */
    static const uint8_t saved[] = { 0x53, 0xbb, 1, 0, 0, 0, 0x5b, 0xc3 };
    CHECK(derive(saved, sizeof saved, &rs) == 4);
    /* push %rbx; ret */
    static const uint8_t left[] = { 0x53, 0xc3 };
    CHECK(derive(left, sizeof left, &rs) == 0);
    /* test %edi,%edi; je 1f; push %rax; 1: pop %rax; ret: paths disagree */
    static const uint8_t joins[] = { 0x85, 0xff, 0x74, 0x01, 0x50, 0x58, 0xc3 };
    CHECK(derive(joins, sizeof joins, &rs) == 0);
    /* pshufb (outside the subset); ret */
    static const uint8_t unknown[] = { 0x66, 0x0f, 0x38, 0x00, 0xc1, 0xc3 };
    CHECK(derive(unknown, sizeof unknown, &rs) == 0);
    /* inc %eax with no ret before the end */
    static const uint8_t offend[] = { 0xff, 0xc0 };
    CHECK(derive(offend, sizeof offend, &rs) == 0);
    /* test %edi,%edi; je into the middle of mov $0xc3,%eax; ret: two
     * decodings of one byte */
    static const uint8_t overlap[] = { 0x85, 0xff, 0x74, 0x01, 0xb8, 0xc3, 0, 0, 0, 0xc3 };
    CHECK(derive(overlap, sizeof overlap, &rs) == 0);
    /* truncated instruction */
    static const uint8_t cut[] = { 0x48, 0x8b };
    CHECK(derive(cut, sizeof cut, &rs) == 0);
}

/* Bytes of random garbage never crash the decoder, never run past the
 * code, and any rows they get are ascending and within it. */
TEST(garbage)
{
    uint64_t seed = 0x5eed5eedu;
    uint8_t code[96];
    int derived = 0;
    for (int round = 0; round < 20000; round++) {
        for (size_t i = 0; i < sizeof code; i++)
            code[i] = (uint8_t)check_xorshift(&seed);
        struct rows rs;
        long n = derive(code, 1 + round % sizeof code, &rs);
        CHECK(n >= 0 && n == rs.n);
        for (int k = 0; k < rs.n; k++) {
            CHECK(rs.r[k].pc >= 0x1000 && rs.r[k].pc <= 0x1000 + 1 + round % sizeof code);
            CHECK(k == 0 || rs.r[k].pc > rs.r[k - 1].pc);
            CHECK(rs.r[k].rsp_off == 0 || rs.r[k].rsp_off >= 8);
        }
        derived += n > 0;
    }
    printf("  info: %d of 20000 random byte strings got rows\n", derived);
}

/* The link-time address of local symbol name in the executable at path
 * (from .symtab), or 0. */
static uint64_t local_sym(const char *path, const char *name, uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct flamme_elf el;
    uint64_t v = 0;
    if (fd < 0 || flamme_elf_open_fd(&el, fd) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    for (size_t i = 0; i < el.shnum && !v; i++) {
        const Elf64_Shdr *sh = &el.sh[i];
        if (sh->sh_type != SHT_SYMTAB || sh->sh_link >= el.shnum)
            continue;
        const Elf64_Shdr *str = &el.sh[sh->sh_link];
        char *names = flamme_elf_copy(&el, str->sh_offset, str->sh_size, 1u << 26);
        Elf64_Sym *syms = malloc(sh->sh_size);
        if (names && syms && flamme_elf_read(&el, sh->sh_offset, syms, sh->sh_size) == 0)
            for (size_t k = 0; k < sh->sh_size / sizeof *syms; k++)
                if (syms[k].st_name < str->sh_size && strcmp(names + syms[k].st_name, name) == 0 &&
                    ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC) {
                    v = syms[k].st_value;
                    *size = syms[k].st_size;
                }
        free(names);
        free(syms);
    }
    flamme_elf_close(&el);
    close(fd);
    return v;
}

/* A walk from inside __do_global_dtors_aux, with the stack a call into it
 * leaves (and its push %rbp), reaches the return address above it. */
TEST(walk_through_crtstuff)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    uint64_t lo = 0, hi = 0, bias = 0, size = 0;
    struct link_map *lm = _r_debug.r_map; /* the executable first */
    bias = lm ? lm->l_addr : 0;
    CHECK(n > 0 && exec_mapping_of((uintptr_t)&local_sym, &lo, &hi));
    if (n <= 0)
        return;
    exe[n] = 0;
    uint64_t fn = local_sym(exe, "__do_global_dtors_aux", &size);
    CHECK(fn != 0);
    if (!fn)
        return;
    fn += bias;
    struct flamme_cfi_row row;
    CHECK(flamme_cfi_add_module(exe, bias, lo, hi) > 0);
    CHECK(flamme_cfi_lookup_sigsafe(fn, &row) && row.cfa_reg == FLAMME_CFA_RSP &&
          row.cfa_off == 8);
    const uint8_t *code = (const uint8_t *)(uintptr_t)fn;
    /* gcc's crtstuff: [endbr64;] cmpb $0,completed(%rip); jne; push %rbp.
     * A 0x55 byte can also be part of the cmpb's displacement. */
    int push = -1;
    for (int i = 2; i < 32 && push < 0; i++)
        if (code[i] == 0x55 && code[i - 2] == 0x75)
            push = i;
    CHECK(push > 0);
    if (push <= 0)
        return;
    uint64_t ra = (uint64_t)(uintptr_t)&local_sym + 5; /* any code address */
    uint64_t stack[8] = { 0 };
    for (int after = 0; after < 2; after++) {
        /* [rsp] = the saved rbp after the push, then the return address */
        stack[0] = 0x1234;
        stack[1] = ra;
        uintptr_t sp = (uintptr_t)&stack[after ? 0 : 1];
        struct flamme_range range = { (uintptr_t)stack, (uintptr_t)(stack + 8) };
        struct flamme_walk_regs g = { { 0 }, FLAMME_WALK_REG(FLAMME_DW_RSP) |
                                                 FLAMME_WALK_REG(FLAMME_DW_RBP) };
        g.r[FLAMME_DW_RSP] = sp;
        g.r[FLAMME_DW_RBP] = 0xdead0000; /* the caller's rbp: garbage, as in _dl_fini */
        uint64_t frames[4];
        uint32_t flags = 0;
        /* before: the first instruction after endbr64 (a cmpb); after:
         * the one after the push, before mov %rsp,%rbp */
        uint64_t pc = after ? fn + (uint64_t)push + 1 : fn + (code[0] == 0xf3 ? 4 : 0);
        uint32_t got = flamme_walk_regs_sigsafe(pc, &g, 1, &range, 1, NULL, frames, 4, &flags);
        CHECK(got >= 2 && frames[1] == ra);
        if (got < 2 || frames[1] != ra)
            fprintf(stderr, "  after=%d: %u frames, flags %#x, frames[1] %#llx\n", after, got,
                    flags, got > 1 ? (unsigned long long)frames[1] : 0ull);
    }
}

/* The loaded library that defines symbol: its path, bias, and the
 * executable mapping holding the symbol. Returns 1, or 0. */
static int loaded_lib(const char *lib, const char *symbol, char *path, size_t len, uint64_t *bias,
                      uint64_t *lo, uint64_t *hi)
{
    void *h = dlopen(lib, RTLD_NOW);
    struct link_map *lm = NULL;
    void *sym = h ? dlsym(h, symbol) : NULL;
    if (!h || !sym || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return 0;
    snprintf(path, len, "%s", lm->l_name);
    *bias = lm->l_addr;
    return exec_mapping_of((uintptr_t)sym, lo, hi); /* the library stays loaded */
}

/* Loads lib (it stays loaded), adds its unwind rows and opens its file as
 * *el on *fd. Returns 1, or 0 after a failed CHECK. */
static int lib_opened(const char *lib, const char *symbol, char *path, size_t len, uint64_t *bias,
                      uint64_t *lo, uint64_t *hi, struct flamme_elf *el, int *fd)
{
    CHECK(loaded_lib(lib, symbol, path, len, bias, lo, hi));
    CHECK(flamme_cfi_add_module(path, *bias, *lo, *hi) > 0);
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd >= 0 && flamme_elf_open_fd(el, *fd) == 0)
        return 1;
    CHECK(0);
    if (*fd >= 0)
        close(*fd);
    return 0;
}

/* Derives every sized function symbol of the library (all of which have
 * FDEs) and compares the rows with the .eh_frame rows published for it.
 * *derived: functions that got rows; returns the bytes where they
 * disagree (printing the first few). */
static long against_fdes(const char *lib, const char *symbol, long *functions, long *derived,
                         long *compared)
{
    char path[4096];
    uint64_t bias = 0, lo = 0, hi = 0;
    *functions = *derived = *compared = 0;
    int fd;
    struct flamme_elf el;
    if (!lib_opened(lib, symbol, path, sizeof path, &bias, &lo, &hi, &el, &fd))
        return -1;
    const Elf64_Shdr *tab = NULL;
    for (int t = SHT_SYMTAB; !tab && t; t = t == SHT_SYMTAB ? SHT_DYNSYM : 0)
        for (size_t i = 0; i < el.shnum && !tab; i++)
            if (el.sh[i].sh_type == (uint32_t)t)
                tab = &el.sh[i];
    Elf64_Sym *syms = tab ? malloc(tab->sh_size) : NULL;
    uint8_t *code = malloc(1 << 16);
    struct bigrows *rs = malloc(sizeof *rs);
    long bad = 0;
    if (!syms || !code || !rs || flamme_elf_read(&el, tab->sh_offset, syms, tab->sh_size) != 0)
        bad = -1;
    uint64_t last = 0;
    for (size_t k = 0; bad >= 0 && k < tab->sh_size / sizeof *syms; k++) {
        const Elf64_Sym *y = &syms[k];
        const Elf64_Shdr *sec = y->st_shndx < el.shnum ? &el.sh[y->st_shndx] : NULL;
        if (ELF64_ST_TYPE(y->st_info) != STT_FUNC || !sec || !(sec->sh_flags & SHF_EXECINSTR) ||
            y->st_size == 0 || y->st_size > (1 << 16) || y->st_value == last ||
            y->st_value + bias < lo || y->st_value + bias >= hi)
            continue;
        last = y->st_value;
        (*functions)++;
        if (flamme_elf_read(&el, sec->sh_offset + (y->st_value - sec->sh_addr), code,
                            y->st_size) != 0)
            continue;
        rs->n = 0;
        if (flamme_cfi_synth_function(code, y->st_size, y->st_value, collect_big, rs) <= 0)
            continue;
        (*derived)++;
        for (int i = 0; i < rs->n; i++) {
            const struct flamme_synth_row *r = &rs->r[i];
            uint64_t end = i + 1 < rs->n ? rs->r[i + 1].pc : y->st_value + y->st_size;
            for (uint64_t pc = r->pc; r->rsp_off && pc < end; pc++) {
                struct flamme_cfi_row row;
                /* Where the compiler's rows use rbp, the two cannot be
                 * compared offset for offset. */
                if (!flamme_cfi_lookup_sigsafe(pc + bias, &row) || row.cfa_reg != FLAMME_CFA_RSP)
                    continue;
                (*compared)++;
                int ok = row.cfa_off == r->rsp_off;
                /* After a pop the compiler's rows may still name the slot
                 * (it holds the value popped): only a register the decoder
                 * says is saved must be where the compiler says. */
                for (int j = 0; j < FLAMME_CFI_NSAVED && ok; j++)
                    ok = !r->save[j] || row.save[j] == FLAMME_SAVE_LOST ||
                         row.save[j] == 8 * r->save[j];
                if (!ok && bad++ < 3)
                    fprintf(stderr, "  %s: function at %#llx, +%#llx: .eh_frame CFA rsp+%d, derived rsp+%d\n",
                            lib, (unsigned long long)y->st_value,
                            (unsigned long long)(pc - y->st_value), row.cfa_off, r->rsp_off);
            }
        }
    }
    free(syms);
    free(code);
    free(rs);
    flamme_elf_close(&el);
    close(fd);
    return bad;
}

TEST(agrees_with_the_compilers_cfi)
{
    static const char *const libs[][2] = { { "libc.so.6", "qsort" }, { "libz.so.1", "inflate" } };
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        long functions, derived, compared;
        long bad = against_fdes(libs[i][0], libs[i][1], &functions, &derived, &compared);
        printf("  info: %s: %ld of %ld functions derived, %ld bytes compared, %ld disagree\n",
               libs[i][0], derived, functions, compared, bad);
        CHECK(bad == 0);
        CHECK(derived >= functions / 2 && compared > 10 * derived);
    }
}

/* libz is stripped (no .symtab): its crtstuff and _fini have no symbol and
 * no FDE, yet its .fini_array names __do_global_dtors_aux and .fini is
 * _fini, which the loader runs at exit. Rows are derived for both. */
TEST(stripped_library_entries)
{
    char path[4096];
    uint64_t bias = 0, lo = 0, hi = 0;
    int fd;
    struct flamme_elf el;
    if (!lib_opened("libz.so.1", "inflate", path, sizeof path, &bias, &lo, &hi, &el, &fd))
        return;
    CHECK(!flamme_elf_symtab(&el, SHT_SYMTAB)); /* the case at hand */
    uint64_t dtors = 0, fini = 0;
    for (size_t i = 0; i < el.shnum; i++) {
        const Elf64_Shdr *sh = &el.sh[i];
        if (sh->sh_type == SHT_FINI_ARRAY && sh->sh_size >= 8)
            CHECK(flamme_elf_read(&el, sh->sh_offset, &dtors, 8) == 0);
        if (!strcmp(flamme_elf_section_name(&el, sh), ".fini"))
            fini = sh->sh_addr;
    }
    flamme_elf_close(&el);
    close(fd);
    CHECK(dtors && fini);
    struct flamme_cfi_row row;
    /* Its entry (endbr64, then the test of `completed` before push %rbp):
     * the return address on top of the stack. */
    for (uint64_t at = dtors; at < dtors + 8; at += 4) {
        CHECK(flamme_cfi_lookup_sigsafe(at + bias, &row));
        CHECK(row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 8);
    }
    /* _fini: sub $8,%rsp; add $8,%rsp; ret. */
    CHECK(flamme_cfi_lookup_sigsafe(fini + bias, &row) && row.cfa_reg == FLAMME_CFA_RSP &&
          row.cfa_off == 8);
    CHECK(flamme_cfi_lookup_sigsafe(fini + 4 + bias, &row) && row.cfa_reg == FLAMME_CFA_RSP &&
          row.cfa_off == 16);
}

int main(void)
{
    RUN(crtstuff_rows);
    RUN(stub_rows);
    RUN(refused);
    RUN(garbage);
    RUN(walk_through_crtstuff);
    RUN(agrees_with_the_compilers_cfi);
    RUN(stripped_library_entries);
    return CHECK_DONE();
}
