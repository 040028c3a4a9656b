/*
 * common/fds.h — the agent's file descriptors live far from the program's.
 *
 * Programs assume the low numbers are theirs: daemons close 3..1024 or
 * everything but a few, dup2 over numbers they chose, and select() only
 * takes numbers below FD_SETSIZE. So every descriptor the agent keeps (the
 * profile, the writer's doorbell and pipe, perf events) is moved just below
 * the RLIMIT_NOFILE soft limit, and is checked to still be the agent's
 * (same device and inode as when it was made) before each use: a number the
 * program closed and reused is never written, read or closed by the agent.
 * Files the writer opens for a moment (ELF images, debug files) go the same
 * way: a program closing everything while the writer reads an image would
 * otherwise close the writer's low number, reopen its own file on it, and
 * have the writer close that one (torture closefds: EBADF in the program).
 * Who: any thread; flamme_fd_same_sigsafe also from signal handlers. In
 * common/ because both sides use it: agent/ (perf events, the control
 * socket, the doorbell check in the handler) and writer/ (the profile, ELF
 * and debug files; the tools link those readers too).
 */
#ifndef FLAMME_COMMON_FDS_H
#define FLAMME_COMMON_FDS_H
#include <stdio.h>
#include <sys/types.h>

/* What a descriptor was when the agent made it. */
struct flamme_fd_id {
    dev_t dev;
    ino_t ino;
};

/* Moves fd to a high number (close-on-exec), closing the original unless
 * the program has closed it and reused the number meanwhile (the same open
 * file description, by kcmp; where kcmp is refused, the same file), and
 * records its identity in *id (when id is not NULL). Returns the new
 * number, or fd itself if it cannot be moved (no higher number free), or
 * -1 when fd < 0. */
int flamme_fd_high(int fd, struct flamme_fd_id *id);

/* flamme_fd_high for a descriptor just opened (or created) from path,
 * checked as flamme_open_high checks its own: if the program had taken the
 * number before the move, path is opened again with reopen_flags (a file
 * just created: without O_CREAT, O_EXCL or O_TRUNC). Returns the
 * descriptor, or -1. */
int flamme_fd_high_path(int fd, const char *path, int reopen_flags, struct flamme_fd_id *id);

/* open(path, flags | O_CLOEXEC), moved high as flamme_fd_high does, and
 * checked to be path's file once moved: a program that closed the number
 * open returned and opened its own file on it before the move keeps that
 * file (only the agent's copy of it is closed), and the open is tried again.
 * Returns the descriptor or -1 (errno from open; EAGAIN after 8 such
 * tries). */
int flamme_open_high(const char *path, int flags, struct flamme_fd_id *id);

/* fdopen(fd, mode), or NULL with fd closed (errno kept). */
FILE *flamme_fdopen_or_close(int fd, const char *mode);

/* fopen(path, "re") on a descriptor from flamme_open_high: a file read
 * line by line (/proc/self/maps) never holds one of the program's low
 * numbers. Returns the stream, or NULL (errno). */
FILE *flamme_fopen_high(const char *path);

/* The window between making a descriptor that has no path to check it by
 * (a perf event, an eventfd, a memfd, a socket) and moving it high: a
 * program closing every number meanwhile would close it and could open its
 * own file on it, which the move would then take as the agent's (torture
 * closefds, perf engine: the program's first file closed under it, EBADF).
 * enter, around the making and flamme_fd_high, waits for the program's
 * closes in progress (at most ~10 ms: a close a signal handler interrupted
 * may never end while the window waits), and the program's close, dup2,
 * dup3, close_range and closefrom, interposed (agent/blocking.c), wait for
 * the windows open to end (close_begin/close_end around the call). A
 * thread's own closes inside its window do not wait. Counters reset in a
 * fork child (flamme_fd_window_atfork_child). */
void flamme_fd_window_enter(void);
void flamme_fd_window_leave(void);
void flamme_fd_close_begin(void);
void flamme_fd_close_end(void);
void flamme_fd_window_atfork_child(void);

/* Before the program's calls that take the lowest free number (open,
 * openat, pipe, socket, dup: interposed, agent/blocking.c): waits for the
 * agent's windows to end, and returns their count as it was before the
 * wait, for flamme_fd_open_settle. flamme_open_high opens in a window, and
 * its descriptor holds a low number until moved high: a program started with
 * stderr closed got 3, not 2, for its first file in ~1 run of 100 (tests/e2e
 * test_stderr_file). The call is not counted as in progress, so a window
 * never waits for it (a FIFO's open may block for good). No wait inside a
 * window of the calling thread. */
unsigned flamme_fd_open_wait(void);

/* After open or openat returned fd: if a window began since
 * flamme_fd_open_wait returned gen, its descriptor may have held a lower
 * number during the call; once the windows are over, fd moves down to the
 * lowest free number (what the call would have returned a moment later),
 * its close-on-exec flag kept. Returns the program's descriptor. errno
 * unchanged. */
int flamme_fd_open_settle(int fd, unsigned gen);

/* Closes fd only if it is still the descriptor recorded in *id: a number
 * the program reused meanwhile is left alone. */
void flamme_close_checked(int fd, const struct flamme_fd_id *id);

/* 1 if fd is still the descriptor recorded in *id. async-signal-safe: yes. */
int flamme_fd_same_sigsafe(int fd, const struct flamme_fd_id *id);

#endif
