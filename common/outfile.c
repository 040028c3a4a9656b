/*
 * common/outfile.c — creating output files without following links or
 * truncating in place (see common/outfile.h).
 */
#include "common/outfile.h"
#include "common/fds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int flamme_out_create_excl(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

int flamme_out_open(const char *path, char *tmp, size_t tmpcap)
{
    tmp[0] = '\0';
    struct stat st;
    /* stat follows links: a link to a device (/dev/stdout) is written to
     * as the device; a link to a file, or a dangling one, gets replaced. */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (snprintf(tmp, tmpcap, "%s.XXXXXX", path) >= (int)tmpcap) {
        tmp[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    /* mkostemp: O_EXCL, mode 0600 minus the umask */
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        tmp[0] = '\0';
        return -1;
    }
    return fd;
}

int flamme_out_commit(const char *tmp, const char *path)
{
    if (!tmp[0])
        return 0;
    if (rename(tmp, path) == 0)
        return 0;
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
}

void flamme_out_abort(const char *tmp)
{
    if (tmp[0])
        unlink(tmp);
}

FILE *flamme_out_fopen(const char *path, char *tmp, size_t tmpcap)
{
    int fd = flamme_out_open(path, tmp, tmpcap);
    if (fd < 0)
        return NULL;
    FILE *f = flamme_fdopen_or_close(fd, "w");
    if (!f) {
        int e = errno;
        flamme_out_abort(tmp);
        errno = e;
    }
    return f;
}

int flamme_out_fclose(FILE *f, const char *tmp, const char *path, int ok)
{
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        int e = errno;
        flamme_out_abort(tmp);
        errno = e ? e : EIO;
        return -1;
    }
    if (!ok) {
        flamme_out_abort(tmp);
        return 0;
    }
    return flamme_out_commit(tmp, path);
}

/* Appends pattern to out at *o with %p, %n (when seq > 0) and %% replaced.
 * Returns 0, or -1 if it does not fit. */
static int expand_name(const char *pattern, int pid, unsigned seq, char *out, size_t outlen,
                       size_t *o)
{
    for (const char *p = pattern; *p; p++) {
        char tmp[32];
        if (p[0] == '%' && p[1] == 'p') {
            snprintf(tmp, sizeof tmp, "%d", pid);
            p++;
        } else if (p[0] == '%' && p[1] == 'n' && seq) {
            snprintf(tmp, sizeof tmp, "%06u", seq);
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            tmp[0] = '%', tmp[1] = 0;
            p++;
        } else {
            tmp[0] = *p, tmp[1] = 0;
        }
        size_t l = strlen(tmp);
        if (*o + l + 1 > outlen)
            return -1;
        memcpy(out + *o, tmp, l);
        *o += l;
    }
    out[*o] = 0;
    return 0;
}

/* 1 if pattern holds a %n that expand_name replaces. */
static int has_seq(const char *pattern)
{
    for (const char *p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == '%')
            p++;
        else if (p[0] == '%' && p[1] == 'n')
            return 1;
    }
    return 0;
}

int flamme_out_name(const char *pattern, int pid, int periodic, unsigned seq, char *out,
                    size_t outlen)
{
    size_t o = 0;
    if (!outlen)
        return -1;
    out[0] = 0;
    if (!periodic || has_seq(pattern))
        return expand_name(pattern, pid, periodic ? seq : 0, out, outlen, &o);
    /* ".<seq>" before ".flm": the pattern's last four bytes, kept literal */
    size_t l = strlen(pattern);
    int ext = l > 4 && strcmp(pattern + l - 4, ".flm") == 0;
    char stem[4096];
    if ((ext ? l - 4 : l) >= sizeof stem)
        return -1;
    memcpy(stem, pattern, ext ? l - 4 : l);
    stem[ext ? l - 4 : l] = 0;
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".%06u%s", seq, ext ? ".flm" : "");
    if (expand_name(stem, pid, 0, out, outlen, &o) != 0 || o + strlen(suffix) + 1 > outlen)
        return -1;
    memcpy(out + o, suffix, strlen(suffix) + 1);
    return 0;
}
