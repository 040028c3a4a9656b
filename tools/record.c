/*
 * tools/record.c — `flamme record [-F HZ] [-o FILE] [--depth N] -- CMD ARGS…`
 * Runs CMD with libflamme.so preloaded, waits for it, then prints one
 * summary line (samples, threads, lost, completeness, path) and exits with
 * CMD's status (128+N if CMD died of signal N).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/outfile.h"
#include "common/profile.h"
#include "common/roots.h"
#include "tools/collapse.h"
#include "tools/cmds.h"
#include "writer/elf.h"

static void record_usage(FILE *f)
{
    fprintf(f, "usage: flamme record [-F HZ] [-o FILE] [--depth N] [--engine E] [--wall] [--period S]\n"
               "                     [--alloc[=RATE]] [--live] -- CMD ARGS...\n"
               "  -F, --freq HZ    samples per CPU-second per thread (default 99)\n"
               "  --engine E       auto|perf|timer|itimer (default auto: perf, or timer to 100 Hz\n"
               "                   where perf events may not sample the kernel)\n"
               "  --wall           wall-clock sampling: blocked threads too (off-CPU time)\n"
               "  -o, --output F   profile path (default flamme.flm; an old one becomes F.old)\n"
               "  --depth N        max frames per sample (default 16384)\n"
               "  --period S       a continuous profile: one complete file per S seconds,\n"
               "                   F's name + .000001, .000002, ... (FLAMME_PERIOD); an earlier\n"
               "                   run's segments to F are removed first\n"
               "  --alloc[=RATE]   also sample allocations (OCaml 5.3+, FLAMME_ALLOC): a program that\n"
               "                   links the flamme library takes RATE (per word, default 1e-4) as\n"
               "                   Flamme.start's ~alloc (Gc.Memprof); any other is sampled by heap\n"
               "                   fill (one stack per minor collection; bytes only, biased: see\n"
               "                   doc/design.md)\n"
               "  --live           with --alloc, library only: track sampled blocks until they die\n"
               "                   (FLAMME_LIVE=1)\n"
               "Child OCaml processes started by CMD write F.<pid>, and OCaml programs a\n"
               "process execs F.<pid>.2, .3, ... when its name is taken (those of an earlier\n"
               "run to F are removed first).\n");
}

/* Finds libflamme.so: beside this executable (the build tree), else
 * ../lib/flamme/ relative to it (an installed tree, wherever it was moved),
 * else $FLAMME_AGENT. Returns 0 and fills out, or -1 after printing the
 * places it looked. */
static int find_agent(const char *verb, char *out, size_t len)
{
    char dir[PATH_MAX - 64] = "";
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n > 0) {
        dir[n] = 0;
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        snprintf(out, len, "%s/libflamme.so", dir);
        if (access(out, R_OK) == 0)
            return 0;
        snprintf(out, len, "%s/../lib/flamme/libflamme.so", dir);
        if (access(out, R_OK) == 0)
            return 0;
    }
    const char *env = getenv("FLAMME_AGENT");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        if (access(out, R_OK) == 0)
            return 0;
    }
    fprintf(stderr,
            "flamme %s: cannot find the agent libflamme.so (looked in %s/ and %s/../lib/flamme/%s%s); "
            "set FLAMME_AGENT to its path\n",
            verb, dir, dir, env && *env ? ", FLAMME_AGENT=" : "", env && *env ? env : "");
    return -1;
}

/* Parses a positive integer option value; prints the error line and returns
 * -1 when malformed. */
static long parse_pos(const char *opt, const char *v, long max)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || x < 1 || x > max) {
        fprintf(stderr, "flamme record: %s needs an integer in 1..%ld, got '%s'\n", opt, max,
                v ? v : "");
        return -1;
    }
    return x;
}

/* 1 if the stack's root-most frame is a thread's first function (named as
 * `flamme collapse` shows it, so record and report agree). */
static int reaches_root(const struct flamme_profile *p, const struct flamme_sample *s)
{
    if (s->flags & FLAMME_SAMPLE_TRUNCATED || s->stack_id >= p->nstacks)
        return 0;
    const struct flamme_stack *st = &p->stacks[s->stack_id];
    if (st->n == 0 || st->frames[st->n - 1] >= p->nframes)
        return 0;
    const struct flamme_frame *f = &p->frames[st->frames[st->n - 1]];
    if (*f->function)
        return flamme_is_thread_root(f->function, strlen(f->function));
    char unnamed[256];
    const char *base = strrchr(f->module, '/');
    int len = snprintf(unnamed, sizeof unnamed, "[%s]", base ? base + 1 : f->module);
    return len > 0 && (size_t)len < sizeof unnamed && flamme_is_thread_root(unnamed, (size_t)len);
}

