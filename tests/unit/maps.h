/*
 * tests/unit/maps.h — the unit tests' reading of /proc/self/maps: where the
 * executable mapping holding a code address lies (the range a test hands
 * to flamme_cfi_add_module). Test code only.
 */
#ifndef FLAMME_TESTS_MAPS_H
#define FLAMME_TESTS_MAPS_H
#include <stdint.h>
#include <stdio.h>

/* The r-x mapping of /proc/self/maps holding addr. Returns 1, or 0. */
static inline int exec_mapping_of(uintptr_t addr, uint64_t *lo, uint64_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4400];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &a, &b, perms) == 3 && perms[2] == 'x' && addr >= a &&
            addr < b) {
            *lo = a;
            *hi = b;
            found = 1;
        }
    }
    if (f)
        fclose(f);
    return found;
}

#endif
