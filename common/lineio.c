/*
 * common/lineio.c — see common/lineio.h.
 */
#include "common/lineio.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

ssize_t flamme_read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        char c;
        ssize_t k = recv(fd, &c, 1, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        if (c == '\n') {
            buf[n] = 0;
            return (ssize_t)n;
        }
        buf[n++] = c;
    }
    return -1;
}