/* Prints the summary line for the profile at path. Returns 0, or -1 if it
 * could not be read. */
static int summarize_many(const char *const *paths, size_t n, const char *what);

static int summarize(const char *path)
{
    return summarize_many(&path, 1, path);
}

/* With FLAMME_PERIOD the run wrote segments PATH.NNNNNN.flm (or PATH's
 * name before ".flm"; agent/config.h): one summary for all of them.
 * Returns 0, or -1 if there is none (or they cannot be read). */
static int summarize_segments(const char *out, int pid)
{
    size_t cap = 0, n = 0;
    char **paths = NULL;
    for (unsigned seq = 1;; seq++) {
        char path[PATH_MAX + 32];
        struct stat st;
        if (flamme_out_name(out, pid, 1, seq, path, sizeof path) != 0 || lstat(path, &st) != 0 ||
            !S_ISREG(st.st_mode))
            break;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **a = realloc(paths, cap * sizeof *a);
            if (!a)
                break;
            paths = a;
        }
        if (!(paths[n] = strdup(path)))
            break;
        n++;
    }
    int rc = -1;
    if (n) {
        char what[2 * PATH_MAX + 64];
        if (n == 1)
            snprintf(what, sizeof what, "1 segment, %s", paths[0]);
        else
            snprintf(what, sizeof what, "%zu segments, %s .. %s", n, paths[0], paths[n - 1]);
        rc = summarize_many((const char *const *)paths, n, what);
    }
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    return rc;
}

/* A profile without a sample is most often a run shorter than one
 * sampling period of CPU time: say so, with the figures, rather than leave
 * an empty flamegraph to be puzzled over. Nothing when the process's CPU
 * time is not in the profile (agents before 2026-11-28). */
static void hint_no_samples(const struct flamme_profile *p)
{
    const char *v = flamme_profile_info(p, "process_cpu_ns");
    char *end;
    unsigned long long ns = v ? strtoull(v, &end, 10) : 0;
    if (!v || *end || !p->hdr.hz)
        return;
    fprintf(stderr,
            "flamme: no samples: the process used %.1f ms of CPU in all, and at %u Hz a thread "
            "is sampled once per %.1f ms of its CPU time (raise -F, or profile a longer run)\n",
            (double)ns / 1e6, p->hdr.hz, 1e3 / p->hdr.hz);
}

/* How many of the profiles at paths belong to a process that still runs
 * (its header's pid alive): a fork child the run's command left running,
 * a daemon, is still writing its profile when the command ends. */
static size_t still_running(const char *const *paths, size_t n)
{
    size_t running = 0;
    for (size_t i = 0; i < n; i++)
        running += flamme_profile_writer(paths[i]) != 0;
    return running;
}

static int summarize_many(const char *const *paths, size_t n, const char *what)
{
    struct flamme_profile p;
    char err[512];
    if (flamme_profile_load_many(paths, n, &p, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "flamme record: %s\n", err);
        return -1;
    }
    uint64_t weight = 0, complete = 0;
    for (size_t i = 0; i < p.nsamples; i++) {
        weight += p.samples[i].weight;
        /* Weighted like `flamme report`, so both print the same figure. */
        if (reaches_root(&p, &p.samples[i]))
            complete += p.samples[i].weight;
    }
    const char *engine = flamme_profile_info(&p, "engine");
    if (engine && strspn(engine, "abcdefghijklmnopqrstuvwxyz0123456789-_") != strlen(engine))
        engine = NULL; /* printed on the terminal: only what an agent writes */
    const char *mode = flamme_profile_info(&p, "mode");
    size_t running = p.truncated || !p.complete ? still_running(paths, n) : 0;
    char note[96] = "";
    if (running == 1 && n == 1)
        snprintf(note, sizeof note, " (still being written: its process runs on)");
    else if (running)
        snprintf(note, sizeof note, " (%zu still being written: their processes run on)", running);
    else if (p.truncated || !p.complete)
        snprintf(note, sizeof note, " (profile truncated: program killed?)");
    fprintf(stderr,
            "flamme: %zu samples, %zu threads, %llu lost, complete %.1f%%, engine %s%s, wrote %s%s\n",
            p.nsamples, p.nthreads, (unsigned long long)p.lost,
            weight ? 100.0 * (double)complete / (double)weight : 0.0,
            engine ? engine : "?", mode && !strcmp(mode, "wall") ? " (wall clock)" : "", what, note);
    if (!weight && n == 1)
        hint_no_samples(&p);
    flamme_profile_free(&p);
    return 0;
}

