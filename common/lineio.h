/*
 * common/lineio.h — one text line from a socket, for the control channel
 * of `flamme attach` (agent/control.c, tools/attach.c). Not async-signal-safe.
 */
#ifndef FLAMME_COMMON_LINEIO_H
#define FLAMME_COMMON_LINEIO_H
#include <stddef.h>
#include <sys/types.h>

/* Reads one line from fd into buf (cap bytes, NUL-terminated, without its
 * newline), waiting at most timeout_ms for each byte (-1: no limit).
 * Returns its length, or -1 at EOF, error, timeout or a line too long. */
ssize_t flamme_read_line(int fd, char *buf, size_t cap, int timeout_ms);

#endif
