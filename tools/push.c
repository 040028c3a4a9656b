/*
 * tools/push.c — `flamme push`: sends profiles (typically the segments of a
 * continuous profile, FLAMME_PERIOD) to a Grafana Pyroscope server's HTTP
 * ingest API, as pprof, through libcurl (HTTP and HTTPS, proxies, the
 * system's CA store: what a fleet's network expects, not ours to redo).
 *
 * One request per file: POST URL/ingest?name=APP{host=..,pid=..,command=..}
 * &from=S&until=S&format=pprof&sampleRate=HZ&spyName=flamme&units=samples
 * &aggregationType=sum, body multipart/form-data with the gzip'd pprof in the
 * part "profile"; samples carry a "thread" label. With --watch DIR, the
 * complete profiles that appear in DIR are sent as they complete, then
 * deleted (--delete) or remembered for this run (by name and identity).
 * A file is judged only once it has stopped changing, and an incomplete one
 * only once its program is gone (killed before it could finish the file).
 * Single-threaded.
 */
#include "tools/cmds.h"

/* Calls go through the table below: no type-checking wrapper macros. */
#define CURL_DISABLE_TYPECHECK
#include <curl/curl.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/profile.h"
#include "tools/export.h"

#define PUSH_ERR "flamme push: "

/* libcurl is loaded when push runs (curl_load), not linked: its thirty-odd
 * libraries cost every flamme command, `flamme record` included, ~20 ms of
 * CPU at start (26 ms for `flamme --version`, 4.6 for ls). */
#define CURL_FNS(X)                                                                                \
    X(curl_global_init) X(curl_global_cleanup) X(curl_easy_init) X(curl_easy_cleanup)              \
    X(curl_easy_escape) X(curl_free) X(curl_mime_init) X(curl_mime_addpart) X(curl_mime_name)       \
    X(curl_mime_filename) X(curl_mime_type) X(curl_mime_data) X(curl_mime_free)                    \
    X(curl_easy_setopt) X(curl_easy_perform) X(curl_easy_getinfo) X(curl_easy_strerror)
#define CURL_FIELD(f) __typeof__(f) *f;
static struct {
    CURL_FNS(CURL_FIELD)
} cu;

/* Loads libcurl.so.4 and fills cu. Returns 0, or -1 after one line on
 * stderr. */
static int curl_load(void)
{
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, PUSH_ERR "cannot load libcurl: %s\n", dlerror());
        return -1;
    }
