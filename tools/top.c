/*
 * tools/top.c — `flamme top [options] -- CMD ARGS...` and `flamme top FILE`:
 * a live view of a profile while it is being written, refreshed every
 * second: the top functions by self and total weight over the last N
 * seconds or since the start, samples/s, threads, lost samples and the GC
 * share, for all threads or one; keys sort and switch (as `py-spy top`).
 *
 * How it follows a growing file: the agent's writer appends one complete
 * zlib chunk about every second (writer/writer.c, CHUNK_INTERVAL_NS), and
 * the one reader (common/profile.c) decodes a file up to its last whole
 * chunk, so each refresh simply loads the file again. That costs the whole
 * file per refresh (figures in doc/design.md "flamme top"): fine for the
 * minutes a live view is watched; for bigger files the refreshes space out
 * so the view keeps to a tenth of a CPU (interval()).
 *
 * With CMD, the program runs as under `flamme record` (tools/record.c),
 * its stdin/stdout/stderr are its own (inherited, untouched) and its exit
 * status is flamme top's. When stdout is a terminal the view is drawn in the
 * terminal's alternate screen, repainted whole every second, so the
 * program's own output to the same terminal shows at most until the next
 * repaint and the user's screen is given back as it was on exit; keys are
 * read from /dev/tty. Otherwise (stdout a file or pipe) one plain table is
 * printed per second, or one with --once.
 * Ordinary process context only; signals only set flags.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/profile.h"
#include "tools/cmds.h"
#include "tools/collapse.h"
#include "tools/fnagg.h"
#include "tools/gc_frames.h"

#define PLAIN_ROWS 20 /* functions per plain-text table */

/* Windows the w key cycles through, in seconds (0: since start). */
static const double windows[] = { 1, 5, 15, 60, 0 };
#define NWINDOWS (sizeof windows / sizeof windows[0])

static volatile sig_atomic_t got_quit, got_winch, got_chld, got_tstp;

static void on_quit(int sig)
{
    (void)sig;
    got_quit = 1;
}
static void on_winch(int sig)
{
    (void)sig;
    got_winch = 1;
}
static void on_tstp(int sig)
{
    (void)sig;
    got_tstp = 1;
}
static void on_chld(int sig)
{
    (void)sig;
    got_chld = 1;
}

struct top {
    const char *path;   /* the profile followed */
    const char *shown;  /* what the header names: the command line or the path */
    double window;      /* seconds; 0: since start */
    int by_total;
    int all_threads;    /* else the thread (sel_tid, sel_serial) */
    uint32_t sel_tid, sel_serial;
    int paused;
    int tty;
    pid_t child;        /* 0: FILE mode */
    int child_done, child_status;
    struct flamme_profile p;
    int have;           /* p holds a load */
    char err[512];      /* the last load's failure, shown in the view */
    uint8_t *gc_class;  /* per stack of p: flamme_gc_class + 1, 0 = not yet */
    uint64_t interval_ns; /* between refreshes: 1 s, more for big profiles */
    int writer_gone;    /* FILE mode: the profile is incomplete, its writer gone */
    int not_held;       /* refreshes in a row that found no process holding it */
    int once;           /* --once: one table */
    int rows, cols;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: flamme top [options] -- CMD ARGS...   run CMD and watch it live\n"
               "       flamme top [options] FILE             watch a profile being written\n"
               "  --window S      last S seconds (default 5), or 'all': since the start\n"
               "  --sort K        self (default) or total\n"
               "  --once          one table and exit (FILE: as it stands; CMD: at its end)\n"
               "  -F, --freq HZ   (CMD) samples per CPU-second per thread (default 99)\n"
               "  -o, --output F  (CMD) keep the profile in F (default: a temporary file)\n"
               "keys: 1 sort by self, 2 by total, w next window, t/T next/previous thread,\n"
               "      a all threads, space pause, q quit. Not a terminal: one table per second.\n");
}

/* Loads t->path again. Returns 0, or -1 with t->err set (the previous load,
 * if any, is kept). */
