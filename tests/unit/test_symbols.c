/*
 * tests/unit/test_symbols.c — writer/symbols.c against this very process:
 * functions of the (PIE) test binary incl. a static one, a libc function and
 * its load offset, a static libc function via its debug file, FUNC preferred
 * over a NOTYPE alias at one address, an unsized asm function (the
 * nearest-preceding fallback), the vDSO, an address no mapping contains, and
 * deleted garbage / truncated ELF files.
 */
#include "tests/unit/check.h"
#include "writer/symbols.h"
#include "writer/cfi_cache.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

/* A NOTYPE local label and a FUNC at the same address; the label sorts first
 * alphabetically so only the type preference can pick the function. An
 * unsized function follows, so addresses inside it can only be named by the
 * fallback. */
__asm__(".text\n"
        "aaa_flamme_test_label:\n"
        ".globl flamme_test_asm_func\n"
        ".type flamme_test_asm_func, @function\n"
        "flamme_test_asm_func:\n"
        "  nop\n  nop\n  ret\n"
        ".size flamme_test_asm_func, .-flamme_test_asm_func\n"
        ".globl flamme_test_asm_unsized\n"
        ".type flamme_test_asm_unsized, @function\n"
        "flamme_test_asm_unsized:\n"
        "  nop\n  nop\n  nop\n  nop\n  ret\n");
void flamme_test_asm_func(void);
void flamme_test_asm_unsized(void);

static __attribute__((noinline)) int static_helper(int x)
{
    __asm__ volatile("" ::: "memory");
    return x * 3 + 1;
}

__attribute__((noinline)) int flamme_test_global_fn(int x)
{
    __asm__ volatile("" ::: "memory");
    return static_helper(x) + 2;
}

static const char *lookup(flamme_symtab *s, const void *p, int *rc, const char **mod, uint64_t *off)
{
    const char *fn;
    const char *m;
    uint64_t o;
    *rc = flamme_symtab_lookup(s, (uint64_t)(uintptr_t)p, &fn, &m, &o);
    if (mod)
        *mod = m;
    if (off)
        *off = o;
    return fn;
}

TEST(own_functions)
{
    flamme_symtab *s = flamme_symtab_new();
    CHECK(s != NULL);
    if (!s)
        return;
    int rc;
    const char *mod;
    /* Inside the function, as a return address would be. */
    CHECK_STR(lookup(s, (const char *)(uintptr_t)&flamme_test_global_fn + 3, &rc, &mod, NULL),
              "flamme_test_global_fn");
    CHECK(rc == 1);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    CHECK_STR(mod, exe);
    CHECK_STR(lookup(s, (const void *)(uintptr_t)&static_helper, &rc, NULL, NULL), "static_helper");
    CHECK(rc == 1);
    CHECK(flamme_test_global_fn(1) == 6);
    flamme_symtab_free(s);
}

TEST(func_preferred_over_notype_alias)
{
    flamme_symtab *s = flamme_symtab_new();
    int rc;
    CHECK_STR(lookup(s, (const void *)(uintptr_t)&flamme_test_asm_func, &rc, NULL, NULL),
              "flamme_test_asm_func");
    CHECK(rc == 1);
    /* 2 bytes into the unsized function: no size covers it, it is in .text. */
    CHECK_STR(lookup(s, (const char *)(uintptr_t)&flamme_test_asm_unsized + 2, &rc, NULL, NULL),
              "flamme_test_asm_unsized");
    CHECK(rc == 1);
    flamme_symtab_free(s);
}

TEST(libc_function_and_offset)
{
    flamme_symtab *s = flamme_symtab_new();
    /* libc's own qsort, even when a sanitizer interposes one. */
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void *q = libc ? dlsym(libc, "qsort") : NULL;
    CHECK(q != NULL);
    Dl_info di;
    CHECK(dladdr(q, &di) != 0);
    int rc;
    const char *mod;
    uint64_t off;
    CHECK_STR(lookup(s, (char *)q + 1, &rc, &mod, &off), "qsort");
    CHECK(rc == 1);
    CHECK(strstr(mod, "libc") != NULL);
    /* libc's first PT_LOAD has vaddr 0, so its vaddr is addr - load base. */
    CHECK(off == (uint64_t)((uintptr_t)q + 1 - (uintptr_t)di.dli_fbase));
    flamme_symtab_free(s);
}