#define CURL_SYM(f)                                                                                \
    {                                                                                              \
        void *sym = dlsym(h, #f);                                                                  \
        if (!sym) {                                                                                \
            fprintf(stderr, PUSH_ERR "libcurl.so.4 has no %s\n", #f);                          \
            return -1;                                                                             \
        }                                                                                          \
        memcpy(&cu.f, &sym, sizeof sym);                                                           \
    }
    CURL_FNS(CURL_SYM)
    return 0;
}

#define MAX_LABELS 32

struct push_opts {
    const char *url;  /* server base URL, without /ingest */
    const char *app;  /* NULL: the profiled command's name */
    const char *labels[MAX_LABELS]; /* "key=value" given with --label */
    int nlabels;
    int verbose;
};

static void push_usage(FILE *f)
{
    fprintf(f, "usage: flamme push [--url URL] [--app NAME] [--label KEY=VALUE]... FILE...\n"
               "       flamme push --watch DIR [--delete] [--once] [--interval S] [--url URL] ...\n"
               "Sends profiles to Grafana Pyroscope's /ingest API as pprof.\n"
               "  --url URL       the server (default $FLAMME_PUSH_URL or http://127.0.0.1:4040)\n"
               "  --app NAME      application name (default: the profiled command's name)\n"
               "  --label K=V     a label beside host, pid and command (repeatable)\n"
               "  --watch DIR     send each complete profile (*.flm) that appears in DIR\n"
               "  --delete        with --watch: delete a profile once the server took it\n"
               "  --once          with --watch: one pass over DIR, then exit\n"
               "  --interval S    with --watch: seconds between passes (default 1)\n"
               "  -v              one line per profile sent\n");
}

/* Appends s to buf (cap) keeping only characters Pyroscope takes in a name
 * or label value; others become '_'. */
static void append_clean(char *buf, size_t cap, const char *s, size_t n)
{
    size_t o = strlen(buf);
    for (size_t i = 0; i < n && s[i] && o + 1 < cap; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.' || c == '/' || c == ':';
        buf[o++] = ok ? c : '_';
    }
    buf[o] = 0;
}

/* The profiled command's name: the first word of its cmdline, without its
 * directory; "" when the profile does not say. */
static void command_name(const struct flamme_profile *p, char *out, size_t cap)
{
    out[0] = 0;
    const char *cmd = flamme_profile_info(p, "cmdline");
    if (!cmd)
        return;
    size_t n = strcspn(cmd, " ");
    const char *slash = memrchr(cmd, '/', n);
    const char *b = slash ? slash + 1 : cmd;
    append_clean(out, cap, b, n - (size_t)(b - cmd));
}

/* Pyroscope's name: APP{host=H,pid=P,command=C,KEY=VALUE...}. */
static void ingest_name(const struct flamme_profile *p, const struct push_opts *o, char *out,
                        size_t cap)
{
    char cmd[256], host[256] = "";
    command_name(p, cmd, sizeof cmd);
    const char *h = flamme_profile_info(p, "hostname");
    if (h)
        snprintf(host, sizeof host, "%s", h);
    else if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "unknown");
    out[0] = 0;
    const char *app = o->app ? o->app : cmd[0] ? cmd : "flamme";
    append_clean(out, cap, app, strlen(app));
    char num[32];
    snprintf(num, sizeof num, "%u", (unsigned)p->hdr.pid);
    const char *keys[3 + MAX_LABELS], *vals[3 + MAX_LABELS];
    size_t klen[3 + MAX_LABELS];
    int n = 0;
    keys[n] = "host", klen[n] = 4, vals[n++] = host;
    keys[n] = "pid", klen[n] = 3, vals[n++] = num;
    if (cmd[0])
        keys[n] = "command", klen[n] = 7, vals[n++] = cmd;
    for (int i = 0; i < o->nlabels; i++) {
        const char *eq = strchr(o->labels[i], '=');
        keys[n] = o->labels[i], klen[n] = (size_t)(eq - o->labels[i]), vals[n++] = eq + 1;
    }
    strncat(out, "{", cap - strlen(out) - 1);
    for (int i = 0; i < n; i++) {
        if (i)
            strncat(out, ",", cap - strlen(out) - 1);
        append_clean(out, cap, keys[i], klen[i]);
        strncat(out, "=", cap - strlen(out) - 1);
        append_clean(out, cap, vals[i], strlen(vals[i]));
    }
    strncat(out, "}", cap - strlen(out) - 1);
}

/* The wall-clock span the profile covers, in Unix seconds (from rounded
 * down, until up; until > from). A segment's own bounds when it is one. */
static void span(const struct flamme_profile *p, long long *from, long long *until)
{
    uint64_t t0 = p->hdr.start_monotonic_ns, rt0 = p->hdr.start_realtime_ns;
    uint64_t a = p->segment_from_ns ? p->segment_from_ns : t0;
    uint64_t b = p->segment_until_ns ? p->segment_until_ns : p->end_ns;
    uint64_t ra = rt0 + (a > t0 ? a - t0 : 0), rb = rt0 + (b > t0 ? b - t0 : 0);
    *from = (long long)(ra / 1000000000u);
    *until = (long long)((rb + 999999999u) / 1000000000u);
    if (*until <= *from)
        *until = *from + 1;
}

static size_t collect_body(char *ptr, size_t size, size_t n, void *ud)
{
    char *buf = ud; /* 256 bytes: the start of the server's answer, for errors */
    size_t have = strlen(buf), add = size * n;
    size_t room = 255 - have;
    memcpy(buf + have, ptr, add < room ? add : room);
    buf[have + (add < room ? add : room)] = 0;
    return add;
}

/* Sends one loaded profile (named path). Returns 0, or 1 after one line on
 * stderr (server unreachable or refusing, profile too big). */