/* The PATH.<pid> files beside PATH (profiles of child processes), as a
 * new array of new strings (*n set; NULL and 0 when none or no memory). */
static char **child_files(const char *path, size_t *n)
{
    char dir[PATH_MAX], base[PATH_MAX];
    *n = 0;
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        snprintf(base, sizeof base, "%s", slash + 1);
        *slash = 0;
        if (!*dir)
            strcpy(dir, "/");
    } else {
        snprintf(base, sizeof base, "%s", path);
        strcpy(dir, ".");
    }
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    size_t bl = strlen(base), cap = 0;
    char **list = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        /* PATH.<pid>, or PATH.<pid>.<k> (a later exec'd image of that
         * process, or a pid used again, agent/agent.c). A pid has no
         * leading zero; a segment's number (PATH.000001, FLAMME_PERIOD with
         * a PATH not ending in .flm) does. */
        if (strncmp(nm, base, bl) || nm[bl] != '.' || nm[bl + 1] < '1' || nm[bl + 1] > '9')
            continue;
        const char *rest = nm + bl + 1 + strspn(nm + bl + 1, "0123456789");
        if (*rest == '.' && rest[1] >= '1' && rest[1] <= '9')
            rest += 1 + strspn(rest + 1, "0123456789");
        if (*rest)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **a = realloc(list, cap * sizeof *a);
            if (!a)
                break;
            list = a;
        }
        size_t len = strlen(dir) + strlen(nm) + 2;
        if (!(list[*n] = malloc(len)))
            break;
        snprintf(list[*n], len, "%s/%s", dir, nm);
        (*n)++;
    }
    closedir(d);
    return list;
}

static void free_files(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* Child profiles of one command (the basename of its argv[0]). */
struct by_cmd {
    char name[64];
    size_t files;
    size_t samples;
    const char *file; /* the one file, when files == 1 */
};

static int by_samples(const void *a, const void *b)
{
    const struct by_cmd *x = a, *y = b;
    return x->samples != y->samples ? (x->samples < y->samples ? 1 : -1) : strcmp(x->name, y->name);
}

#define BY_CMD_MAX 64  /* commands told apart; the rest count as "others" */
#define BY_CMD_SHOWN 8 /* printed, by samples */

/* Which commands the n child profiles in list came from, most samples
 * first: a build's own program (a test, `dune exec`) is one child among
 * many compilers, and the line names its file. */
static void summarize_commands(char **list, size_t n)
{
    struct by_cmd c[BY_CMD_MAX + 1];
    size_t nc = 0;
    memset(c, 0, sizeof c);
    snprintf(c[BY_CMD_MAX].name, sizeof c[BY_CMD_MAX].name, "others");
    for (size_t i = 0; i < n; i++) {
        struct flamme_profile p;
        char err[512];
        if (flamme_profile_load(list[i], &p, err, sizeof err) != 0)
            continue;
        const char *cmd = flamme_profile_info(&p, "cmdline");
        char name[64] = "?";
        if (cmd && *cmd) {
            size_t len;
            const char *base = flamme_command_name(cmd, &len);
            snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), base);
        }
        size_t k = 0;
        while (k < nc && strcmp(c[k].name, name))
            k++;
        if (k == nc && nc < BY_CMD_MAX)
            snprintf(c[nc++].name, sizeof c[0].name, "%s", name);
        else if (k == nc)
            k = BY_CMD_MAX;
        c[k].files++;
        c[k].samples += p.nsamples;
        c[k].file = list[i];
        flamme_profile_free(&p);
    }
    if (c[BY_CMD_MAX].files)
        c[nc++] = c[BY_CMD_MAX];
    qsort(c, nc, sizeof *c, by_samples);
    fputs("flamme: by command:", stderr);
    for (size_t k = 0; k < nc && k < BY_CMD_SHOWN; k++) {
        fputs(k ? "; " : " ", stderr);
        flamme_put_term_safe(stderr, c[k].name);
        if (c[k].files == 1) {
            fprintf(stderr, ": %zu samples, ", c[k].samples);
            flamme_put_term_safe(stderr, c[k].file);
        } else {
            fprintf(stderr, " x%zu: %zu samples", c[k].files, c[k].samples);
        }
    }
    if (nc > BY_CMD_SHOWN)
        fprintf(stderr, "; %zu more commands", nc - BY_CMD_SHOWN);
    fputc('\n', stderr);
}