static void *thread_ret(void *arg)
{
    *(void **)arg = __builtin_return_address(0);
    return NULL;
}

/* start_thread is static in glibc: named only via a .symtab, which Debian
 * ships in libc6-dbg (/usr/lib/debug/.build-id). Never a neighbour's name. */
TEST(libc_static_via_debug_file)
{
    void *ra = NULL;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, thread_ret, &ra) == 0);
    pthread_join(th, NULL);
    flamme_symtab *s = flamme_symtab_new();
    int rc;
    const char *mod;
    const char *name = lookup(s, ra, &rc, &mod, NULL);
    CHECK(strstr(mod, "libc") != NULL);
    if (name[0])
        CHECK_STR(name, "start_thread");
    else
        printf("  (libc has no .symtab and no debug file here: module-only, as expected)\n");
    flamme_symtab_free(s);
}

TEST(vdso)
{
    void *vdso = (void *)getauxval(AT_SYSINFO_EHDR);
    void *h = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *fn = h ? dlsym(h, "__vdso_clock_gettime") : NULL;
    if (!vdso || !fn) {
        printf("  (no vDSO clock_gettime here; skipped)\n");
        return;
    }
    flamme_symtab *s = flamme_symtab_new();
    int rc;
    const char *mod;
    const char *name = lookup(s, (char *)fn + 1, &rc, &mod, NULL);
    CHECK_STR(mod, "[vdso]");
    CHECK(rc == 1);
    CHECK(strstr(name, "clock_gettime") != NULL);
    flamme_symtab_free(s);
}

TEST(unmapped_and_new_mapping)
{
    flamme_symtab *s = flamme_symtab_new();
    int rc;
    const char *mod;
    CHECK_STR(lookup(s, (const void *)(uintptr_t)0x10, &rc, &mod, NULL), "");
    CHECK(rc == -1);
    CHECK_STR(mod, "");
    /* An executable anonymous mapping made after the table was built is
     * found after an explicit refresh, module-only. */
    void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    flamme_symtab_refresh(s);
    CHECK_STR(lookup(s, (char *)p + 16, &rc, &mod, NULL), "");
    CHECK(rc == 0);
    CHECK(mod[0] != '\0');
    munmap(p, 4096);
    flamme_symtab_free(s);
}

/* Maps the first len bytes of src (or garbage when src is NULL) from a temp
 * file as executable, deletes the file, and looks up an address in it. */
