/*
 * guard.h — internal, never installed: the writer's SIGBUS guard over mappings that other
 * processes can truncate (the reader registry, which every member of the index's group may
 * write). A fault in a guarded range maps zero pages over the whole range and sets the range's
 * hit flag; the faulting access then completes on the zeros, and the writer, seeing the flag,
 * stops trusting the range and replaces it (writer.c). Faults anywhere else go to whatever
 * handler was installed before, or kill the process as SIGBUS always did.
 */
#ifndef KVIDX_GUARD_H
#define KVIDX_GUARD_H

#include <stddef.h>
#include <stdint.h>

/*
 * Guards [base, base + len) (page-aligned, a MAP_SHARED mapping the caller owns), setting
 * *hit to 1 on a fault in it. Installs the process's SIGBUS handler on first use. Returns 0,
 * or -ENOSPC when KV_GUARD_MAX ranges are guarded already. Thread-safe.
 */
#define KV_GUARD_MAX 64
int kv_guard_add(void *base, size_t len, uint32_t *hit);

/* Stops guarding the range starting at base (before it is unmapped). Thread-safe. */
void kv_guard_del(void *base);

#endif /* KVIDX_GUARD_H */
