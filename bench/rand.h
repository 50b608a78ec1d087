/*
 * rand.h — the benchmarks' pseudo-random numbers: xorshift64, a uniform index below n, and
 * keys that are never 0. Seeded per run so that a configuration draws the same workload every
 * time; inline, as workload generators draw one per key.
 */
#ifndef KVIDX_BENCH_RAND_H
#define KVIDX_BENCH_RAND_H

#include <stdint.h>

static inline uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* A uniform index below n from a 64-bit random word. */
static inline uint64_t below(uint64_t x, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/* A random key that is never 0 (0 marks an empty slot in the naive table). */
static inline uint64_t rand_key(uint64_t *s)
{
	uint64_t k;

	do
		k = xorshift64(s);
	while (k == 0);
	return k;
}

#endif /* KVIDX_BENCH_RAND_H */
