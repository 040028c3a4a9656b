/*
 * tools/cmds.h — the verbs of the `flamme` command. One file per verb
 * (tools/<verb>.c); tools/main.c dispatches on argv[1].
 * Each entry gets argv with argv[0] = the verb name, returns the exit status.
 * Convention: bad input prints one line "flamme <verb>: what: where" to
 * stderr and returns 2; an I/O failure returns 1.
 */
#ifndef FLAMME_TOOLS_CMDS_H
#define FLAMME_TOOLS_CMDS_H

int flamme_cmd_record(int argc, char **argv);
int flamme_cmd_collapse(int argc, char **argv);
int flamme_cmd_svg(int argc, char **argv);
int flamme_cmd_report(int argc, char **argv);
int flamme_cmd_export(int argc, char **argv);
int flamme_cmd_diff(int argc, char **argv);
int flamme_cmd_push(int argc, char **argv);
int flamme_cmd_attach(int argc, char **argv);

#endif
