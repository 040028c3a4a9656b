/*
 * tools/export.h — what tools/export.c offers other verbs (push).
 */
#ifndef FLAMME_TOOLS_EXPORT_H
#define FLAMME_TOOLS_EXPORT_H
#include <stddef.h>

#include "common/profile.h"

/* p as a gzip-compressed pprof profile (what `flamme export --format pprof`
 * writes; threads: a "thread" label on each sample) in a malloc'd buffer.
 * Returns 0 (*data, *len set; free *data), -1 on allocation failure, -2
 * past the frame reference budget (doc/format.md). */
int flamme_export_pprof_gz(const struct flamme_profile *p, int threads, char **data, size_t *len);

#endif
