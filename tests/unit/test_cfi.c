/*
 * tests/unit/test_cfi.c — agent/cfi.c against this very process's libc:
 *  - rows at function entries (CFA = rsp + 8, by the x86-64 call ABI) and
 *    after each prologue push/sub, decoded from libc's machine code itself
 *    (an expectation independent of the .eh_frame being parsed);
 *  - a real unwind out of a qsort comparator through glibc's frames (built
 *    without frame pointers) using only the rows, back to the test function
 *    that called qsort: its frame pointer and its name must come out;
 *  - lookups outside every module, adding a module twice, modules from
 *    /proc/self/maps (incl. this PIE binary's bias), bad files, a copy of
 *    libc without section headers (found through PT_GNU_EH_FRAME).
 * The test binary is built with -fno-omit-frame-pointer (CFLAGS_COMMON).
 */
#include "tests/unit/check.h"
#include "tests/unit/maps.h"
#include "agent/cfi.h"
#include "writer/cfi_build.h"
#include "writer/elf.h"
#include "writer/symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    char path[4096];
    uint64_t bias, lo, hi;
    long rows;
} libc;

static void *libc_sym(const char *name)
{
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *p = h ? dlsym(h, name) : NULL;
    if (h)
        dlclose(h);
    return p;
}

/* Size of the dynamic symbol at p (from libc's .dynsym), or 0. */
static uint64_t sym_size(void *p)
{
    Dl_info di;
    const ElfW(Sym) *sym = NULL;
    if (!dladdr1(p, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym || di.dli_saddr != p)
        return 0;
    return sym->st_size;
}

static int lookup(const void *p, struct flamme_cfi_row *row)
{
    return flamme_cfi_lookup_sigsafe((uint64_t)(uintptr_t)p, row);
}

/* Adds libc with flamme_cfi_add_module; everything below needs it. */
TEST(build_libc)
{
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    struct link_map *lm = NULL;
    CHECK(h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm);
    if (!lm)
        return;
    snprintf(libc.path, sizeof libc.path, "%s", lm->l_name);
    libc.bias = lm->l_addr;
    dlclose(h);
    CHECK(exec_mapping_of((uintptr_t)libc_sym("qsort"), &libc.lo, &libc.hi));

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long n = flamme_cfi_add_module(libc.path, libc.bias, libc.lo, libc.hi);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t mods, rows, bytes;
    flamme_cfi_stats(&mods, &rows, &bytes);
    printf("  info: %s: %ld rows, %llu bytes, built in %.1f ms\n", libc.path, n,
           (unsigned long long)bytes,
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    libc.rows = n;
    CHECK(n > 1000); /* glibc has thousands of FDEs */
    CHECK(mods == 1 && rows == (uint64_t)n);
}

/* Checks the rows along a function's prologue against its code: each push
 * adds 8 to the CFA offset (push %rbp also saves rbp there), sub $imm,%rsp
 * adds imm; register-to-register moves change nothing. Stops at the first
 * other instruction. Returns the number of stack-changing instructions
 * checked. */
static int check_prologue(const char *name)
{
    const uint8_t *pc = libc_sym(name);
    struct flamme_cfi_row row;
    CHECK(pc != NULL);
    if (!pc)
        return 0;
    /* At any function's first instruction the return address is at *rsp. */
    int ok = lookup(pc, &row);
    CHECK(ok && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 8 && row.rbp_off == 0);
    if (!ok || row.cfa_off != 8)
        fprintf(stderr, "  %s entry: ok=%d reg=%d off=%d\n", name, ok, row.cfa_reg, row.cfa_off);
    int off = 8, rbp_at = 0, checked = 0;
    for (int insn = 0; insn < 16; insn++) {
        if (pc[0] == 0xf3 && pc[1] == 0x0f && pc[2] == 0x1e && pc[3] == 0xfa) {
            pc += 4; /* endbr64 */
            continue;
        }
        int rex = (pc[0] & 0xf0) == 0x40 ? pc[0] : 0;
        const uint8_t *op = pc + (rex != 0);
        if (op[0] >= 0x50 && op[0] <= 0x57 && (rex == 0 || rex == 0x41)) {
            off += 8;
            if (op[0] == 0x55 && rex == 0)
                rbp_at = -off;
            pc = op + 1;
        } else if (rex == 0x48 && op[0] == 0x83 && op[1] == 0xec) {
            off += op[2];
            pc = op + 3;
        } else if (rex == 0x48 && op[0] == 0x81 && op[1] == 0xec) {
            int32_t imm;
            memcpy(&imm, op + 2, 4);
            off += imm;
            pc = op + 6;
        } else if ((rex & 0xf8) == 0x48 && (op[0] == 0x89 || op[0] == 0x8b) && op[1] >= 0xc0 &&
                   (op[1] & 7) != 4 && ((op[1] >> 3) & 7) != 4) {
            pc = op + 2; /* mov between registers, neither of them rsp */
            continue;
        } else {
            break;
        }
        ok = lookup(pc, &row);
        CHECK(ok && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == off && row.rbp_off == rbp_at);
        if (!ok || row.cfa_off != off || row.rbp_off != rbp_at)
            fprintf(stderr, "  %s+%#lx: want rsp+%d rbp@%d, got ok=%d reg=%d off=%d rbp@%d\n", name,
                    (unsigned long)(pc - (const uint8_t *)libc_sym(name)), off, rbp_at, ok,
                    row.cfa_reg, row.cfa_off, row.rbp_off);
        checked++;
    }
    return checked;
}

TEST(rows_match_prologues)
{
    static const char *const fns[] = { "malloc", "free", "calloc", "realloc", "qsort", "qsort_r",
                                       "memmove", "memcpy", "strlen", "fclose", "fwrite",
                                       "getenv", "strtol", "nanosleep", "pthread_mutex_lock" };
    int checked = 0;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        checked += check_prologue(fns[i]);
    printf("  info: %d prologue instructions checked\n", checked);
    CHECK(checked >= 3); /* malloc alone pushes three registers */

    /* qsort itself is a tail jump in some glibc versions; qsort_r does the
     * work and keeps callee-saved registers on the stack. */
    const uint8_t *q = libc_sym("qsort_r");
    uint64_t size = q ? sym_size((void *)q) : 0;
    CHECK(size > 0);
    int deeper = 0;
    for (uint64_t i = 0; i < size && !deeper; i++) {
        struct flamme_cfi_row row;
        if (lookup(q + i, &row) && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off > 8)
            deeper = 1;
    }
    CHECK(deeper);
}

void flamme_test_deref1(void);

/* ---- a real unwind through qsort */

static void *caller_fp;    /* frame address of flamme_test_sort_caller */
static int walked, libc_frames, walk_ok;
static uint64_t walk_pc, walk_rbp, walk_sp;

/* Walks from its own frame out of the comparator (frame pointers), then
 * through libc (rows only) until the pc leaves libc. */
static __attribute__((noinline)) void walk_from_here(void)
{
    uint64_t *fp = __builtin_frame_address(0);
    /* this frame -> comparator -> libc, by frame pointers (test code) */
    uint64_t pc = fp[1], sp = (uint64_t)(uintptr_t)(fp + 2), rbp = fp[0];
    uint64_t *cfp = (uint64_t *)(uintptr_t)rbp;
    pc = cfp[1];
    sp = (uint64_t)(uintptr_t)(cfp + 2);
    rbp = cfp[0];
    walk_ok = 1;
    for (int depth = 0; pc >= libc.lo && pc < libc.hi; depth++) {
        struct flamme_cfi_row row;
        /* A return address may be just past the function's last byte (a
         * call to a noreturn function): the call itself is at pc - 1. */
        if (depth == 64 || !flamme_cfi_lookup_sigsafe(pc - 1, &row) ||
            row.cfa_reg == FLAMME_CFA_UNKNOWN) {
            walk_ok = 0;
            break;
        }
        uint64_t cfa = (row.cfa_reg == FLAMME_CFA_RSP ? sp : rbp) + (uint64_t)(int64_t)row.cfa_off;
        if (cfa <= sp) {
            walk_ok = 0; /* the stack only grows towards callers */
            break;
        }
        if (row.rbp_off)
            rbp = *(uint64_t *)(uintptr_t)(cfa + (uint64_t)(int64_t)row.rbp_off);
        pc = *(uint64_t *)(uintptr_t)(cfa - 8);
        sp = cfa;
        libc_frames++;
    }
    walk_pc = pc;
    walk_rbp = rbp;
    walk_sp = sp;
}

static __attribute__((noinline)) int cmp_int(const void *a, const void *b)
{
    if (!walked) {
        walked = 1;
        walk_from_here();
    }
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) void flamme_test_sort_caller(int *v, size_t n);
__attribute__((noinline)) void flamme_test_sort_caller(int *v, size_t n)
{
    /* libc's own qsort, not a sanitizer's interceptor of it */
    void (*libc_qsort)(void *, size_t, size_t, int (*)(const void *, const void *)) =
        (void (*)(void *, size_t, size_t, int (*)(const void *, const void *)))libc_sym("qsort");
    caller_fp = __builtin_frame_address(0);
    libc_qsort(v, n, sizeof *v, cmp_int);
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame must be live */
}

TEST(unwind_through_qsort)
{
    int v[200];
    for (int i = 0; i < 200; i++)
        v[i] = (i * 7919) % 200;
    walked = libc_frames = walk_ok = 0;
    flamme_test_sort_caller(v, 200);
    CHECK(walked);
    CHECK(walk_ok);
    CHECK(libc_frames >= 1);
    printf("  info: %d libc frames between the comparator and its caller\n", libc_frames);
    /* Back in the caller: its frame pointer (restored from where libc saved
     * it, or never touched) and a stack pointer inside its frame. */
    CHECK(walk_rbp == (uint64_t)(uintptr_t)caller_fp);
    CHECK(walk_sp <= (uint64_t)(uintptr_t)caller_fp);
    /* ... and the return address names the caller (symtab, not CFI). */
    flamme_symtab *st = flamme_symtab_new();
    const char *fn = "", *mod = "";
    uint64_t off;
    CHECK(st && flamme_symtab_lookup(st, walk_pc, &fn, &mod, &off) == 1);
    CHECK_STR(fn, "flamme_test_sort_caller");
    if (st)
        flamme_symtab_free(st);
    for (int i = 1; i < 200; i++)
        CHECK(v[i - 1] <= v[i]);
}

TEST(outside_modules)
{
    struct flamme_cfi_row row;
    CHECK(flamme_cfi_lookup_sigsafe(0, &row) == 0);
    CHECK(flamme_cfi_lookup_sigsafe(1, &row) == 0);
    CHECK(flamme_cfi_lookup_sigsafe(UINT64_MAX, &row) == 0);
    CHECK(flamme_cfi_lookup_sigsafe(libc.lo - 1, &row) == 0);
    CHECK(flamme_cfi_lookup_sigsafe(libc.hi, &row) == 0);
    CHECK(lookup((void *)flamme_test_sort_caller, &row) == 0); /* this binary: not added */
    void *heap = malloc(16);
    CHECK(lookup(heap, &row) == 0);
    free(heap);
    CHECK(lookup(&row, &row) == 0);
    /* Inside libc, every answer is a row at or before the address. */
    for (uint64_t a = libc.lo; a < libc.hi; a += 4099)
        if (flamme_cfi_lookup_sigsafe(a, &row))
            CHECK(row.pc <= a && row.pc >= libc.lo);
}

TEST(add_twice_no_duplicates)
{
    uint64_t m0, r0, b0, m1, r1, b1;
    flamme_cfi_stats(&m0, &r0, &b0);
    long n = flamme_cfi_add_module(libc.path, libc.bias, libc.lo, libc.hi);
    flamme_cfi_stats(&m1, &r1, &b1);
    CHECK(n == (long)r0);
    CHECK(m1 == m0 && r1 == r0);
    struct flamme_cfi_row row;
    CHECK(lookup(libc_sym("malloc"), &row) && row.cfa_off == 8);
}

/* Re-adding libc while another thread looks up: the reader always sees a
 * complete set (the old or the new one), never a missing or torn row. */
static atomic_int stop_reader;
static long reader_lookups, reader_misses;

static void *reader(void *arg)
{
    const uint8_t *m = arg;
    while (!atomic_load(&stop_reader)) {
        struct flamme_cfi_row row;
        for (int k = 0; k < 16; k++) {
            reader_lookups++;
            if (!lookup(m + k, &row) || row.cfa_reg != FLAMME_CFA_RSP || row.cfa_off < 8)
                reader_misses++;
        }
    }
    return NULL;
}

TEST(concurrent_lookup)
{
    pthread_t t;
    atomic_store(&stop_reader, 0);
    reader_lookups = reader_misses = 0;
    CHECK(pthread_create(&t, NULL, reader, libc_sym("malloc")) == 0);
    for (int i = 0; i < 20; i++)
        CHECK(flamme_cfi_add_module(libc.path, libc.bias, libc.lo, libc.hi) == libc.rows);
    atomic_store(&stop_reader, 1);
    pthread_join(t, NULL);
    CHECK(reader_lookups > 0);
    CHECK(reader_misses == 0);
}

TEST(from_maps)
{
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(k > 0);
    exe[k > 0 ? k : 0] = '\0';
    uint64_t m0, r0, b0, m1, r1, b1;
    flamme_cfi_stats(&m0, &r0, &b0);
    int added = flamme_cfi_add_from_maps(exe, NULL);
    flamme_cfi_stats(&m1, &r1, &b1);
    CHECK(added >= 2);                   /* ld.so, this binary; libc is already there */
    CHECK(m1 == m0 + (uint64_t)added);   /* libc was not added again */
    /* This binary, named as having frame pointers, came with its stack-switch
     * rows only. */
    struct flamme_cfi_row row;
    CHECK(lookup((void *)flamme_test_sort_caller, &row) == 0);
    CHECK(lookup((char *)(void *)flamme_test_deref1 + 1, &row) == 1 &&
          row.cfa_reg == FLAMME_CFA_DEREF_RSP);
    CHECK(flamme_cfi_add_from_maps(exe, NULL) == 0);
    /* Now this PIE binary too: its bias comes from /proc/self/maps and the
     * program headers, and its function's entry must say CFA = rsp + 8. */
    CHECK(flamme_cfi_add_from_maps(NULL, NULL) == 1);
    CHECK(lookup((void *)flamme_test_sort_caller, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 8);
    CHECK(lookup(libc_sym("malloc"), &row) && row.cfa_off == 8);
}

/* Copies the first len bytes of src into dst; with phase > 0, every 4 KiB
 * block whose index is phase modulo 16 becomes pseudo-random bytes. */
static int make_copy(const char *src, const char *dst, size_t len, unsigned phase)
{
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
    char buf[65536];
    size_t done = 0;
    int rc = in >= 0 && out >= 0 ? 0 : -1;
    while (rc == 0 && done < len) {
        ssize_t r = read(in, buf, sizeof buf < len - done ? sizeof buf : len - done);
        if (r <= 0)
            break;
        for (ssize_t i = 0; phase && i < r; i++)
            if (((done + (size_t)i) >> 12) % 16 == phase)
                buf[i] = (char)(((done + (size_t)i) * 2654435761u) >> 13);
        if (write(out, buf, (size_t)r) != r)
            rc = -1;
        done += (size_t)r;
    }
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return rc;
}

/* The memo gives what the lookup gives, pc by pc, however the pcs collide
 * in it, and forgets what it knew when the published set changes (a
 * module replaced: the same pc may then have another row or none). */
TEST(cached_lookup)
{
    static struct flamme_cfi_cache memo; /* 36 KiB: not on the stack */
    uint64_t base = (uint64_t)(uintptr_t)libc_sym("malloc");
    int differ = 0, found = 0;
    for (int round = 0; round < 3; round++)
        for (uint64_t pc = base - 40000; pc < base + 40000; pc += 7 + (pc & 3)) {
            struct flamme_cfi_row a, b;
            memset(&a, 0, sizeof a);
            memset(&b, 0, sizeof b);
            int ra = flamme_cfi_lookup_sigsafe(pc, &a);
            int rb = flamme_cfi_lookup_cached_sigsafe(&memo, pc, &b);
            found += ra;
            differ += ra != rb || memcmp(&a, &b, sizeof a) != 0;
        }
    CHECK(found > 10000);
    CHECK(differ == 0);
    /* Adding libc again publishes a new set: the memo starts over from it
     * instead of answering from the old one. */
    struct flamme_cfi_row row;
    CHECK(flamme_cfi_lookup_cached_sigsafe(&memo, base, &row) == 1);
    const void *before = memo.set;
    CHECK(flamme_cfi_add_module(libc.path, libc.bias, libc.lo, libc.hi) == libc.rows);
    CHECK(flamme_cfi_lookup_cached_sigsafe(&memo, base, &row) == 1);
    CHECK(memo.set != before);
    CHECK(flamme_cfi_lookup_cached_sigsafe(NULL, base, &row) == 1);
}

TEST(bad_files)
{
    uint64_t m0, r0, b0, m1, r1, b1;
    flamme_cfi_stats(&m0, &r0, &b0);
    /* Distinct address ranges, far from anything mapped. */
    const uint64_t base = 0x7e0000000000ull;
    CHECK(flamme_cfi_add_module("/nonexistent/lib.so", 0, base, base + 0x1000) == -1);
    CHECK(flamme_cfi_add_module("/dev/null", 0, base, base + 0x1000) == -1);
    CHECK(flamme_cfi_add_module("/proc/self/maps", 0, base, base + 0x1000) == -1);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/flamme_cfi_test.%d", (int)getpid());
    /* Truncated libc: the section headers (at its end) are gone. */
    const uint64_t lo = base, hi = base + 0x1000000;
    CHECK(make_copy(libc.path, tmp, 100000, 0) == 0);
    CHECK(flamme_cfi_add_module(tmp, base, lo, hi) == -1);
    flamme_cfi_stats(&m1, &r1, &b1);
    CHECK(m1 == m0);
    /* Garbage in one 4 KiB block of every 64 KiB (hitting .eh_frame too):
     * must not crash; whatever it yields stays inside its range. */
    for (unsigned phase = 1; phase < 16; phase += 3) {
        CHECK(make_copy(libc.path, tmp, (size_t)1 << 30, phase) == 0);
        flamme_cfi_add_module(tmp, base, lo, hi);
        struct flamme_cfi_row row;
        for (uint64_t a = lo; a < hi; a += 0x1003)
            if (flamme_cfi_lookup_sigsafe(a, &row))
                CHECK(row.pc >= lo && row.pc <= a);
    }
    unlink(tmp);
}

/* Without section headers the .eh_frame is found through PT_GNU_EH_FRAME:
 * same rows as from the intact file, at the copy's (fake) load address. */
TEST(no_section_headers)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/flamme_cfi_test.%d", (int)getpid());
    CHECK(make_copy(libc.path, tmp, (size_t)1 << 30, 0) == 0);
    int fd = open(tmp, O_WRONLY);
    uint16_t zero = 0;
    CHECK(fd >= 0 && pwrite(fd, &zero, sizeof zero, offsetof(Elf64_Ehdr, e_shnum)) == 2);
    if (fd >= 0)
        close(fd);
    const uint64_t bias = 0x7d0000000000ull;
    long n = flamme_cfi_add_module(tmp, bias, libc.lo - libc.bias + bias, libc.hi - libc.bias + bias);
    unlink(tmp);
    CHECK(n == libc.rows);
    static const char *const fns[] = { "malloc", "qsort_r", "fwrite" };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        const uint8_t *p = libc_sym(fns[i]);
        int same = p != NULL;
        for (int k = 0; same && k < 64; k++) {
            struct flamme_cfi_row a, b;
            int ra = lookup(p + k, &a);
            int rb = flamme_cfi_lookup_sigsafe((uint64_t)(uintptr_t)(p + k) - libc.bias + bias, &b);
            same = ra == rb && (!ra || (a.cfa_reg == b.cfa_reg && a.cfa_off == b.cfa_off &&
                                        a.rbp_off == b.rbp_off && a.pc - libc.bias == b.pc - bias));
        }
        CHECK(same);
    }
}

TEST(free_all)
{
    flamme_cfi_free_all();
    struct flamme_cfi_row row;
    CHECK(lookup(libc_sym("malloc"), &row) == 0);
    uint64_t m, r, b;
    flamme_cfi_stats(&m, &r, &b);
    CHECK(m == 0 && r == 0);
}

/* Three functions whose CFI uses a CFA expression, as the OCaml runtime's
 * stack switches do (amd64.S): CFA = *(rsp+8) + 16; CFA = *(*(rsp+56) + 0)
 * + 8 (caml_runstack's shape); and one expression the walker cannot use. */
__asm__(".text\n"
        ".globl flamme_test_deref1\n.type flamme_test_deref1,@function\n"
        "flamme_test_deref1:\n.cfi_startproc\nnop\n"
        ".cfi_escape 0x0f, 5, 0x77, 8, 0x06, 0x23, 16\n"
        "nop\nret\n.cfi_endproc\n.size flamme_test_deref1, .-flamme_test_deref1\n"
        ".globl flamme_test_deref2\n.type flamme_test_deref2,@function\n"
        "flamme_test_deref2:\n.cfi_startproc\nnop\n"
        ".cfi_escape 0x0f, 8, 0x77, 56, 0x06, 0x23, 0, 0x06, 0x23, 8\n"
        "nop\nret\n.cfi_endproc\n.size flamme_test_deref2, .-flamme_test_deref2\n"
        ".globl flamme_test_deref_bad\n.type flamme_test_deref_bad,@function\n"
        "flamme_test_deref_bad:\n.cfi_startproc\nnop\n"
        ".cfi_escape 0x0f, 3, 0x75, 8, 0x94\n" /* breg5, deref_size: not a deref chain */
        "nop\nret\n.cfi_endproc\n.size flamme_test_deref_bad, .-flamme_test_deref_bad\n");
/* rbx-based CFA (OCaml's noalloc call), rbx and r12 pushed (a C callee),
 * a deref chain from rbx (caml_c_call_stack_args). */
__asm__(".text\n"
        ".globl flamme_test_rbx_cfa\n.type flamme_test_rbx_cfa,@function\n"
        "flamme_test_rbx_cfa:\n.cfi_startproc\nsub $24,%rsp\n.cfi_adjust_cfa_offset 24\n"
        "mov %rsp,%rbx\n.cfi_def_cfa_register %rbx\nnop\nmov %rbx,%rsp\n"
        ".cfi_def_cfa_register %rsp\nadd $24,%rsp\n.cfi_adjust_cfa_offset -24\nret\n"
        ".cfi_endproc\n.size flamme_test_rbx_cfa, .-flamme_test_rbx_cfa\n"
        ".globl flamme_test_rbx_saved\n.type flamme_test_rbx_saved,@function\n"
        "flamme_test_rbx_saved:\n.cfi_startproc\npush %r12\n.cfi_adjust_cfa_offset 8\n"
        ".cfi_offset %r12, -16\npush %rbx\n.cfi_adjust_cfa_offset 8\n.cfi_offset %rbx, -24\n"
        "nop\npop %rbx\n.cfi_adjust_cfa_offset -8\n.cfi_restore %rbx\npop %r12\n"
        ".cfi_adjust_cfa_offset -8\n.cfi_restore %r12\nret\n"
        ".cfi_endproc\n.size flamme_test_rbx_saved, .-flamme_test_rbx_saved\n"
        ".globl flamme_test_deref_rbx\n.type flamme_test_deref_rbx,@function\n"
        "flamme_test_deref_rbx:\n.cfi_startproc\nnop\n"
        ".cfi_escape 0x0f, 5, 0x73, 8, 0x06, 0x23, 8\n"
        "nop\nret\n.cfi_endproc\n.size flamme_test_deref_rbx, .-flamme_test_deref_rbx\n");
void flamme_test_deref1(void), flamme_test_deref2(void), flamme_test_deref_bad(void);
void flamme_test_rbx_cfa(void), flamme_test_rbx_saved(void), flamme_test_deref_rbx(void);

/* Needs from_maps (the test binary's own CFI is published). */
TEST(deref_chain_rows)
{
    struct flamme_cfi_row row;
    /* Before the expression: a plain row at the entry. */
    CHECK(lookup((void *)flamme_test_deref1, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 8);
    CHECK(lookup((char *)(void *)flamme_test_deref1 + 1, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_DEREF_RSP && row.cfa_off == 8 && row.nderef == 1 &&
          row.cfa_add == 16 && row.rbp_off == 0);
    CHECK(lookup((char *)(void *)flamme_test_deref2 + 1, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_DEREF_RSP && row.cfa_off == 56 && row.nderef == 2 &&
          row.mid_add == 0 && row.cfa_add == 8);
    CHECK(lookup((char *)(void *)flamme_test_deref_bad + 1, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_UNKNOWN);
    /* OCaml around a [@@noalloc] call: CFA in rbx; the C callee saves rbx. */
    CHECK(lookup((char *)(void *)flamme_test_rbx_cfa + 7, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_REG && row.dwreg == 3 && row.cfa_off == 32);
    CHECK(lookup((char *)(void *)flamme_test_rbx_saved + 3, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 24 && row.save[1] == -24 &&
          row.save[2] == -16 && row.save[0] == FLAMME_SAVE_SAME && row.rbp_off == 0);
    CHECK(lookup((char *)(void *)flamme_test_deref_rbx + 1, &row) == 1);
    CHECK(row.cfa_reg == FLAMME_CFA_DEREF_REG && row.dwreg == 3 && row.cfa_off == 8 &&
          row.nderef == 1 && row.cfa_add == 8);
}

/* Needs from_maps. The test binary links lazily: its .plt entries are jmp
 * *GOT; push $index; jmp to the first entry, under the linker's expression
 * CFA = rsp + 8 (+ 8 from the entry's byte 11). They get a row each way. */
TEST(lazy_plt_rows)
{
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct flamme_elf el;
    if (fd < 0 || flamme_elf_open_fd(&el, fd) != 0) {
        CHECK(0);
        if (fd >= 0)
            close(fd);
        return;
    }
    uint64_t plt = 0, size = 0;
    for (size_t i = 0; i < el.shnum; i++)
        if (!strcmp(flamme_elf_section_name(&el, &el.sh[i]), ".plt")) {
            plt = el.sh[i].sh_addr;
            size = el.sh[i].sh_size;
        }
    flamme_elf_close(&el);
    close(fd);
    CHECK(plt && size >= 48); /* the first entry and two more */
    if (!plt)
        return;
    char *base = (char *)_r_debug.r_map->l_addr + plt;
    struct flamme_cfi_row row;
    /* The first entry: push GOT[1]; jmp *GOT[2] (plain rows). */
    CHECK(lookup(base, &row) == 1 && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 16);
    CHECK(lookup(base + 6, &row) == 1 && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 24);
    for (uint64_t e = 16; e + 16 <= size && e <= 64; e += 16) {
        CHECK(lookup(base + e, &row) == 1 && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 8);
        CHECK(lookup(base + e + 6, &row) == 1 && row.cfa_reg == FLAMME_CFA_RSP &&
              row.cfa_off == 8);
        CHECK(lookup(base + e + 11, &row) == 1 && row.cfa_reg == FLAMME_CFA_RSP &&
              row.cfa_off == 16);
        CHECK(lookup(base + e + 15, &row) == 1 && row.cfa_reg == FLAMME_CFA_RSP &&
              row.cfa_off == 16);
    }
}

int main(void)
{
    RUN(build_libc);
    RUN(rows_match_prologues);
    RUN(unwind_through_qsort);
    RUN(outside_modules);
    RUN(add_twice_no_duplicates);
    RUN(concurrent_lookup);
    RUN(from_maps);
    RUN(deref_chain_rows);
    RUN(lazy_plt_rows);
    RUN(cached_lookup);
    RUN(bad_files);
    RUN(no_section_headers);
    RUN(free_all);
    return CHECK_DONE();
}
