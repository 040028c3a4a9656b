/*
 * tests/unit/test_fds.c — common/fds.h: the agent's descriptors move high,
 * and a program that closes everything and opens its own files never loses
 * one to the move. The program's part of the race is played by this file's
 * fcntl, which the move calls right after open: the number the agent just
 * got is closed and the program's file opened on it, as a daemon closing
 * 3..1023 then opening its files would do between the two calls (torture
 * closefds, once in a loaded CI run: the program's first file left empty,
 * its writes in the next one).
 */
#include "common/fds.h"
#include "tests/unit/check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char agent_path[64], program_path[64];
static int race;           /* 1: the next F_DUPFD_CLOEXEC plays the program first */
static int program_fd = -1; /* the program's file, opened on the agent's number */

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    if (race && cmd == F_DUPFD_CLOEXEC) {
        race = 0;
        close(fd);
        program_fd = open(program_path, O_RDONLY);
    }
    return (int)syscall(SYS_fcntl, fd, cmd, arg);
}

static int same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void make_files(void)
{
    snprintf(agent_path, sizeof agent_path, "/tmp/flamme-fds-agent.%d", (int)getpid());
    snprintf(program_path, sizeof program_path, "/tmp/flamme-fds-program.%d", (int)getpid());
    int a = open(agent_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int p = open(program_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (a >= 0)
        close(a);
    if (p >= 0)
        close(p);
}

TEST(a_file_moves_high_and_its_low_number_is_closed)
{
    int low = open("/dev/null", O_RDONLY); /* the number the next open gets */
    close(low);
    struct flamme_fd_id id;
    int fd = flamme_open_high(agent_path, O_RDONLY, &id);
    CHECK(fd > low);
    CHECK(same_file(fd, agent_path));
    CHECK(flamme_fd_same_sigsafe(fd, &id));
    CHECK(syscall(SYS_fcntl, low, F_GETFD) < 0 && errno == EBADF);
    flamme_close_checked(fd, &id);
}

TEST(the_programs_file_on_the_agents_number_is_left_alone)
{
    struct flamme_fd_id id;
    race = 1;
    program_fd = -1;
    int fd = flamme_open_high(agent_path, O_RDONLY, &id);
    CHECK(program_fd >= 0);
    /* The program's descriptor is still open, on its own file. */
    CHECK(syscall(SYS_fcntl, program_fd, F_GETFD) >= 0);
    CHECK(same_file(program_fd, program_path));
    /* The agent has the file it asked for, high. */
    CHECK(fd >= 0 && fd != program_fd);
    CHECK(same_file(fd, agent_path));
    CHECK(flamme_fd_same_sigsafe(fd, &id));
    flamme_close_checked(fd, &id);
    close(program_fd);
}

int main(void)
{
    make_files();
    RUN(a_file_moves_high_and_its_low_number_is_closed);
    RUN(the_programs_file_on_the_agents_number_is_left_alone);
    unlink(agent_path);
    unlink(program_path);
    return CHECK_DONE();
}