static int lookup_in_mapped_copy(const char *src, size_t len, const char **fn, const char **mod)
{
    char path[] = "/tmp/flamme_test_symbols_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    char buf[8192];
    memset(buf, 0xa5, sizeof buf);
    if (src) {
        FILE *f = fopen(src, "rb");
        CHECK(f != NULL);
        if (f) {
            CHECK(fread(buf, 1, len, f) == len);
            fclose(f);
        }
    }
    CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
    void *p = mmap(NULL, sizeof buf, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    close(fd);
    unlink(path);
    if (p == MAP_FAILED) {
        printf("  (cannot map /tmp executable; skipped)\n");
        return 0;
    }
    flamme_symtab *s = flamme_symtab_new();
    uint64_t off;
    int rc = flamme_symtab_lookup(s, (uint64_t)(uintptr_t)p + 100, fn, mod, &off);
    CHECK(strstr(*mod, "flamme_test_symbols_") != NULL);
    CHECK(strstr(*mod, "(deleted)") == NULL);
    CHECK(off == 100);
    flamme_symtab_free(s);
    munmap(p, sizeof buf);
    return rc;
}

/* Garbage, and an ELF header whose tables point past the end of the file:
 * module-only, no crash. */
TEST(bad_files_are_module_only)
{
    const char *fn, *mod;
    CHECK(lookup_in_mapped_copy(NULL, 0, &fn, &mod) == 0);
    CHECK_STR(fn, "");
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    CHECK(lookup_in_mapped_copy(exe, 64, &fn, &mod) == 0);
    CHECK_STR(fn, "");
}

int main(void);

/* A PLT entry of the test binary itself is named "<function>@plt". Its
 * address comes from objdump (binutils, installed by make deps), shifted by
 * the PIE load bias measured on main(). */
TEST(plt_entries_named)
{
    char exe[512], cmd[1400];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(el > 0);
    if (el <= 0)
        return;
    exe[el] = 0;
    snprintf(cmd, sizeof cmd,
             "objdump -d -j .plt -j .plt.sec '%s' 2>/dev/null; objdump -t '%s' 2>/dev/null", exe,
             exe);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    char line[512], plt_name[128] = "";
    unsigned long plt_addr = 0, main_addr = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a;
        char name[128];
        size_t nl = 0;
        if (!plt_addr && sscanf(line, "%lx <%127[^>]>:", &a, name) == 2 &&
            (nl = strlen(name)) > 4 && strcmp(name + nl - 4, "@plt") == 0) {
            plt_addr = a;
            snprintf(plt_name, sizeof plt_name, "%s", name);
        }
        if (strstr(line, " main\n") && sscanf(line, "%lx", &a) == 1)
            main_addr = a;
    }
    pclose(f);
    CHECK(plt_addr != 0 && main_addr != 0);
    if (!plt_addr || !main_addr)
        return;
    uintptr_t bias = (uintptr_t)main - main_addr;
    flamme_symtab *s = flamme_symtab_new();
    int rc;
    const char *mod;
    uint64_t off;
    CHECK_STR(lookup(s, (const void *)(plt_addr + bias + 4), &rc, &mod, &off), plt_name);
    CHECK(rc == 1);
    flamme_symtab_free(s);
}

/* A library whose .symtab lacks one of its exported functions (objcopy
 * --strip-symbol leaves .dynsym alone): .dynsym is read only for what
 * .symtab lacks, so that function is named from it, the others from
 * .symtab, a local one included. Built here with cc and objcopy (gcc and
 * binutils, there wherever the project builds). */
