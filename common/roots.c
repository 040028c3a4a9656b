/*
 * common/roots.c — thread-root names (see roots.h).
 */
#include "common/roots.h"

#include <string.h>

static const char *const thread_roots[] = {"main",         "__libc_start_call_main",
                                           "__libc_start_main", "start_thread",
                                           "clone3",       "clone",
                                           "_start",       "_dl_start_user"};

int flamme_is_thread_root(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof thread_roots / sizeof thread_roots[0]; i++)
        if (strlen(thread_roots[i]) == n && memcmp(s, thread_roots[i], n) == 0)
            return 1;
    return n > 9 && memcmp(s, "[libc.so.", 9) == 0 && s[n - 1] == ']';
}