static int reload(struct top *t)
{
    struct flamme_profile q;
    if (flamme_profile_load(t->path, &q, t->err, sizeof t->err) != 0)
        return -1;
    if (t->have)
        flamme_profile_free(&t->p);
    t->p = q;
    t->have = 1;
    t->err[0] = 0;
    free(t->gc_class);
    t->gc_class = calloc(q.nstacks ? q.nstacks : 1, 1);
    return 0;
}

/* 1 if path looks like a profile its program has only just created: written
 * within the last 2 s, and shorter than a header with every byte it has
 * one of the magic's first (an empty file, at first). Such a file becomes a
 * profile within moments (the agent opens it, then writes the header). */
static int just_created(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    char head[8];
    ssize_t n = fstat(fd, &st) == 0 ? read(fd, head, sizeof head) : -1;
    close(fd);
    double age = n < 0 ? -1 : flamme_file_age(&st);
    if (n < 0 || st.st_size >= FLAMME_HEADER_SIZE || age < 0 || age >= 2.0)
        return 0;
    return memcmp(head, FLAMME_MAGIC, (size_t)n) == 0;
}

/* The index of the selected thread in t->p, or -1 (all, or gone). */
static long sel_index(const struct top *t)
{
    if (t->all_threads)
        return -1;
    for (size_t i = 0; i < t->p.nthreads; i++)
        if (t->p.threads[i].tid == t->sel_tid && t->p.threads[i].serial == t->sel_serial)
            return (long)i;
    return -1;
}

/* Moves the thread selection by dir (+1/-1) over all, then each thread with
 * samples in p (by index order: tid, serial). */
static void step_thread(struct top *t, int dir)
{
    size_t n = t->p.nthreads;
    if (!t->have || !n)
        return;
    uint8_t *has = calloc(n, 1);
    if (!has)
        return;
    for (size_t i = 0; i < t->p.nsamples; i++)
        if (t->p.samples[i].thread < n)
            has[t->p.samples[i].thread] = 1;
    long cur = t->all_threads ? -1 : sel_index(t);
    /* positions: -1 (all), 0..n-1 (threads with samples) */
    for (size_t k = 0; k <= n; k++) {
        cur += dir;
        if (cur >= (long)n)
            cur = -1;
        else if (cur < -1)
            cur = (long)n - 1;
        if (cur == -1 || has[cur])
            break;
    }
    free(has);
    t->all_threads = cur < 0;
    if (cur >= 0) {
        t->sel_tid = t->p.threads[cur].tid;
        t->sel_serial = t->p.threads[cur].serial;
    }
}

/* What one table shows, computed from t->p. */
struct snap {
    struct flamme_fnagg agg;
    size_t nsamples;     /* sample records in the window */
    uint64_t gc_weight;  /* weight of those whose stack is in the GC */
    size_t threads_seen, threads_alive;
    double span_s;       /* seconds the window covers (short at the start) */
    double elapsed_s;    /* from the start to the last data */
    uint64_t lost;
};

static double secs(uint64_t ns)
{
    return (double)ns / 1e9;
}

/* Fills s for t's window, thread and profile. Returns 0, -1 (memory), -2
 * (the profile's budget: flamme_collapse_profile). */
