/* tests/unwind/dlwork.c — a plugin library for tests/unwind/dlprog.ml,
 * built with -O2 -fomit-frame-pointer (as most distribution libraries are):
 * only its unwind tables lead out of it. dlprog loads it, calls dlw_work and
 * unloads it, many times a second. */
__attribute__((noinline)) long dlw_inner(long n, long acc)
{
    for (long i = 0; i < n; i++)
        acc = acc * 6364136223846793005L + (i ^ (acc >> 17));
    return acc;
}

__attribute__((noinline)) long dlw_mid(long n)
{
    long a = 0;
    for (int k = 0; k < 4; k++)
        a += dlw_inner(n, k);
    return a;
}

long dlw_work(long n)
{
    return dlw_mid(n) ^ 1;
}