static int push_profile(CURL *curl, const struct flamme_profile *p, const char *path,
                        const struct push_opts *o)
{
    char *gz;
    size_t gzlen;
    int r = flamme_export_pprof_gz(p, 1, &gz, &gzlen);
    if (r != 0) {
        fprintf(stderr, PUSH_ERR "%s: %s\n", path,
                r == -2 ? "too many frame references to encode (see doc/format.md)" : "out of memory");
        return 1;
    }
    char name[2048];
    ingest_name(p, o, name, sizeof name);
    long long from, until;
    span(p, &from, &until);
    char *ename = cu.curl_easy_escape(curl, name, 0);
    const char *base = o->url;
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/')
        bl--;
    char url[4096];
    snprintf(url, sizeof url,
             "%.*s/ingest?name=%s&from=%lld&until=%lld&format=pprof&sampleRate=%u"
             "&spyName=flamme&units=samples&aggregationType=sum",
             (int)bl, base, ename ? ename : "", from, until, (unsigned)p->hdr.hz);
    cu.curl_free(ename);
    curl_mime *mime = cu.curl_mime_init(curl);
    curl_mimepart *part = cu.curl_mime_addpart(mime);
    cu.curl_mime_name(part, "profile");
    cu.curl_mime_filename(part, "profile.pprof");
    cu.curl_mime_type(part, "application/octet-stream");
    cu.curl_mime_data(part, gz, gzlen);
    char answer[256] = "";
    cu.curl_easy_setopt(curl, CURLOPT_URL, url);
    cu.curl_easy_setopt(curl, CURLOPT_MIMEPOST, mime);
    cu.curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect_body);
    cu.curl_easy_setopt(curl, CURLOPT_WRITEDATA, answer);
    cu.curl_easy_setopt(curl, CURLOPT_USERAGENT, "flamme-push/1.0");
    cu.curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
    cu.curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
    CURLcode cr = cu.curl_easy_perform(curl);
    long status = 0;
    cu.curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    cu.curl_mime_free(mime);
    free(gz);
    if (cr != CURLE_OK) {
        fprintf(stderr, PUSH_ERR "%s: cannot send to %.*s: %s\n", path, (int)bl, base,
                cu.curl_easy_strerror(cr));
        return 1;
    }
    if (status < 200 || status > 299) {
        answer[strcspn(answer, "\r\n")] = 0;
        fprintf(stderr, PUSH_ERR "%s: %.*s/ingest answered HTTP %ld: %s\n", path, (int)bl, base,
                status, answer);
        return 1;
    }
    if (o->verbose)
        fprintf(stderr, "flamme push: %s: sent as %s, %lld..%lld\n", path, name, from, until);
    return 0;
}

/* A file written to within the last SETTLE_S seconds may be caught between
 * the program's open and its header, or within a chunk's write: what it
 * holds then says nothing yet about whether it is a profile. */
#define SETTLE_S 2

double flamme_file_age(const struct stat *st)
{
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0)
        return -1;
    return (double)(now.tv_sec - st->st_mtim.tv_sec) +
           (double)(now.tv_nsec - st->st_mtim.tv_nsec) / 1e9;
}

/* 1 if path's data changed less than SETTLE_S seconds ago (or its age
 * cannot be told), 0 if it has settled. */
static int still_settling(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 1;
    return flamme_file_age(&st) < SETTLE_S; /* -1 (no clock) included */
}

/* 1 if process pid may still write a profile that began at start_ns
 * (CLOCK_REALTIME): it lives, and it started no later than that (a later
 * process is another one under a reused pid). When that cannot be told,
 * 1. */
static int writer_may_write(uint32_t pid, uint64_t start_ns)
{
    if (!pid || pid > INT32_MAX)
        return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%u/stat", (unsigned)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return errno != ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* Field 22, starttime in clock ticks since boot; fields 3.. follow the
     * last ')' (the command name may hold anything). */
    const char *q = strrchr(buf, ')');
    unsigned long long ticks = 0;
    if (!q || sscanf(q + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                            "%*d %*d %llu", &ticks) != 1)
        return 1;
    unsigned long long btime = 0;
    if (!(f = fopen("/proc/stat", "re")))
        return 1;
    char line[256];
    while (fgets(line, sizeof line, f) && sscanf(line, "btime %llu", &btime) != 1)
        ;
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (!btime || hz <= 0)
        return 1;
    /* Seconds, with btime's own rounding: 2 s of slack. */
    return btime + ticks / (unsigned long long)hz <= start_ns / 1000000000ull + 2;
}