/* One summary for the PATH.<pid> profiles written by child processes of
 * this run (a build starts dozens), and how to read them as one (with
 * PATH when with_path: the run's first OCaml process wrote it). */
static void summarize_children(const char *path, int with_path)
{
    size_t n;
    char **list = child_files(path, &n);
    if (n == 1) {
        summarize(list[0]);
    } else if (n > 1) {
        char what[3 * PATH_MAX + 128];
        snprintf(what, sizeof what,
                 "%zu profiles of child processes, %s.<pid> (read as one by: flamme report %s%s%s.[0-9]*)",
                 n, path, with_path ? path : "", with_path ? " " : "", path);
        if (summarize_many((const char *const *)list, n, what) == 0)
            summarize_commands(list, n);
    }
    free_files(list, n);
}

/* 1 if the file at path begins as a flamme profile does. */
static int is_profile(const char *path)
{
    char magic[8] = "";
    FILE *f = fopen(path, "rb");
    int ours = f && fread(magic, 1, sizeof magic, f) == sizeof magic &&
               !memcmp(magic, FLAMME_MAGIC, sizeof magic);
    if (f)
        fclose(f);
    return ours;
}

/* The segments an earlier continuous run to the same -o wrote (the names
 * the agent gives this run's: OUT's, numbered from 1) would stand in the
 * new run's way: the agent writes beside them (NAME.<pid>), and the
 * summary counted the old ones. Removed first, and said, as far as they
 * run on from the first and are flamme profiles. */
static void remove_earlier_segments(const char *out)
{
    unsigned seq = 1;
    for (;; seq++) {
        char path[PATH_MAX + 32];
        if (flamme_out_name(out, 0, 1, seq, path, sizeof path) != 0 || !is_profile(path) ||
            unlink(path) != 0)
            break;
    }
    if (seq > 1)
        fprintf(stderr, "flamme record: removed %u segment%s of an earlier run to %s\n", seq - 1,
                seq == 2 ? "" : "s", out);
}

/* A process of another run still writing path or one of its path.<pid>
 * (two runs at once to one -o, or a daemon an earlier run started): this
 * run would move its profile aside or remove it, and count it as its own.
 * Returns 0, or -1 after one line. */
static int refuse_busy(const char *path)
{
    size_t n = 0;
    char **list = NULL;
    const char *which = path;
    int pid = flamme_profile_writer(path);
    if (!pid && (list = child_files(path, &n)))
        for (size_t i = 0; i < n && !pid; i++)
            if ((pid = flamme_profile_writer(list[i])))
                which = list[i];
    if (pid)
        fprintf(stderr, "flamme record: %s is still being written by process %d (another run "
                        "to %s?); choose another -o, or wait for it to end\n", which, pid, path);
    free_files(list, n);
    return pid ? -1 : 0;
}

/* Profiles PATH.<pid> that child processes of an earlier run to the same
 * PATH left would be taken for this run's (by the summary, and by a
 * `flamme report PATH.*`): removed before it starts, and said. Only files
 * that are flamme profiles. */
static void remove_earlier_children(const char *path)
{
    size_t n, gone = 0;
    char **list = child_files(path, &n);
    for (size_t i = 0; i < n; i++)
        if (is_profile(list[i]) && unlink(list[i]) == 0)
            gone++;
    if (gone)
        fprintf(stderr, "flamme record: removed %zu profile%s %s.<pid> of an earlier run's child processes\n",
                gone, gone == 1 ? "" : "s", path);
    free_files(list, n);
}

int flamme_abs_path(const char *verb, const char *path, char *out, size_t cap)
{
    char cwd[PATH_MAX];
    int len;
    if (path[0] == '/')
        len = snprintf(out, cap, "%s", path);
    else if (getcwd(cwd, sizeof cwd))
        len = snprintf(out, cap, "%s/%s", cwd, path);
    else {
        fprintf(stderr, "flamme %s: cannot tell the current directory: %s\n", verb, strerror(errno));
        return -1;
    }
    if (len < 0 || (size_t)len >= cap) {
        fprintf(stderr, "flamme %s: output path too long: %s\n", verb, path);
        return -1;
    }
    return 0;
}

