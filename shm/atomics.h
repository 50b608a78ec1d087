/*
 * atomics.h — internal, never installed: the one thin atomics layer kvidx uses on shared
 * memory.
 *
 * Every access to a word that another process may touch concurrently goes through these, with
 * its memory order spelled out, so that ThreadSanitizer and the reader of the code see the same
 * thing. No `volatile` is used for synchronisation anywhere in kvidx.
 */
#ifndef KVIDX_ATOMICS_H
#define KVIDX_ATOMICS_H

#include <stdbool.h>
#include <stdint.h>

#define ld_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ld_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ld_seqcst(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define st_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define st_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define st_seqcst(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define add_relaxed(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define fence_acquire() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define fence_release() __atomic_thread_fence(__ATOMIC_RELEASE)
#define fence_seqcst() __atomic_thread_fence(__ATOMIC_SEQ_CST)

/* Strong compare-and-swap, sequentially consistent on success and failure. */
static inline bool cas_u64(uint64_t *p, uint64_t expected, uint64_t desired)
{
	return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_SEQ_CST);
}

/* Writer-only counters in the segment: one writer, relaxed, readers may see them lag. */
#define stat_add(p, v) st_relaxed((p), ld_relaxed(p) + (v))

#define KVIDX_CACHELINE 64
#define kvidx_unlikely(x) __builtin_expect(!!(x), 0)

#endif /* KVIDX_ATOMICS_H */
