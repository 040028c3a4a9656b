/*
 * tests/unit/test_folded.c — the folded-stack parser (tools/folded.c): line
 * syntax as flamegraph.pl reads it, interning, reading from a descriptor.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tools/folded.h"

/* Parses one line into a fresh table; returns the parse result. */
static int parse1(struct flamme_folded *f, const char *line)
{
    const char *why = NULL;
    flamme_folded_init(f);
    return flamme_folded_parse_line(f, line, strlen(line), &why);
}

static const char *frame(const struct flamme_folded *f, size_t stack, uint32_t i)
{
    return flamme_folded_name(f, f->ids[f->stacks[stack].off + i]);
}

TEST(spaces_in_frames)
{
    struct flamme_folded f;
    CHECK(parse1(&f, "main;do some work;Stdlib.List.map 12") == 0);
    CHECK(f.nstacks == 1 && f.stacks[0].n == 3);
    CHECK_STR(frame(&f, 0, 1), "do some work");
    CHECK_STR(frame(&f, 0, 2), "Stdlib.List.map");
    CHECK(f.stacks[0].count == 12 && !f.stacks[0].has_before);
    flamme_folded_free(&f);
}

TEST(decimal_counts)
{
    struct flamme_folded f;
    CHECK(parse1(&f, "a;b 12.5") == 0 && f.stacks[0].count == 12.5);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "a;b 12.") == 0 && f.stacks[0].count == 12);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "a;b .5") == -1);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "a;b 962854306123") == 0 && f.stacks[0].count == 962854306123.0);
    flamme_folded_free(&f);
}

TEST(differential_lines)
{
    struct flamme_folded f;
    CHECK(parse1(&f, "a;b 10 30") == 0);
    CHECK(f.stacks[0].has_before && f.stacks[0].before == 10 && f.stacks[0].count == 30);
    CHECK(f.differential == 1 && f.total == 30);
    CHECK_STR(frame(&f, 0, 1), "b");
    flamme_folded_free(&f);
}

TEST(bad_and_blank_lines)
{
    struct flamme_folded f;
    CHECK(parse1(&f, "no count") == -1);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "a;b -3") == -1);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "a;b 1e5") == -1);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "42") == -1);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "   ") == 1 && f.nstacks == 0);
    flamme_folded_free(&f);
    CHECK(parse1(&f, "a;b 7\r") == 0 && f.stacks[0].count == 7);
    CHECK_STR(frame(&f, 0, 1), "b");
    flamme_folded_free(&f);
}

TEST(duplicates_share_names)
{
    struct flamme_folded f;
    const char *why;
    flamme_folded_init(&f);
    CHECK(flamme_folded_parse_line(&f, "x;y 1", 5, &why) == 0);
    CHECK(flamme_folded_parse_line(&f, "x;y 2", 5, &why) == 0);
    CHECK(f.nstacks == 2 && f.nnames == 2 && f.total == 3);
    CHECK(flamme_folded_lookup(&f, "y", 1) == f.ids[1]);
    CHECK(flamme_folded_lookup(&f, "z", 1) == UINT32_MAX);
    flamme_folded_free(&f);
}

TEST(read_fd_many_lines_and_long_line)
{
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        FILE *o = fdopen(p[1], "w");
        for (int i = 0; i < 20000; i++)
            fprintf(o, "main;f%d 1\n", i % 100);
        for (int i = 0; i < 300000; i++) /* one line much longer than the read buffer */
            fputs("recursive_function;", o);
        fputs("leaf 5\nbad line\nlast;line 2", o); /* no final newline */
        fclose(o);
        _exit(0);
    }
    close(p[1]);
    struct flamme_folded f;
    flamme_folded_init(&f);
    CHECK(flamme_folded_read_fd(&f, p[0], "pipe") == 0);
    close(p[0]);
    waitpid(pid, NULL, 0);
    CHECK(f.nstacks == 20002);
    CHECK(f.bad_lines == 1);
    CHECK(f.total == 20000 + 5 + 2);
    CHECK(f.stacks[20000].n == 300001);
    CHECK(f.nnames == 1 + 100 + 2 + 2);
    flamme_folded_free(&f);
}

/* The sniffed head of a stream is parsed first, even when a line spans it. */
TEST(read_fd_head_prefix)
{
    int p[2];
    CHECK(pipe(p) == 0);
    const char *rest = "n;b 2\nm;c 3\n";
    CHECK(write(p[1], rest, strlen(rest)) == (ssize_t)strlen(rest));
    close(p[1]);
    struct flamme_folded f;
    flamme_folded_init(&f);
    CHECK(flamme_folded_read_fd_head(&f, p[0], "pipe", "x;a 1\nmai", 9) == 0);
    close(p[0]);
    CHECK(f.nstacks == 3 && f.total == 6 && f.bad_lines == 0);
    CHECK(flamme_folded_lookup(&f, "main", 4) != UINT32_MAX); /* "mai" + "n;b 2" */
    CHECK(f.stacks[1].n == 2 && f.stacks[1].count == 2);
    flamme_folded_free(&f);
}

int main(void)
{
    RUN(spaces_in_frames);
    RUN(decimal_counts);
    RUN(differential_lines);
    RUN(bad_and_blank_lines);
    RUN(duplicates_share_names);
    RUN(read_fd_many_lines_and_long_line);
    RUN(read_fd_head_prefix);
    return CHECK_DONE();
}
