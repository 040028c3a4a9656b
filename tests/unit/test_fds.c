/*
 * tests/unit/test_fds.c — common/fds.h: the agent's descriptors move high,
 * and a program that closes everything and opens its own files never loses
 * one to the move. The program's part of the race is played by this file's
 * fcntl, which the move calls right after open: the number the agent just
 * got is closed and the program's file opened on it, as a daemon closing
 * 3..1023 then opening its files would do between the two calls (torture
 * closefds, once in a loaded CI run: the program's first file left empty,
 * its writes in the next one). For descriptors with no path (perf events,
 * eventfds), the window: a program's close waits while the agent makes one
 * and moves it high; and a program's open made during a window ends on the
 * number it would have had without the agent.
 */
#include "common/fds.h"
#include "tests/unit/check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
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

/* A program thread's close, as agent/blocking.c's interposer makes it. */
static atomic_int closed;
static void *program_close(void *arg)
{
    (void)arg;
    flamme_fd_close_begin();
    atomic_store(&closed, 1);
    flamme_fd_close_end();
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

TEST(a_program_close_waits_for_the_agents_window)
{
    atomic_store(&closed, 0);
    flamme_fd_window_enter();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, program_close, NULL) == 0);
    usleep(50000);
    CHECK(atomic_load(&closed) == 0); /* held while the agent makes its descriptor */
    /* The agent's own close inside its window does not wait. */
    int fd = open("/dev/null", O_RDONLY);
    flamme_fd_close_begin();
    close(fd);
    flamme_fd_close_end();
    flamme_fd_window_leave();
    pthread_join(t, NULL);
    CHECK(atomic_load(&closed) == 1);
}

TEST(a_window_waits_for_a_close_in_progress_a_bounded_time)
{
    /* A close in progress that never ends (one a signal handler interrupted,
     * the handler waiting for the window): the window goes on after ~10 ms. */
    flamme_fd_close_begin();
    double t0 = now_s();
    flamme_fd_window_enter(); /* this thread's close: counted as a program's */
    double waited = now_s() - t0;
    flamme_fd_window_leave();
    flamme_fd_close_end();
    CHECK(waited >= 0.009 && waited < 1.0);
}

/* The agent's part of the open race: in a window, a descriptor holds the
 * lowest number until the program has opened its file, then moves high. */
static _Atomic int agent_holds, program_opened;
static int agent_fd = -1;

static void *agent_transient(void *arg)
{
    flamme_fd_window_enter();
    agent_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    atomic_store(&agent_holds, 1);
    while (!atomic_load(&program_opened))
        usleep(1000);
    agent_fd = flamme_fd_high(agent_fd, NULL);
    flamme_fd_window_leave();
    return arg;
}

/* A program's open that ran while the agent held the lowest number gets
 * that number once the window is over (flamme_fd_open_settle), its file
 * and close-on-exec flag kept: a program started with stderr closed gets
 * 2 for its first file, as without the agent. */
TEST(a_program_open_during_a_window_gets_the_lowest_number)
{
    int lowest = open("/dev/null", O_RDONLY);
    close(lowest);
    atomic_store(&agent_holds, 0);
    atomic_store(&program_opened, 0);
    unsigned gen = flamme_fd_open_wait(); /* no window yet */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, agent_transient, NULL) == 0);
    while (!atomic_load(&agent_holds))
        usleep(1000);
    int fd = open(program_path, O_RDONLY | O_CLOEXEC); /* the program's call, mid-window */
    CHECK(fd > lowest);
    atomic_store(&program_opened, 1);
    fd = flamme_fd_open_settle(fd, gen); /* waits for the window to end */
    pthread_join(t, NULL);
    CHECK(fd == lowest);
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    struct stat a, b;
    CHECK(fstat(fd, &a) == 0 && stat(program_path, &b) == 0 && a.st_ino == b.st_ino);
    CHECK(agent_fd > fd);
    /* No window since: the number stays. */
    gen = flamme_fd_open_wait();
    int again = open(program_path, O_RDONLY);
    CHECK(flamme_fd_open_settle(again, gen) == again);
    close(again);
    close(fd);
    close(agent_fd);
}

int main(void)
{
    make_files();
    RUN(a_file_moves_high_and_its_low_number_is_closed);
    RUN(the_programs_file_on_the_agents_number_is_left_alone);
    RUN(a_program_close_waits_for_the_agents_window);
    RUN(a_window_waits_for_a_close_in_progress_a_bounded_time);
    RUN(a_program_open_during_a_window_gets_the_lowest_number);
    unlink(agent_path);
    unlink(program_path);
    return CHECK_DONE();
}
