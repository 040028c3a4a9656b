/*
 * tests/unit/test_buildid.c — writer/symbols.c on libraries whose GNU
 * build-id note is longer than the usual 20 bytes (the linker accepts any
 * length; 32 to 40 bytes made the debug-file path overflow its buffer; up
 * to 64 bytes are used for the debug-file path, longer ids are ignored).
 * Each library is built here with `cc -Wl,--build-id=0x...`, dlopen'd, and
 * one of its functions looked up: the name must come back, and nothing may
 * be written out of bounds (mk/symbols_asan.mk also runs this test built
 * with AddressSanitizer, which sees the overflow the plain build may not).
 */
#include "tests/unit/check.h"
#include "writer/symbols.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

/* Builds lib<n>.so with an n-byte build-id and function buildid_fn_<n>;
 * returns its dlopen handle or NULL. */
static void *build_lib(int n)
{
    char src[512], so[512], cmd[2048], hex[2 * 255 + 1];
    snprintf(src, sizeof src, "%s/lib%d.c", dir, n);
    snprintf(so, sizeof so, "%s/lib%d.so", dir, n);
    FILE *f = fopen(src, "w");
    if (!f)
        return NULL;
    fprintf(f, "int buildid_fn_%d(int x) { volatile int y = x; return y * 3 + %d; }\n", n, n);
    fclose(f);
    for (int i = 0; i < n; i++)
        sprintf(hex + 2 * i, "%02x", (unsigned)(0xa0 + i) & 0xff);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O1 -Wl,--build-id=0x%s -o '%s' '%s'", hex, so,
             src);
    if (system(cmd) != 0)
        return NULL;
    return dlopen(so, RTLD_NOW | RTLD_LOCAL);
}

TEST(long_build_ids)
{
    static const int lens[] = {20, 32, 36, 40, 64, 65, 255};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        int n = lens[i];
        void *h = build_lib(n);
        CHECK(h != NULL);
        if (!h)
            continue;
        char name[64];
        snprintf(name, sizeof name, "buildid_fn_%d", n);
        void *fn = dlsym(h, name);
        CHECK(fn != NULL);
        flamme_symtab *s = flamme_symtab_new();
        const char *got = "", *mod = "";
        uint64_t off;
        int rc = flamme_symtab_lookup(s, (uint64_t)(uintptr_t)fn + 1, &got, &mod, &off);
        CHECK(rc == 1);
        CHECK_STR(got, name);
        flamme_symtab_free(s);
        dlclose(h);
    }
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/flamme-test-buildid-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(long_build_ids);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE();
}