/* Why the loader cannot have preloaded the agent into cmd (as exec finds
 * it: through PATH without a slash), or NULL when it could (or cmd is not
 * found, or no ELF file: a script's interpreter is another story). */
static const char *not_preloadable(const char *cmd)
{
    char path[PATH_MAX];
    const char *p = cmd;
    if (!strchr(cmd, '/')) {
        const char *dirs = getenv("PATH");
        p = NULL;
        for (const char *d = dirs ? dirs : ""; *d && !p;) {
            size_t n = strcspn(d, ":"); /* an empty entry is the working directory */
            int len = snprintf(path, sizeof path, "%.*s/%s", n ? (int)n : 1, n ? d : ".", cmd);
            if (len > 0 && (size_t)len < sizeof path && access(path, X_OK) == 0)
                p = path;
            d += n + (d[n] == ':');
        }
        if (!p)
            return NULL;
    }
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
        return NULL;
    if (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) ||
        ((st.st_mode & S_ISGID) && st.st_gid != getegid()))
        return "it runs set-user-ID or set-group-ID, and the loader then ignores LD_PRELOAD";
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    struct flamme_elf e;
    int elf = fd >= 0 && flamme_elf_open_fd(&e, fd) == 0, has_interp = 0;
    for (size_t i = 0; elf && i < e.phnum; i++)
        has_interp |= e.ph[i].p_type == PT_INTERP;
    if (elf)
        flamme_elf_close(&e);
    if (fd >= 0)
        close(fd);
    return elf && !has_interp ? "it is statically linked, and only the dynamic loader preloads "
                                "(link it dynamically to profile it)"
                              : NULL;
}