static int compute(struct top *t, struct snap *s)
{
    memset(s, 0, sizeof *s);
    const struct flamme_profile *p = &t->p;
    uint64_t start = p->hdr.start_monotonic_ns, end = p->end_ns > start ? p->end_ns : start;
    uint64_t from = start;
    if (t->window > 0 && end - start > (uint64_t)(t->window * 1e9))
        from = end - (uint64_t)(t->window * 1e9);
    s->span_s = secs(end - from);
    s->elapsed_s = secs(end - start);
    long sel = sel_index(t);
    struct flamme_profile q = *p;
    q.samples = malloc((p->nsamples ? p->nsamples : 1) * sizeof *q.samples);
    uint8_t *seen = calloc(p->nthreads ? p->nthreads : 1, 1);
    if (!q.samples || !seen) {
        free(q.samples);
        free(seen);
        return -1;
    }
    q.nsamples = 0;
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct flamme_sample *x = &p->samples[i];
        if (x->time_ns < from || (from > start && x->time_ns == from))
            continue;
        if (!t->all_threads && (long)x->thread != sel)
            continue;
        q.samples[q.nsamples++] = *x;
        if (x->thread < p->nthreads)
            seen[x->thread] = 1;
        if (x->stack_id < p->nstacks && t->gc_class) {
            uint8_t *c = &t->gc_class[x->stack_id];
            uint32_t root;
            if (!*c)
                *c = (uint8_t)(flamme_gc_classify(p, &p->stacks[x->stack_id], &root) + 1);
            if (*c != FLAMME_GCC_NONE + 1)
                s->gc_weight += x->weight;
        }
    }
    s->nsamples = q.nsamples;
    for (size_t i = 0; i < p->nthreads; i++) {
        s->threads_seen += seen[i];
        s->threads_alive += p->threads[i].end_ns == 0;
    }
    free(seen);
    s->lost = t->all_threads ? p->lost : sel >= 0 ? p->threads[sel].lost : 0;
    struct flamme_collapse_opts o = { 0 };
    int r = flamme_collapse_profile(&q, &o, flamme_fnagg_stack, &s->agg);
    free(q.samples);
    return r != 0 ? r : s->agg.oom ? -1 : 0;
}

static double pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* The status of the run, for the header: "running", "exited 0", ... */
static void run_state(const struct top *t, char *buf, size_t len)
{
    if (t->child && t->child_done) {
        if (WIFEXITED(t->child_status))
            snprintf(buf, len, "program exited %d", WEXITSTATUS(t->child_status));
        else
            snprintf(buf, len, "program killed by signal %d", WTERMSIG(t->child_status));
    } else if (t->have && t->p.complete)
        snprintf(buf, len, "profile complete");
    else if (t->writer_gone)
        snprintf(buf, len, "incomplete, no process writes it (pid %u)", (unsigned)t->p.hdr.pid);
    else
        snprintf(buf, len, "running");
}

/* Writes s truncated to width display columns (counting each byte that is
 * not a UTF-8 continuation byte as one; control bytes come out longer as
 * \xNN, which the view's no-wrap mode cuts). width < 0: no limit. */
static void put_name(FILE *out, const char *s, int width)
{
    size_t n = strlen(s);
    if (width >= 0) {
        int cols = 0;
        size_t i = 0;
        for (; i < n; i++) {
            if (((unsigned char)s[i] & 0xc0) != 0x80 && cols++ == width)
                break;
        }
        n = i;
    }
    char *c = strndup(s, n);
    if (!c)
        return;
    flamme_put_term_safe(out, c);
    free(c);
}

/* Prints one view of t (header, figures, table) to out: for the terminal
 * (tty: at most t->rows lines of t->cols columns, each ended with an erase)
 * or plain. Returns 0, -1 (memory), -2 (budget). */
