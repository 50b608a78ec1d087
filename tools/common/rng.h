/*
 * rng.h — the tools' pseudo-random numbers: splitmix64, small and seedable, so that a seed
 * gives the same workload and the same fault draws in every run. Not for anything secret.
 * Inline, as the workloads draw a number per token.
 */
#ifndef KVIDX_TOOLS_RNG_H
#define KVIDX_TOOLS_RNG_H

#include <stdint.h>

/* The next number of the sequence whose state is *s. */
static inline uint64_t tc_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif /* KVIDX_TOOLS_RNG_H */