/* Loads and sends one file. 0 sent; 1 failed (said); 2 not a usable profile
 * (said); 3 not complete yet (nothing said). With need_complete (--watch),
 * a file that does not load, or ends within a chunk, is only judged once it
 * has stopped changing: until then it is "not complete yet", not "not a
 * profile" (a segment the program has just created is empty for a moment,
 * and one it is writing may end mid-chunk); an incomplete one is sent as it
 * stands (said) only once its program is gone. */
static int push_file(CURL *curl, const char *path, const struct push_opts *o, int need_complete)
{
    struct flamme_profile p;
    char err[512];
    if (flamme_profile_load(path, &p, err, sizeof err) != 0) {
        if (need_complete && still_settling(path))
            return 3;
        fprintf(stderr, PUSH_ERR "%s\n", err);
        return 2;
    }
    /* An incomplete file that stopped changing is still waited for while
     * its program may write more (a program idle for a while); once that
     * program is gone (killed), what it wrote is all there will be. */
    int ended = 0;
    if (need_complete && !p.complete &&
        (still_settling(path) ||
         (!p.truncated && !(ended = !writer_may_write(p.hdr.pid, p.hdr.start_realtime_ns))))) {
        flamme_profile_free(&p);
        return 3;
    }
    if (ended)
        fprintf(stderr, PUSH_ERR "%s: incomplete, its program (pid %u) ended without finishing "
                "it; sending what it wrote\n", path, (unsigned)p.hdr.pid);
    else if (p.truncated)
        fprintf(stderr, PUSH_ERR "%s: file is truncated or damaged; sending what was readable\n",
                path);
    int rc = push_profile(curl, &p, path, o);
    flamme_profile_free(&p);
    return rc;
}

static volatile sig_atomic_t stop_watch;

static void on_stop(int sig)
{
    (void)sig;
    stop_watch = 1;
}

/* Files already handled in this run (pushed and kept, or unusable), by
 * name and identity: a new file under an old name (a pid the system gave
 * out again, a profile written over) is a new profile and is sent. */
struct seen_file {
    char *name;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct seen {
    struct seen_file *v;
    size_t n, cap;
};

static int same_file(const struct seen_file *f, const char *name, const struct stat *st)
{
    return f->dev == st->st_dev && f->ino == st->st_ino && f->size == st->st_size &&
           f->mtime.tv_sec == st->st_mtim.tv_sec && f->mtime.tv_nsec == st->st_mtim.tv_nsec &&
           strcmp(f->name, name) == 0;
}

static int seen_has(const struct seen *s, const char *name, const struct stat *st)
{
    for (size_t i = 0; i < s->n; i++)
        if (same_file(&s->v[i], name, st))
            return 1;
    return 0;
}

/* Remembers name as st; an older entry under the same name is replaced.
 * Without memory the file is simply tried again on the next pass. */
static void seen_add(struct seen *s, const char *name, const struct stat *st)
{
    struct seen_file *f = NULL;
    for (size_t i = 0; i < s->n && !f; i++)
        if (strcmp(s->v[i].name, name) == 0)
            f = &s->v[i];
    if (!f) {
        if (s->n == s->cap) {
            size_t nc = s->cap ? 2 * s->cap : 64;
            struct seen_file *a = realloc(s->v, nc * sizeof *a);
            if (!a)
                return;
            s->v = a;
            s->cap = nc;
        }
        char *d = strdup(name);
        if (!d)
            return;
        f = &s->v[s->n++];
        f->name = d;
    }
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    f->size = st->st_size;
    f->mtime = st->st_mtim;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* --watch: passes over dir, in name order (a run's segments in sequence).
 * Returns 0 when stopped (signal, --once), 1 if the directory cannot be read. */
static int watch(CURL *curl, const char *dir, const struct push_opts *o, int del, int once,
                 double interval)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct seen seen = {0};
    int rc = 0;
    while (!stop_watch) {
        DIR *d = opendir(dir);
        if (!d) {
            fprintf(stderr, PUSH_ERR "cannot read %s: %s\n", dir, strerror(errno));
            rc = 1;
            break;
        }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 4, ".flm") != 0 || e->d_name[0] == '.')
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **a = realloc(names, cap * sizeof *a);
                if (!a)
                    break;
                names = a;
            }
            if ((names[n] = strdup(e->d_name)))
                n++;
        }
        closedir(d);
        if (n)
            qsort(names, n, sizeof *names, by_name);
        for (size_t i = 0; i < n && !stop_watch; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            struct stat st;
            if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || seen_has(&seen, names[i], &st))
                continue;
            int r = push_file(curl, path, o, 1);
            int gone = 0;
            if (r == 0 && del) {
                gone = unlink(path) == 0;
                if (!gone)
                    fprintf(stderr, PUSH_ERR "sent %s but cannot delete it: %s\n", path,
                            strerror(errno));
            }
            /* Remembered as it was before the read: a file that changed
             * meanwhile is looked at again, as a new version. */
            if ((r == 0 || r == 2) && !gone)
                seen_add(&seen, names[i], &st);
        }
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        if (once)
            break;
        struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
        while (!stop_watch && nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    for (size_t i = 0; i < seen.n; i++)
        free(seen.v[i].name);
    free(seen.v);
    return rc;
}