pid_t flamme_record_spawn(const char *verb, const char *out, char **cmd, int *rc)
{
    char agent[PATH_MAX];
    *rc = 1;
    if (find_agent(verb, agent, sizeof agent) != 0)
        return -1;
    /* The program's processes resolve FLAMME_OUTPUT in their own working
     * directories: a build runs its compilers in another one (dune: in
     * _build/default), where a relative name would put their profiles out
     * of this command's sight. */
    char abs[PATH_MAX * 2];
    if (flamme_abs_path(verb, out, abs, sizeof abs) != 0)
        return -1;
    struct stat st;
    *rc = 2;
    /* The agent creates the profile without following links (O_EXCL): a
     * link at the path would send it to PATH.<pid>, so say so now. */
    if (lstat(out, &st) == 0 && S_ISLNK(st.st_mode)) {
        fprintf(stderr, "flamme %s: %s is a symbolic link; profiles are not written through "
                        "links (remove it or choose another -o)\n", verb, out);
        return -1;
    }
    if (lstat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "flamme %s: %s exists and is not a regular file\n", verb, out);
        return -1;
    }
    *rc = 1;
    /* The program would run unprofiled, its profile's loss said by the
     * agent in the middle of its output: say it now, and run nothing. A
     * directory named through % (the pid) is the agent's to make sense of. */
    char dir[sizeof abs];
    snprintf(dir, sizeof dir, "%s", abs);
    *strrchr(dir, '/') = '\0';
    const char *d = *dir ? dir : "/";
    struct stat ds;
    int bad = 0;
    if (strchr(dir, '%'))
        bad = 0;
    else if (stat(d, &ds) != 0)
        bad = errno;
    else if (!S_ISDIR(ds.st_mode))
        bad = ENOTDIR;
    else if (access(d, W_OK | X_OK) != 0)
        bad = errno;
    if (bad) {
        fprintf(stderr, "flamme %s: cannot write %s: %s: %s\n", verb, out, d, strerror(bad));
        return -1;
    }
    if (lstat(out, &st) == 0) {
        char old[PATH_MAX];
        snprintf(old, sizeof old, "%s.old", out);
        if (rename(out, old) != 0) {
            fprintf(stderr, "flamme %s: cannot move old %s aside: %s\n", verb, out, strerror(errno));
            return -1;
        }
    }
    char preload[PATH_MAX * 2];
    const char *prev = getenv("LD_PRELOAD");
    snprintf(preload, sizeof preload, "%s%s%s", agent, prev && *prev ? " " : "",
             prev ? prev : "");
    setenv("LD_PRELOAD", preload, 1);
    setenv("FLAMME_OUTPUT", abs, 1);
    setenv("FLAMME_EXCL", "1", 1);
    setenv("FLAMME_QUIET", "1", 1);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "flamme %s: fork: %s\n", verb, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        execvp(cmd[0], cmd);
        fprintf(stderr, "flamme %s: cannot run %s: %s\n", verb, cmd[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

int flamme_cmd_record(int argc, char **argv)
{
    const char *out = "flamme.flm";
    long hz = 0, depth = 0;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            record_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-F") || !strcmp(a, "--freq")) {
            if ((hz = parse_pos(a, i + 1 < argc ? argv[++i] : NULL, 10000)) < 0)
                return 2;
        } else if (!strcmp(a, "--engine")) {
            const char *e = i + 1 < argc ? argv[++i] : "";
            if (strcmp(e, "auto") && strcmp(e, "perf") && strcmp(e, "timer") && strcmp(e, "itimer")) {
                fprintf(stderr, "flamme record: --engine must be auto, perf, timer or itimer, got '%s'\n", e);
                return 2;
            }
            setenv("FLAMME_ENGINE", e, 1);
        } else if (!strcmp(a, "--alloc") || !strncmp(a, "--alloc=", 8)) {
            const char *r = a[7] == '=' ? a + 8 : "1e-4";
            char *end;
            double v = strtod(r, &end);
            if (end == r || *end || !(v > 0 && v <= 1)) {
                fprintf(stderr, "flamme record: --alloc rate must be in (0, 1], got '%s'\n", r);
                return 2;
            }
            setenv("FLAMME_ALLOC", r, 1);
        } else if (!strcmp(a, "--live")) {
            setenv("FLAMME_LIVE", "1", 1);
        } else if (!strcmp(a, "--period")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            char *end;
            double sec = strtod(v, &end);
            if (!*v || *end || !(sec >= 0.1 && sec <= 86400)) {
                fprintf(stderr, "flamme record: --period needs seconds in 0.1..86400, got '%s'\n", v);
                return 2;
            }
            setenv("FLAMME_PERIOD", v, 1);
        } else if (!strcmp(a, "--wall")) {
            setenv("FLAMME_MODE", "wall", 1);
        } else if (!strcmp(a, "--depth")) {
            if ((depth = parse_pos(a, i + 1 < argc ? argv[++i] : NULL, 1000000)) < 0)
                return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "flamme record: %s needs a file name\n", a);
                return 2;
            }
            out = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "flamme record: unknown option '%s'\n", a);
            record_usage(stderr);
            return 2;
        } else {
            break; /* CMD without -- */
        }
    }
    if (i >= argc) {
        fprintf(stderr, "flamme record: no command given\n");
        record_usage(stderr);
        return 2;
    }
    char num[32];
    if (hz) {
        snprintf(num, sizeof num, "%ld", hz);
        setenv("FLAMME_HZ", num, 1);
    }
    if (depth) {
        snprintf(num, sizeof num, "%ld", depth);
        setenv("FLAMME_DEPTH", num, 1);
    }
    if (!strchr(out, '%')) {
        if (refuse_busy(out) != 0)
            return 1;
        remove_earlier_children(out);
        const char *period = getenv("FLAMME_PERIOD");
        if (period && *period)
            remove_earlier_segments(out);
    }
    int rc;
    pid_t pid = flamme_record_spawn("record", out, argv + i, &rc);
    if (pid < 0)
        return rc;
    /* Ctrl-C reaches the whole foreground group: let the child decide, and
     * stay alive to report what it wrote. */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const char *period = getenv("FLAMME_PERIOD");
    if (period && *period && summarize_segments(out, (int)pid) == 0)
        return rc;
    /* The name the agent gave the profile (a %p in -o is the child's pid). */
    char named[PATH_MAX];
    if (flamme_out_name(out, (int)pid, 0, 0, named, sizeof named) == 0)
        out = named;
    struct stat st;
    int wrote = lstat(out, &st) == 0 && S_ISREG(st.st_mode);
    if (WIFEXITED(status) && rc == 127 && !wrote)
        return rc;
    const char *why = wrote ? NULL : not_preloadable(argv[i]);
    if (why)
        fprintf(stderr, "flamme: no profile written to %s: %s cannot be profiled: %s\n", out,
                argv[i], why);
    else if (!wrote)
        fprintf(stderr,
                "flamme: no profile written to %s (is %s an OCaml 5 program? one that links the "
                "flamme library profiles only between Flamme.start and stop; profiles of child "
                "processes, if any, follow)\n",
                out, argv[i]);
    else
        summarize(out);
    summarize_children(out, wrote);
    return rc;
}