static int render(struct top *t, FILE *out, int tty)
{
    const char *eol = tty ? "\033[K\n" : "\n";
    char state[64], thr[96];
    run_state(t, state, sizeof state);
    int lines = 0;
    fputs("flamme top: ", out);
    put_name(out, t->shown, tty ? (t->cols > 60 ? t->cols - 40 : 20) : -1);
    if (t->child)
        fprintf(out, " (pid %d)", (int)t->child);
    fprintf(out, "  %s%s", state, t->paused ? "  [paused]" : "");
    if (t->interval_ns > 1000000000ull)
        fprintf(out, "  (refresh every %.1f s: a big profile)", secs(t->interval_ns));
    fputs(eol, out);
    lines++;
    if (!t->have) {
        if (t->err[0] && !t->child) {
            fputs("  ", out);
            put_name(out, t->err, -1);
            fputs(eol, out);
        } else
            fprintf(out, "  waiting for the profile...%s", eol);
        return 0;
    }
    struct snap s;
    int r = compute(t, &s);
    if (r != 0) {
        flamme_fnagg_free(&s.agg);
        return r;
    }
    long sel = sel_index(t);
    if (t->all_threads)
        snprintf(thr, sizeof thr, "all threads");
    else if (sel < 0)
        snprintf(thr, sizeof thr, "thread %u (gone)", (unsigned)t->sel_tid);
    else
        flamme_thread_label(&t->p.threads[sel], thr, sizeof thr);
    char win[32];
    if (t->window > 0)
        snprintf(win, sizeof win, "last %g s", t->window);
    else
        snprintf(win, sizeof win, "since start");
    fprintf(out, "  %.1f s  %s  %s  sort %s%s", s.elapsed_s, win, thr, t->by_total ? "total" : "self",
            eol);
    fprintf(out, "  samples/s %.1f  threads %zu alive, %zu sampled  lost %llu  GC %.1f%%%s",
            s.span_s > 0 ? (double)s.nsamples / s.span_s : 0.0, s.threads_alive, s.threads_seen,
            (unsigned long long)s.lost, pct(s.gc_weight, s.agg.weight), eol);
    lines += 2;
    if (t->err[0]) {
        fputs("  reload failed: ", out);
        put_name(out, t->err, tty ? t->cols - 20 : -1);
        fputs(eol, out);
        lines++;
    }
    if (tty) {
        fprintf(out, "  keys: 1 self  2 total  w window  t/T thread  a all  space pause  q quit%s", eol);
        lines++;
    }
    fputs(eol, out);
    fprintf(out, "  %6s %7s %9s %9s  %s%s", "%self", "%total", "self s", "total s", "function", eol);
    lines += 2;
    size_t n = 0;
    struct flamme_fn **v = flamme_fnagg_sorted(&s.agg, t->by_total, &n);
    if (!v) {
        flamme_fnagg_free(&s.agg);
        return -1;
    }
    double hz = t->p.hdr.hz ? (double)t->p.hdr.hz : 1.0;
    int room = tty ? t->rows - lines : PLAIN_ROWS;
    int namew = tty ? t->cols - 40 : -1;
    if (tty && namew < 10)
        namew = 10;
    for (size_t i = 0; i < n && (int)i < room; i++) {
        if ((t->by_total ? v[i]->total : v[i]->self) == 0)
            break;
        fprintf(out, "  %5.1f%% %6.1f%% %9.2f %9.2f  ", pct(v[i]->self, s.agg.weight),
                pct(v[i]->total, s.agg.weight), (double)v[i]->self / hz, (double)v[i]->total / hz);
        put_name(out, v[i]->name, namew);
        fputs(eol, out);
    }
    if (!n)
        fprintf(out, "  (no samples in this window)%s", eol);
    free(v);
    flamme_fnagg_free(&s.agg);
    return 0;
}

/* ------------------------------------------------------------ terminal */

static struct termios saved_tio;
static int key_fd = -1, tio_saved;

static void term_size(struct top *t)
{
    struct winsize ws;
    t->rows = 24, t->cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        t->rows = ws.ws_row;
        t->cols = ws.ws_col;
    }
}

/* Alternate screen, no cursor, no line wrap; keys unbuffered and not echoed
 * (signal keys such as Ctrl-C keep working, for the program too). */
