/*
 * tools/main.c — the `flamme` command: dispatches to one verb per file.
 */
#include <stdio.h>
#include <string.h>

#include "common/profile.h"
#include "tools/cmds.h"

#ifndef FLAMME_TOOL_VERSION /* set by mk/install.mk from flamme.opam */
#define FLAMME_TOOL_VERSION "unknown"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flamme <command> [options]\n"
            "  record [-F HZ] [-o FILE] [--depth N] -- CMD ARGS...   profile CMD (an OCaml 5 program)\n"
            "  collapse FILE... [--threads] [--raw] [--fold-gc]         print folded stacks\n"
            "  svg FILE... [-o OUT.svg] [--title T] [--threads]        interactive flamegraph (profile or folded)\n"
            "  report FILE...                                         summary: threads, completeness, top functions\n"
            "  diff BEFORE AFTER [-o OUT.svg] [--normalize] [--folded]  differential flamegraph of two runs\n"
            "  export FILE... --format speedscope|pprof|folded [-o OUT] [--threads]\n"
            "                                                         for speedscope, pprof and other tools\n"
            "  attach PID [--duration S] [-F HZ] [-o FILE]            profile a running program (agent dormant)\n"
            "  top [-F HZ] [-o FILE] -- CMD ARGS... | top FILE        live view: top functions, refreshed each second\n"
            "  push FILE... | --watch DIR [--url URL] [--delete]      send profiles to Grafana Pyroscope (pprof)\n"
            "  --version                                              this flamme's version and profile formats\n"
            "Several FILEs (e.g. the segments of FLAMME_PERIOD) are read as one profile.\n"
            "Run `flamme <command> --help` for a command's options.\n");
}

/* The reader (common/profile.c) takes every 1.x file and every minor
 * version of its major (records it does not know are skipped), and rejects
 * newer majors. */
static void version(void)
{
    printf("flamme %s\n"
           "profile format: writes %d.%d, reads %d.0 to %d.%d and later %d.x files "
           "(records of newer minors are skipped)\n",
           FLAMME_TOOL_VERSION, FLAMME_VERSION_MAJOR, FLAMME_VERSION_MINOR, FLAMME_VERSION_MAJOR_OLDEST,
           FLAMME_VERSION_MAJOR, FLAMME_VERSION_MINOR, FLAMME_VERSION_MAJOR);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *verb = argv[1];
    if (!strcmp(verb, "record"))
        return flamme_cmd_record(argc - 1, argv + 1);
    if (!strcmp(verb, "collapse"))
        return flamme_cmd_collapse(argc - 1, argv + 1);
    if (!strcmp(verb, "svg"))
        return flamme_cmd_svg(argc - 1, argv + 1);
    if (!strcmp(verb, "report"))
        return flamme_cmd_report(argc - 1, argv + 1);
    if (!strcmp(verb, "export"))
        return flamme_cmd_export(argc - 1, argv + 1);
    if (!strcmp(verb, "push"))
        return flamme_cmd_push(argc - 1, argv + 1);
    if (!strcmp(verb, "attach"))
        return flamme_cmd_attach(argc - 1, argv + 1);
    if (!strcmp(verb, "top"))
        return flamme_cmd_top(argc - 1, argv + 1);
    if (!strcmp(verb, "diff"))
        return flamme_cmd_diff(argc - 1, argv + 1);
    if (!strcmp(verb, "--version") || !strcmp(verb, "version")) {
        version();
        return 0;
    }
    if (!strcmp(verb, "help") || !strcmp(verb, "--help") || !strcmp(verb, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "flamme: unknown command '%s'\n", verb);
    usage(stderr);
    return 2;
}
