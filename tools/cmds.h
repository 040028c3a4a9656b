/*
 * tools/cmds.h — the verbs of the `flamme` command. One file per verb
 * (tools/<verb>.c); tools/main.c dispatches on argv[1].
 * Each entry gets argv with argv[0] = the verb name, returns the exit status.
 * Convention: bad input prints one line "flamme <verb>: what: where" to
 * stderr and returns 2; an I/O failure returns 1.
 */
#ifndef FLAMME_TOOLS_CMDS_H
#define FLAMME_TOOLS_CMDS_H
#include <sys/types.h>

int flamme_cmd_record(int argc, char **argv);
int flamme_cmd_collapse(int argc, char **argv);
int flamme_cmd_svg(int argc, char **argv);
int flamme_cmd_report(int argc, char **argv);
int flamme_cmd_export(int argc, char **argv);
int flamme_cmd_diff(int argc, char **argv);
int flamme_cmd_push(int argc, char **argv);
int flamme_cmd_attach(int argc, char **argv);
int flamme_cmd_top(int argc, char **argv);

/* (tools/record.c) path made absolute against the working directory into
 * out (cap bytes). Returns 0, or -1 after one line "flamme VERB: ..." (no
 * working directory, too long). */
int flamme_abs_path(const char *verb, const char *path, char *out, size_t cap);

/* (tools/record.c) Starts cmd (argv form, NULL-terminated) with the agent
 * preloaded, writing its profile to out (an existing file there becomes
 * out.old); the agent's other settings come from the environment
 * (FLAMME_HZ, ...), which this changes for the caller too. Returns the
 * child's pid, or -1 after one line "flamme VERB: ..." with *rc the exit
 * status to return (1, 2). A child that cannot exec cmd exits 127. */
pid_t flamme_record_spawn(const char *verb, const char *out, char **cmd, int *rc);

struct stat;
/* (tools/push.c) Seconds since the data st describes last changed (its
 * mtime against CLOCK_REALTIME, to the nanosecond); -1 if the clock cannot
 * be read. Tells a profile still being written (push --watch, top FILE). */
double flamme_file_age(const struct stat *st);

#endif
