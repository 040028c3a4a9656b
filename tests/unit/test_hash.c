/*
 * tests/unit/test_hash.c — common/hash.h: the keyed table hash is SipHash-2-4
 * (the reference vector), its key differs between processes, and a table
 * fed names that all collide under one fixed key would still spread under
 * the process's own key.
 */
#include "tests/unit/check.h"
#include "common/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

TEST(siphash_reference_vector)
{
    /* SipHash paper, appendix A: key 00..0f, message 00..0e */
    uint64_t k[2] = { 0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull };
    unsigned char m[15];
    for (int i = 0; i < 15; i++)
        m[i] = (unsigned char)i;
    CHECK(flamme_siphash(k, m, sizeof m) == 0xa129ca6149be45e5ull);
}

TEST(key_differs_between_processes)
{
    int fd[2];
    CHECK(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t h = flamme_table_hash("main", 4);
        _exit(write(fd[1], &h, sizeof h) == sizeof h ? 0 : 1);
    }
    uint64_t theirs = 0, mine = flamme_table_hash("main", 4);
    CHECK(read(fd[0], &theirs, sizeof theirs) == sizeof theirs);
    waitpid(pid, NULL, 0);
    CHECK(theirs != mine); /* 2^-64 odds of a false failure */
    CHECK(mine == flamme_table_hash("main", 4)); /* stable within a process */
}

TEST(collisions_under_a_known_key_spread_under_ours)
{
    /* Names made to share the low 10 bits under key 0 (what an attacker who
     * knew the key could prepare) land in many slots under the real key. */
    static const uint64_t zero[2] = { 0, 0 };
    char names[64][16];
    int n = 0;
    for (unsigned i = 0; n < 64; i++) {
        snprintf(names[n], sizeof names[n], "f%u", i);
        if ((flamme_siphash(zero, names[n], strlen(names[n])) & 1023) == 0)
            n++;
    }
    int used[1024] = { 0 }, distinct = 0;
    for (int i = 0; i < n; i++) {
        size_t s = flamme_table_hash(names[i], strlen(names[i])) & 1023;
        distinct += !used[s]++;
    }
    CHECK(distinct > 48);
}

int main(void)
{
    RUN(siphash_reference_vector);
    RUN(key_differs_between_processes);
    RUN(collisions_under_a_known_key_spread_under_ours);
    return CHECK_DONE();
}
