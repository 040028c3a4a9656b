/*
 * tests/fuzz/harness.c — the afl++ target of `make fuzz` (mk/fuzz.mk): one
 * input drives the profile reader and every verb, or the folded-text parser.
 *
 * Input: byte 0 chooses the mode: bit 7 folded text, else bit 6 a raw
 * file, else a payload (bit 5: a 1.x file, else the current major); bits
 * 0-3 the verbs' options (1 --threads or a second
 * svg, 2 --fold-gc, 4 diff --folded, 8 a drawn diff). A payload input has
 * byte 1 = minor version (bits 0-3), chunks - 1 (bits 4-5), last chunk cut
 * short (bits 6-7 both set), then the records. The harness wraps the
 * payload into a real file: the 64-byte header, then the payload cut into
 * 1-4 chunks, each with valid zlib data and CRC, so mutations reach the
 * record parser instead of dying at the CRC check. A raw input is the whole
 * file as is (header and chunk checks). On a profile it runs collapse,
 * report, svg, export (speedscope, pprof, folded) and diff, in this process,
 * output to /dev/null; on folded text, svg and diff.
 *
 * Without afl: `harness FILE` runs one input; with FLAMME_FUZZ_STATS=1 it
 * prints "input_bytes file_bytes peak_rss_kb" (file: what the verbs read).
 * tests/fuzz/seeds.py turns profiles into inputs of this form.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/profile.h"
#include "tools/cmds.h"

#define FUZZ_MAX_INPUT (1u << 20)

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int write_all(int fd, const void *b, size_t n)
{
    const uint8_t *p = b;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k <= 0)
            return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

/* Writes header + chunks of payload[0..n) to fd; returns the file size. */
static size_t write_profile(int fd, uint8_t mode, uint8_t opts, const uint8_t *payload, size_t n)
{
    uint8_t h[FLAMME_HEADER_SIZE] = { 0 };
    memcpy(h, FLAMME_MAGIC, 8);
    h[8] = (mode & 0x20) ? FLAMME_VERSION_MAJOR_OLDEST : FLAMME_VERSION_MAJOR;
    h[10] = opts & 0x0f; /* minor 0..15 */
    put32(h + 12, FLAMME_HEADER_SIZE);
    put32(h + 16, 4242);
    put32(h + 20, 99);
    write_all(fd, h, sizeof h);
    size_t total = sizeof h;
    unsigned chunks = 1 + ((opts >> 4) & 3);
    int cut = (opts & 0xc0) == 0xc0;
    size_t per = n / chunks + 1, off = 0;
    while (off < n || (n == 0 && off == 0)) {
        size_t len = n - off < per ? n - off : per;
        uLongf zlen = compressBound(len);
        uint8_t *z = malloc(16 + zlen);
        if (!z)
            break;
        compress2(z + 16, &zlen, payload + off, len, 1);
        put32(z, FLAMME_CHUNK_MAGIC);
        put32(z + 4, (uint32_t)len);
        put32(z + 8, (uint32_t)zlen);
        put32(z + 12, (uint32_t)crc32(0, payload + off, (uInt)len));
        off += len;
        size_t wlen = 16 + zlen;
        if (cut && off >= n)
            wlen = wlen / 2;
        write_all(fd, z, wlen);
        total += wlen;
        free(z);
        if (n == 0)
            break;
    }
    return total;
}

/* This process's peak resident memory in KB (VmHWM: unlike ru_maxrss it is
 * not inherited across exec from the parent that spawned us); -1 if unknown. */
static long peak_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static int run(int argc, char **argv)
{
    const char *verb = argv[0];
    if (!strcmp(verb, "collapse"))
        return flamme_cmd_collapse(argc, argv);
    if (!strcmp(verb, "report"))
        return flamme_cmd_report(argc, argv);
    if (!strcmp(verb, "svg"))
        return flamme_cmd_svg(argc, argv);
    if (!strcmp(verb, "export"))
        return flamme_cmd_export(argc, argv);
    return flamme_cmd_diff(argc, argv);
}

#define RUN(...)                                                                               \
    do {                                                                                       \
        char *a_[] = { __VA_ARGS__, NULL };                                                    \
        run((int)(sizeof a_ / sizeof a_[0]) - 1, a_);                                          \
    } while (0)

int main(int argc, char **argv)
{
    static uint8_t in[FUZZ_MAX_INPUT];
    int ifd = argc > 1 ? open(argv[1], O_RDONLY) : 0;
    ssize_t n = ifd < 0 ? -1 : read(ifd, in, sizeof in);
    if (n < 2)
        return 0;
    /* FLAMME_FUZZ_TMP: run.py's directory, where an input that crashed or
     * hung leaves its file behind */
    char path[4096];
    const char *dir = getenv("FLAMME_FUZZ_TMP");
    snprintf(path, sizeof path, "%s/flamme-fuzz-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    size_t fbytes;
    uint8_t mode = in[0];
    if (mode & 0xc0) {
        fbytes = (size_t)n - 1;
        write_all(fd, in + 1, fbytes);
    } else
        fbytes = write_profile(fd, mode, in[1], in + 2, (size_t)n - 2);
    close(fd);
    int err = dup(2); /* for the stats line */
    if (!freopen("/dev/null", "w", stdout) || (!getenv("FLAMME_FUZZ_STDERR") && !freopen("/dev/null", "w", stderr)))
        return 0;
    if (mode & 0x80) {
        RUN("svg", path, "-o", "/dev/null");
        if (mode & 1)
            RUN("svg", "--reverse", "--inverted", path, path);
        RUN("diff", path, path, "--folded", "--normalize");
    } else {
        int th = mode & 1;
        RUN("collapse", path, th ? "--threads" : "--raw", mode & 2 ? "--fold-gc" : "--lines");
        RUN("report", path);
        RUN("svg", path, th ? "--threads" : "--flamechart", "-o", "/dev/null");
        if (th) {
            RUN("export", path, "--format", "speedscope", "--threads");
            RUN("export", path, "--format", "pprof", "--threads");
            RUN("export", path, "--format", "folded", "--threads");
        } else {
            RUN("export", path, "--format", "speedscope");
            RUN("export", path, "--format", "pprof");
            RUN("export", path, "--format", "folded");
        }
        if (mode & 4)
            RUN("diff", path, path, "--folded");
        if (mode & 8)
            RUN("diff", path, path, "--normalize", "-o", "/dev/null");
    }
    unlink(path);
    if (getenv("FLAMME_FUZZ_STATS"))
        dprintf(err, "%zd %zu %ld\n", n, fbytes, peak_kb());
    return 0;
}