static void term_enter(void)
{
    key_fd = open("/dev/tty", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (key_fd >= 0 && tcgetattr(key_fd, &saved_tio) == 0) {
        struct termios raw = saved_tio;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tio_saved = tcsetattr(key_fd, TCSANOW, &raw) == 0;
    }
    fputs("\033[?1049h\033[?25l\033[?7l\033[H\033[2J", stdout);
    fflush(stdout);
}

static void term_leave(void)
{
    fputs("\033[?7h\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    if (tio_saved)
        tcsetattr(key_fd, TCSANOW, &saved_tio);
    tio_saved = 0;
    if (key_fd >= 0)
        close(key_fd);
    key_fd = -1;
}

/* Repaints the whole view in one write. */
static int draw(struct top *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return -1;
    fputs("\033[H", m);
    int r = render(t, m, 1);
    fputs("\033[J", m);
    if (fclose(m) != 0)
        r = -1;
    if (r == 0 && buf) {
        fwrite(buf, 1, len, stdout);
        fflush(stdout);
    }
    free(buf);
    return r;
}

/* Applies key c; returns 1 for quit. */
static int on_key(struct top *t, int c)
{
    switch (c) {
    case 'q': case 'Q':
        return 1;
    case '1': case 's':
        t->by_total = 0;
        break;
    case '2':
        t->by_total = 1;
        break;
    case 'w': {
        size_t i = 0;
        while (i < NWINDOWS && windows[i] != t->window)
            i++;
        t->window = windows[i < NWINDOWS ? (i + 1) % NWINDOWS : 0];
        break;
    }
    case 't':
        step_thread(t, 1);
        break;
    case 'T':
        step_thread(t, -1);
        break;
    case 'a':
        t->all_threads = 1;
        break;
    case ' ':
        t->paused = !t->paused;
        break;
    default:
        break;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The time from one refresh to the next, given that the last one (load
 * and draw) took cost_ns: a second, or more for a profile so big that
 * reading it again each second would take more than a tenth of a CPU (the
 * view shares the machine with the program it watches). */
static uint64_t interval(struct top *t, uint64_t cost_ns)
{
    t->interval_ns = cost_ns * 10 > 1000000000ull ? cost_ns * 10 : 1000000000ull;
    return t->interval_ns;
}

/* Reaps the child if it ended (no wait). */
static void poll_child(struct top *t)
{
    if (!t->child || t->child_done)
        return;
    int st;
    pid_t r = waitpid(t->child, &st, WNOHANG);
    if (r == t->child) {
        t->child_done = 1;
        t->child_status = st;
    }
}

/* 1 if process pid may still write path: it has it open, or it lives and
 * its descriptors cannot be read (another user's); 0 if it is gone or does
 * not have the file open (a header's pid from elsewhere, or reused). */
static int writer_holds(uint32_t pid, const char *path)
{
    struct stat want;
    char dir[64];
    if (!pid || pid > INT32_MAX || stat(path, &want) != 0)
        return 0;
    snprintf(dir, sizeof dir, "/proc/%u/fd", (unsigned)pid);
    DIR *d = opendir(dir);
    if (!d)
        return errno == EACCES && kill((pid_t)pid, 0) == 0;
    int held = 0;
    struct dirent *e;
    while (!held && (e = readdir(d))) {
        struct stat st;
        if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, 0) == 0)
            held = st.st_dev == want.st_dev && st.st_ino == want.st_ino;
    }
    closedir(d);
    return held;
}

/* A refresh: the child's state first, so the load after its end sees the
 * whole file. */
static void refresh(struct top *t)
{
    poll_child(t);
    if (!t->paused || !t->have)
        reload(t);
    /* A profile whose writer was killed (SIGKILL) never completes: when no
     * process holds it open, nothing more will come. */
    if (!t->child && t->have && !t->p.complete && !t->paused) {
        /* twice in a row: the agent may be reopening it (common/fds.c) */
        t->not_held = writer_holds(t->p.hdr.pid, t->path) ? 0 : t->not_held + 1;
        t->writer_gone = t->not_held >= (t->once ? 1 : 2);
    }
}

/* The interactive view until q, Ctrl-C or a termination signal. Returns 0,
 * or the status of a failure (one line printed after the screen is
 * restored: 2 for a profile too big to show, 1 for memory). */
static int run_tty(struct top *t)
{
    term_size(t);
    term_enter();
    int rc = 0, fail = 0;
    uint64_t next = 0;
    struct sigaction tstp = { .sa_handler = on_tstp }, old_tstp;
    sigaction(SIGTSTP, &tstp, &old_tstp);
    for (;;) {
        if (got_quit)
            break;
        if (got_tstp) { /* Ctrl-Z: the user's screen back while stopped */
            got_tstp = 0;
            term_leave();
            signal(SIGTSTP, SIG_DFL);
            raise(SIGTSTP);
            struct sigaction sa = { .sa_handler = on_tstp };
            sigaction(SIGTSTP, &sa, NULL); /* continued */
            term_size(t);
            term_enter();
        }
        uint64_t now = now_ns(), t0 = now;
        int refreshed = now >= next;
        if (refreshed)
            refresh(t);
        if (got_winch) {
            got_winch = 0;
            term_size(t);
        }
        if ((fail = draw(t)) != 0)
            break;
        now = now_ns();
        if (refreshed)
            next = t0 + interval(t, now - t0);
        struct pollfd pf = { key_fd, POLLIN, 0 };
        int ms = next > now ? (int)((next - now) / 1000000) + 1 : 0;
        int k = poll(&pf, key_fd >= 0 ? 1 : 0, ms);
        if (k > 0 && (pf.revents & POLLIN)) {
            char keys[64];
            ssize_t m = read(key_fd, keys, sizeof keys);
            int quit = 0;
            for (ssize_t i = 0; i < m && !quit; i++)
                quit = on_key(t, (unsigned char)keys[i]);
            if (quit)
                break;
        } else if (k > 0 && (pf.revents & (POLLHUP | POLLERR)))
            break; /* the terminal went away */
        got_chld = 0;
    }
    term_leave();
    sigaction(SIGTSTP, &old_tstp, NULL);
    if (fail)
        rc = flamme_collapse_error("top", t->path, fail);
    return rc;
}

/* One plain table to stdout, written only when whole. Returns 0, or 1 or 2
 * after one line. */
static int print_plain(struct top *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int r = m ? render(t, m, 0) : -1;
    if (m && fclose(m) != 0 && r == 0)
        r = -1;
    if (r == 0) {
        fwrite(buf, 1, len, stdout);
        putchar('\n');
    }
    free(buf);
    if (r != 0)
        return flamme_collapse_error("top", t->path, r);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "flamme top: write error on stdout\n");
        return 1;
    }
    return 0;
}