int flamme_cmd_push(int argc, char **argv)
{
    struct push_opts o = {0};
    o.url = getenv("FLAMME_PUSH_URL");
    if (!o.url || !*o.url)
        o.url = "http://127.0.0.1:4040";
    const char *dir = NULL;
    int del = 0, once = 0;
    double interval = 1.0;
    const char **files = (const char **)argv; /* gathered in argv's own front */
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = !strcmp(a, "--url") || !strcmp(a, "--app") || !strcmp(a, "--label") ||
                      !strcmp(a, "--watch") || !strcmp(a, "--interval");
        if (has_val && i + 1 >= argc) {
            fprintf(stderr, PUSH_ERR "%s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--url"))
            o.url = argv[++i];
        else if (!strcmp(a, "--app"))
            o.app = argv[++i];
        else if (!strcmp(a, "--label")) {
            const char *l = argv[++i];
            if (!strchr(l, '=') || l[0] == '=' || o.nlabels == MAX_LABELS) {
                fprintf(stderr, PUSH_ERR "--label wants KEY=VALUE (at most %d): %s\n", MAX_LABELS, l);
                return 2;
            }
            o.labels[o.nlabels++] = l;
        } else if (!strcmp(a, "--watch"))
            dir = argv[++i];
        else if (!strcmp(a, "--interval")) {
            char *end;
            interval = strtod(argv[++i], &end);
            if (*end || !(interval >= 0.05 && interval <= 3600)) {
                fprintf(stderr, PUSH_ERR "--interval wants seconds in 0.05..3600: %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--delete"))
            del = 1;
        else if (!strcmp(a, "--once"))
            once = 1;
        else if (!strcmp(a, "-v"))
            o.verbose = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            push_usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, PUSH_ERR "unknown option: %s\n", a);
            return 2;
        } else
            files[nfiles++] = a;
    }
    if ((!dir && !nfiles) || (dir && nfiles)) {
        push_usage(stderr);
        return 2;
    }
    if (strncmp(o.url, "http://", 7) != 0 && strncmp(o.url, "https://", 8) != 0) {
        fprintf(stderr, PUSH_ERR "--url must start with http:// or https://: %s\n", o.url);
        return 2;
    }
    if (curl_load() != 0)
        return 1;
    if (cu.curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, PUSH_ERR "cannot initialise libcurl\n");
        return 1;
    }
    CURL *curl = cu.curl_easy_init();
    int rc = 0;
    if (!curl) {
        fprintf(stderr, PUSH_ERR "cannot initialise libcurl\n");
        rc = 1;
    } else if (dir)
        rc = watch(curl, dir, &o, del, once, interval);
    else
        for (int i = 0; i < nfiles; i++) {
            int r = push_file(curl, files[i], &o, 0);
            if (r && (r > rc || rc == 0))
                rc = r == 3 ? 0 : r;
        }
    if (curl)
        cu.curl_easy_cleanup(curl);
    cu.curl_global_cleanup();
    return rc;
}
