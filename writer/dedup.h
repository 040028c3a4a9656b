/*
 * writer/dedup.h — interning of addresses for the writer thread: each
 * distinct return address gets a dense frame id (stacks: writer/intern.h).
 * Single owner (the writer thread); allocates; grows without bound (a
 * profile's distinct frames), amortized O(1) per call.
 */
#ifndef FLAMME_WRITER_DEDUP_H
#define FLAMME_WRITER_DEDUP_H
#include <stdint.h>

typedef struct flamme_dedup flamme_dedup;

flamme_dedup *flamme_dedup_new(void);
void flamme_dedup_free(flamme_dedup *d);

/* Frame id of addr; *is_new = 1 the first time addr is seen.
 * Returns UINT32_MAX on allocation failure. */
uint32_t flamme_dedup_frame(flamme_dedup *d, uint64_t addr, int *is_new);

#endif