/* Plain mode: a table per second until the program ends (CMD), the profile
 * is complete (FILE) or a signal; one at the end with once. Returns 0, or
 * print_plain's failure. */
static int run_plain(struct top *t, int once)
{
    for (;;) {
        uint64_t t0 = now_ns();
        refresh(t);
        int r = 0;
        int last = got_quit || (t->child ? t->child_done : t->have && (t->p.complete || t->writer_gone)) ||
                   (once && !t->child);
        if ((!once || last) && (r = print_plain(t)) != 0)
            return r;
        if (last)
            return 0;
        uint64_t d = now_ns() - t0, wait = interval(t, d) - d;
        struct timespec ts = { (time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull) };
        nanosleep(&ts, NULL); /* a signal ends it early: fine */
    }
}

/* Removes the temporary directory dir and the profiles in it. */
static void remove_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

/* The command line as one string for the header (args joined by blanks). */
static void join_cmd(char **cmd, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; cmd[i] && k + 1 < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? " " : "", cmd[i]);
}

int flamme_cmd_top(int argc, char **argv)
{
    struct top t = { .window = 5, .all_threads = 1 };
    const char *out = NULL, *hz = NULL;
    int once = 0, i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--once")) {
            once = t.once = 1;
        } else if (!strcmp(a, "--window")) {
            char *end;
            double w = v ? strtod(v, &end) : 0;
            if (v && !strcmp(v, "all"))
                t.window = 0;
            else if (!v || end == v || *end || !(w >= 0.1 && w <= 86400)) {
                fprintf(stderr, "flamme top: --window needs seconds in 0.1..86400 or 'all', got '%s'\n",
                        v ? v : "");
                return 2;
            } else
                t.window = w;
            i++;
        } else if (!strcmp(a, "--sort")) {
            if (!v || (strcmp(v, "self") && strcmp(v, "total"))) {
                fprintf(stderr, "flamme top: --sort must be self or total, got '%s'\n", v ? v : "");
                return 2;
            }
            t.by_total = !strcmp(v, "total");
            i++;
        } else if (!strcmp(a, "-F") || !strcmp(a, "--freq")) {
            char *end;
            long x = v ? strtol(v, &end, 10) : 0;
            if (!v || *end || x < 1 || x > 10000) {
                fprintf(stderr, "flamme top: %s needs an integer in 1..10000, got '%s'\n", a, v ? v : "");
                return 2;
            }
            hz = v;
            i++;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) {
                fprintf(stderr, "flamme top: %s needs a file name\n", a);
                return 2;
            }
            out = v;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "flamme top: unknown option '%s' (flamme top --help)\n", a);
            return 2;
        } else
            break;
    }
    if (i >= argc) {
        fprintf(stderr, "flamme top: no FILE or -- CMD given (flamme top --help)\n");
        return 2;
    }
    int with_cmd = i > 0 && !strcmp(argv[i - 1], "--");
    if (!with_cmd && i + 1 < argc) {
        fprintf(stderr, "flamme top: one FILE at a time (to run a command: flamme top -- CMD ARGS)\n");
        return 2;
    }
    if (!with_cmd && (out || hz)) {
        fprintf(stderr, "flamme top: -o and -F are for a command (flamme top -- CMD ARGS)\n");
        return 2;
    }
    t.tty = isatty(STDOUT_FILENO);

    struct sigaction sa = { 0 };
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_quit; /* no SA_RESTART: poll and sleeps end at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    sa.sa_handler = on_chld;
    sigaction(SIGCHLD, &sa, NULL);

    char cmdline[1024], tmpdir[PATH_MAX] = "", tmpfile[PATH_MAX + 16];
    if (!with_cmd) {
        t.path = t.shown = argv[i];
        /* A file its program has just created may not hold its header yet. */
        uint64_t give_up = now_ns() + 3000000000ull;
        while (reload(&t) != 0) {
            struct timespec ts = {0, 20000000};
            if (got_quit || !just_created(t.path) || now_ns() > give_up) {
                fprintf(stderr, "flamme top: %s\n", t.err);
                return 2;
            }
            nanosleep(&ts, NULL);
        }
        int rc = t.tty && !once ? run_tty(&t) : run_plain(&t, once);
        flamme_profile_free(&t.p);
        free(t.gc_class);
        return rc;
    }

    if (!out) {
        const char *td = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/flamme-top.XXXXXX", td && *td ? td : "/tmp");
        if (!mkdtemp(tmpdir)) {
            fprintf(stderr, "flamme top: cannot make a temporary directory %s: %s\n", tmpdir,
                    strerror(errno));
            return 1;
        }
        snprintf(tmpfile, sizeof tmpfile, "%s/top.flm", tmpdir);
        out = tmpfile;
    }
    if (hz)
        setenv("FLAMME_HZ", hz, 1);
    unsetenv("FLAMME_PERIOD"); /* one file to follow */
    join_cmd(argv + i, cmdline, sizeof cmdline);
    t.path = out;
    t.shown = cmdline;
    /* The child starts with flamme's own dispositions: the handlers set
     * above are reset to the default by exec, and nothing is ignored yet. */
    int rc;
    t.child = flamme_record_spawn("top", out, argv + i, &rc);
    if (t.child < 0) {
        if (*tmpdir)
            remove_tmp(tmpdir);
        return rc;
    }
    int vrc = t.tty && !once ? run_tty(&t) : run_plain(&t, once);
    /* After Ctrl-C the program usually ends at once: no "runs on" then. */
    for (int k = 0; k < 20 && !t.child_done; k++) {
        struct timespec ts = { 0, 10000000 };
        nanosleep(&ts, NULL);
        poll_child(&t);
    }
    if (!t.child_done) {
        if (t.tty && !once)
            fprintf(stderr, "flamme top: view closed; %s (pid %d) runs on until it ends "
                            "(Ctrl-C interrupts it)\n", argv[i], (int)t.child);
        /* Ctrl-C reaches the whole foreground group: the program decides,
         * flamme stays to return its status. */
        signal(SIGINT, SIG_IGN);
        signal(SIGQUIT, SIG_IGN);
        while (waitpid(t.child, &t.child_status, 0) < 0 && errno == EINTR)
            ;
        t.child_done = 1;
    }
    if (!t.have && access(out, F_OK) != 0)
        fprintf(stderr, "flamme top: no profile written (is %s an OCaml 5 program?)\n", argv[i]);
    if (*tmpdir)
        remove_tmp(tmpdir);
    if (t.have)
        flamme_profile_free(&t.p);
    free(t.gc_class);
    int st = t.child_status;
    int prc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return vrc && !prc ? vrc : prc;
}
