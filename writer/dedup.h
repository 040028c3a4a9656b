/*
 * writer/dedup.h — interning of addresses and stacks for the writer thread:
 * each distinct return address gets a dense frame id, each distinct sequence
 * of frame ids a dense stack id. Single owner (the writer thread); allocates;
 * grows without bound (a profile's distinct stacks), amortized O(1) per call.
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

/* Stack id of the sequence ids[0..n) (n may be 0); *is_new = 1 the first time.
 * Returns UINT32_MAX on allocation failure. */
uint32_t flamme_dedup_stack(flamme_dedup *d, const uint32_t *ids, uint32_t n, int *is_new);

#endif
