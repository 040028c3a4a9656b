/*
 * tests/unit/check.h — the unit tests' tiny assertion kit. A test file
 * defines tests with TEST(name) and a main() calling RUN(name) for each, then
 * returns CHECK_DONE(). Each failed CHECK prints file:line and the expression.
 * The summary line is "unit <file>: N passed, N failed".
 */
#ifndef FLAMME_TESTS_CHECK_H
#define FLAMME_TESTS_CHECK_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int check_failed_in_test, check_passed, check_failed;

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    check_failed_in_test = 1; } } while (0)
#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) { \
    fprintf(stderr, "  FAIL %s:%d: %s == %s (\"%s\" vs \"%s\")\n", __FILE__, __LINE__, #a, #b, \
            a_ ? a_ : "(null)", b_ ? b_ : "(null)"); check_failed_in_test = 1; } } while (0)
#define TEST(name) static void name(void)
#define RUN(name) do { check_failed_in_test = 0; name(); \
    if (check_failed_in_test) { check_failed++; fprintf(stderr, "not ok %s\n", #name); } \
    else { check_passed++; printf("ok %s\n", #name); } } while (0)
/* One step of xorshift64 (13, 7, 17) on *state: the tests' reproducible
 * random numbers, each file with its own seed. */
static inline uint64_t check_xorshift(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

#define CHECK_DONE() (printf("unit %s: %d passed, %d failed\n", __FILE__, check_passed, check_failed), \
    check_failed ? 1 : 0)

#endif
