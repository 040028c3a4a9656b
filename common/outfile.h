/*
 * common/outfile.h — how flamme creates every file it writes (profiles from
 * the agent in every mode, the tools' -o outputs): never through a link,
 * never by truncating a file in place, mode 0600 unless the umask is stricter.
 *
 * A regular file (or nothing, or a symbolic link) at PATH is replaced by a
 * fresh file: it is created beside PATH under a unique name (O_EXCL, so
 * nothing is followed) and renamed onto PATH, which replaces the directory
 * entry (a link is replaced, not followed; a file hard-linked elsewhere keeps
 * its data). A device, FIFO or socket at PATH (reached directly or through
 * a link: /dev/null, /dev/stdout) is opened for writing as it is.
 * Called by agent/agent.c (profile start, any thread holding the life lock)
 * and the tools. Not async-signal-safe.
 */
#ifndef FLAMME_COMMON_OUTFILE_H
#define FLAMME_COMMON_OUTFILE_H
#include <stddef.h>

/* Opens an output for PATH. Returns a write-only fd (O_CLOEXEC), or -1 with
 * errno. When tmp is non-empty on return the data goes to the new file tmp,
 * and flamme_out_commit must put it in place (or flamme_out_abort drop it);
 * tmpcap must hold strlen(path) + 8. */
int flamme_out_open(const char *path, char *tmp, size_t tmpcap);

/* Renames tmp onto path (no-op when tmp is ""). Returns 0, or -1 with errno
 * (tmp is then removed). */
int flamme_out_commit(const char *tmp, const char *path);

/* Removes tmp (no-op when tmp is ""). */
void flamme_out_abort(const char *tmp);

/* Creates path only if nothing is there, not even a dangling link
 * (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600 before the umask). fd or -1/errno. */
int flamme_out_create_excl(const char *path);

/* The file name a profile pattern gives (FLAMME_OUTPUT, `record -o`): %p is
 * pid, %% a '%'. For a continuous profile (periodic) segment seq's name: %n
 * is seq as six digits, or when the pattern has no %n, ".<seq>" goes before
 * its ".flm" (or at its end). The agent names its files with it and
 * `flamme record` finds them with it. Returns 0, or -1 if the name does not
 * fit in outlen. */
int flamme_out_name(const char *pattern, int pid, int periodic, unsigned seq, char *out,
                    size_t outlen);

/* stdio forms for the tools: flamme_out_fopen opens PATH as above ("w");
 * flamme_out_fclose closes f and, if ok and every write succeeded, commits
 * (else drops the new file). Return NULL / -1 with errno. */
#include <stdio.h>
FILE *flamme_out_fopen(const char *path, char *tmp, size_t tmpcap);
int flamme_out_fclose(FILE *f, const char *tmp, const char *path, int ok);

#endif
