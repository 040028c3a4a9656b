/*
 * common/fds.c — high, checked descriptors (see fds.h).
 */
#include "common/fds.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Lowest number the agent moves its descriptors to: 64 below the soft
 * limit (1024 on most systems: 960..1023), so a program opening files one
 * after the other meets them only after some 950 of its own. */
static int floor_fd(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > 1u << 20)
        return 1024;
    long lim = (long)rl.rlim_cur;
    return (int)(lim >= 256 ? lim - 64 : lim / 2);
}

int flamme_fd_high(int fd, struct flamme_fd_id *id)
{
    if (fd < 0)
        return -1;
    struct stat st; /* what the returned number is, once known */
    int known = 0;
    int floor = floor_fd();
    if (fd < floor) {
        int hi = fcntl(fd, F_DUPFD_CLOEXEC, floor);
        if (hi >= 0) {
            /* The low number is closed only if it is still ours: a program
             * closing everything may have closed it and opened its own file
             * on it since (a window of two system calls). */
            struct stat low;
            known = fstat(hi, &st) == 0;
            if (known && fstat(fd, &low) == 0 && low.st_dev == st.st_dev &&
                low.st_ino == st.st_ino)
                close(fd);
            fd = hi;
        }
    }
    if (id) {
        if (!known)
            known = fstat(fd, &st) == 0;
        id->dev = known ? st.st_dev : 0;
        id->ino = known ? st.st_ino : 0;
    }
    return fd;
}

int flamme_fd_same_sigsafe(int fd, const struct flamme_fd_id *id)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == id->dev && st.st_ino == id->ino;
}

int flamme_open_high(const char *path, int flags, struct flamme_fd_id *id)
{
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0)
        return -1;
    return flamme_fd_high(fd, id);
}

void flamme_close_checked(int fd, const struct flamme_fd_id *id)
{
    int e = errno;
    if (flamme_fd_same_sigsafe(fd, id))
        close(fd);
    errno = e;
}