TEST(dynsym_fills_what_symtab_lacks)
{
    char dir[] = "/tmp/flamme_test_dynsym_XXXXXX", cmd[1024], so[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(so, sizeof so, "%s/lib2.so", dir);
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '%%s\\n' "
             "'__attribute__((noinline)) static int local_fn(int x) { return x * 7; }' "
             "'int flamme_in_both(int x) { return local_fn(x) + 1; }' "
             "'int flamme_dyn_only(int x) { return local_fn(x) + 2; }' "
             "'int flamme_local_addr(void) { return (int)(long)&local_fn; }' > l.c && "
             "cc -shared -fPIC -O1 l.c -o l.so && "
             "objcopy --strip-symbol=flamme_dyn_only l.so lib2.so && "
             "nm lib2.so | grep -q ' t local_fn' && ! nm lib2.so | grep -q flamme_dyn_only && "
             "nm -D lib2.so | grep -q flamme_dyn_only",
             dir);
    int built = system(cmd) == 0;
    CHECK(built);
    void *h = built ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
    CHECK(h != NULL);
    if (h) {
        flamme_symtab *s = flamme_symtab_new();
        int rc;
        const char *mod;
        static const char *const names[] = { "flamme_in_both", "flamme_dyn_only" };
        for (size_t i = 0; i < 2; i++) {
            void *f = dlsym(h, names[i]);
            CHECK(f != NULL);
            if (!f)
                continue;
            CHECK_STR(lookup(s, (char *)f + 1, &rc, &mod, NULL), names[i]);
            CHECK(rc == 1);
            CHECK(strstr(mod, "lib2.so") != NULL);
        }
        /* local_fn's address, from the library's code that takes it. */
        int (*addr_of)(void) = (int (*)(void))dlsym(h, "flamme_local_addr");
        CHECK(addr_of != NULL);
        if (addr_of) {
            uintptr_t lo = (uintptr_t)addr_of & ~(uintptr_t)0xffffffffu;
            const void *lf = (const void *)(lo | (uint32_t)addr_of());
            CHECK_STR(lookup(s, lf, &rc, &mod, NULL), "local_fn");
        }
        flamme_symtab_free(s);
        dlclose(h);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The symbols of a large file are kept between processes (writer/symbols.c,
 * load_kept): a library of 3,000 functions (libc's with its debug file has
 * 3,700), built here, is named the same by
 * a table that parsed it and by one that read what the first kept; a kept
 * table with a name offset out of range is not used. */
TEST(symbols_kept_and_read_back)
{
    char dir[] = "/tmp/flamme_test_kept_XXXXXX", cmd[1200], so[128], rows[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(so, sizeof so, "%s/libmany.so", dir);
    snprintf(rows, sizeof rows, "%s/rows", dir);
    snprintf(cmd, sizeof cmd,
             "cd %s && for i in $(seq 3000); do echo \"int flamme_many_$i(int x) { return x + $i; }\"; "
             "done > m.c && cc -shared -fPIC -O0 m.c -o libmany.so", dir);
    int built = system(cmd) == 0;
    CHECK(built);
    void *h = built ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
    CHECK(h != NULL);
    if (!h)
        return;
    static const char *const probe[] = { "flamme_many_1", "flamme_many_1500", "flamme_many_3000" };
    flamme_cfi_cache_configure(rows);
    /* Rounds: parsed and kept; read back; read back after a name was
     * changed in the kept table (so it was read at all); parsed again after
     * every name offset was made out of range, then after the names' length
     * was made one that fits only when the sizes wrap around. The kept
     * bytes start at 128, after the table header (writer/cfi_cache.c). */
    static const char *const edit[] = {
        NULL, NULL, " b=b.replace(b'flamme_many_1500\\0',b'flamme_MANY_1500\\0')\n",
        " n=struct.unpack_from('<Q',b,128)[0]\n"
        " for i in range(n): struct.pack_into('<I',b,128+32+32*i+16,0xffffff)\n",
        /* as many symbols as the bytes could hold, and the names' length
         * that makes the sizes add up only modulo 2^64 */
        " L=len(b)-128; n=L//32\n"
        " struct.pack_into('<Q',b,128,n)\n"
        " struct.pack_into('<Q',b,152,(L-32-32*n)%(1<<64))\n"
    };
    for (int round = 0; round < 5; round++) {
        if (edit[round]) {
            snprintf(cmd, sizeof cmd,
                     "python3 -c \"import glob,struct\n"
                     "for p in glob.glob('%s/*.rows'):\n"
                     " b=bytearray(open(p,'rb').read())\n"
                     " if b[:7]!=b'FLMSYMS': continue\n"
                     "%s"
                     " open(p,'wb').write(b)\"", rows, edit[round]);
            CHECK(system(cmd) == 0);
        }
        flamme_symtab *s = flamme_symtab_new();
        int rc;
        const char *mod;
        for (size_t i = 0; i < 3; i++) {
            void *f = dlsym(h, probe[i]);
            CHECK(f != NULL);
            if (f)
                CHECK_STR(lookup(s, (char *)f + 2, &rc, &mod, NULL),
                          round == 2 && i == 1 ? "flamme_MANY_1500" : probe[i]);
        }
        flamme_symtab_free(s);
        if (round == 0) {
            snprintf(cmd, sizeof cmd, "ls %s | grep -c rows | grep -qx 1", rows);
            CHECK(system(cmd) == 0); /* kept once, by the first table */
        }
    }
    flamme_cfi_cache_configure(NULL);
    dlclose(h);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    RUN(own_functions);
    RUN(func_preferred_over_notype_alias);
    RUN(libc_function_and_offset);
    RUN(libc_static_via_debug_file);
    RUN(vdso);
    RUN(unmapped_and_new_mapping);
    RUN(bad_files_are_module_only);
    RUN(plt_entries_named);
    RUN(dynsym_fills_what_symtab_lacks);
    RUN(symbols_kept_and_read_back);
    return CHECK_DONE();
}
